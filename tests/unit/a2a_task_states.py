"""The task states of A2A 1.0 as the older generations name them, one row a state: the 0.3
name (A2A notes §5) and the 0.1 name (A2A 0.1 notes §2), read side by side."""

from __future__ import annotations

from typing import Final

# 1.0 state: its 0.3 name, its 0.1 name
TASK_STATES: Final = {
    "TASK_STATE_SUBMITTED": ("submitted", "submitted"),
    "TASK_STATE_WORKING": ("working", "working"),
    "TASK_STATE_INPUT_REQUIRED": ("input-required", "input-required"),
    "TASK_STATE_AUTH_REQUIRED": ("auth-required", "input-required"),
    "TASK_STATE_COMPLETED": ("completed", "completed"),
    "TASK_STATE_CANCELED": ("canceled", "canceled"),
    "TASK_STATE_FAILED": ("failed", "failed"),
    "TASK_STATE_REJECTED": ("rejected", "failed"),
    "TASK_STATE_UNSPECIFIED": ("unknown", "unknown"),
}
V03_STATES: Final = [(state, v03) for state, (v03, _) in TASK_STATES.items()]
V01_STATES: Final = [(state, v01) for state, (_, v01) in TASK_STATES.items()]
