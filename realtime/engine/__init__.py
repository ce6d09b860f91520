"""Load → decide → commit: the one path every session change takes, answered with values."""
