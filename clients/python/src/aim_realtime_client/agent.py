"""AgentSession: the agent worker's side of one session (`POST <providerUrl>`, profile §10).

    agent = AgentSession.from_metadata(ctx.job.metadata)
    handover = await agent.start()                       # joined; what it takes over
    operation = await agent.request_operation(action={"title": "Book a table"})
    ...
    message = agent.receive(packet.data, packet.topic)   # in the room's data_received
    await agent.ack(message.command_id)                  # taken in: no successor gets it again

Rotation across provider caps (docs/agents.md): `report_deadline` when the model's connection
will end, `save_context` whenever there is something a successor should know; a successor
(`successor_of` set) gets the context, the open operations and the unacknowledged
interactions from `start()`, and a predecessor gets `LeaveNow` from `receive` (its writes then
raise AgentReplacedError).

Calls go through the same caller as the device's (`aim_realtime_client.rpc`): retried with the
same body, so RequestOperation and UpdateOperation, whose requestId is minted once per call,
apply once; AppendTranscript is idempotent by its itemId (minted once when not given).
Operations the agent asked for or updated itself count as seen: `receive` and `sync` only
bring news.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final, Literal

import httpx

from aim_realtime_client.dispatch import (
    AgentMessage,
    DispatchMetadata,
    Handover,
    Inbox,
    InteractionMessage,
    OperationUpdate,
    parse_metadata,
)
from aim_realtime_client.rpc import RetryPolicy, RpcCaller, Sleep

OPEN_STATES: Final = frozenset({"pending", "awaiting_confirmation"})
_UNSET: Final[Any] = object()

AgentState = Literal["joined", "listening", "thinking", "speaking", "left"]
DeadlineReason = Literal["provider_cap", "provider_goaway", "planned"]


class AgentSession:
    """The provider API of one session, with the session's provider token."""

    def __init__(
        self,
        metadata: DispatchMetadata,
        *,
        retry: RetryPolicy | Mapping[str, int] | None = None,
        request_timeout_ms: int = 10_000,
        http: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        self.metadata = metadata
        extra: dict[str, Any] = {} if sleep is None else {"sleep": sleep}
        self.rpc = RpcCaller(
            metadata.provider_url,
            token=metadata.provider_token,
            retry=retry,
            request_timeout_ms=request_timeout_ms,
            http=http,
            transport=transport,
            **extra,
        )
        self.inbox = Inbox()

    @classmethod
    def from_metadata(
        cls, job_metadata: str | bytes | Mapping[str, Any], **options: Any
    ) -> AgentSession:
        """From the job's dispatch metadata (JSON text, bytes or a mapping); AgentMetadataError
        names each member that is missing or wrong. `options` go to the constructor."""
        return cls(parse_metadata(job_metadata), **options)

    def __repr__(self) -> str:
        return f"AgentSession({self.session_id}, epoch {self.epoch})"

    @property
    def session_id(self) -> str:
        return self.metadata.session_id

    @property
    def epoch(self) -> int:
        """The epoch of the room this agent was dispatched to; a handoff between the user's
        devices keeps the room, and calls at this epoch stay good for it."""
        return self.metadata.session_epoch

    @property
    def task_id(self) -> str:
        return self.metadata.task_id

    @property
    def retention(self) -> dict[str, str]:
        return self.metadata.retention

    @property
    def requested(self) -> dict[str, Any]:
        return self.metadata.requested

    @property
    def provider_url(self) -> str:
        return self.metadata.provider_url

    @property
    def provider_token(self) -> str:
        return self.metadata.provider_token

    @property
    def generation(self) -> int:
        """This agent's place among the session's agents (1, 2, …)."""
        return self.metadata.agent_generation

    @property
    def successor_of(self) -> int | None:
        """The generation this agent takes over from (a rotation), or None."""
        return self.metadata.successor_of

    async def __aenter__(self) -> AgentSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.rpc.aclose()

    async def call(self, method: str, **params: Any) -> Any:
        """`aim.provider.<method>` for this session (sessionId added)."""
        return await self.rpc.call(
            f"aim.provider.{method}", {"sessionId": self.session_id, **params}
        )

    async def report_state(self, state: AgentState) -> dict[str, Any]:
        """ReportAgentState: GetSession's `agent.state` shows it (last writer wins)."""
        result: dict[str, Any] = await self.call(
            "ReportAgentState", sessionEpoch=self.epoch, state=state
        )
        return result

    async def start(self, state: AgentState = "joined") -> Handover:
        """Report `state` (for a rotation's successor this is the handover: it serves from
        now on), then read what this agent takes over (`handover`)."""
        await self.report_state(state)
        return await self.handover()

    async def handover(self) -> Handover:
        """GetHandover: the context saved for a successor, the operations not over, and the
        interactions no agent acknowledged and this agent has not received yet (each is
        acted on once, whether it comes from here or from a data message)."""
        result = await self.call("GetHandover")
        context = result.get("context")
        interactions = []
        for body in result.get("interactions", []):
            message = InteractionMessage(
                str(body.get("type")),
                str(body.get("commandId")),
                body.get("sessionEpoch"),
                dict(body.get("payload") or {}),
            )
            if not self.inbox.taken(message):
                interactions.append(message)
        return Handover(
            generation=int(result["generation"]),
            agent_generation=int(result["agentGeneration"]),
            successor_of=result.get("successorOf"),
            reason=result.get("reason"),
            context=context["data"] if context else None,
            context_generation=context["generation"] if context else None,
            operations=list(result.get("operations", [])),
            interactions=interactions,
        )

    async def report_deadline(
        self, deadline: datetime, reason: DeadlineReason = "provider_cap"
    ) -> dict[str, Any]:
        """ReportDeadline: this agent's connection to its model ends at `deadline` (an aware
        datetime); the service brings a successor in before it."""
        if deadline.tzinfo is None:
            raise ValueError("deadline must be an aware datetime (with its time zone)")
        at = deadline.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        result: dict[str, Any] = await self.call(
            "ReportDeadline", sessionEpoch=self.epoch, deadline=at, reason=reason
        )
        return result

    async def save_context(self, context: str) -> int:
        """SaveContext: what a successor should know (at most 64 KiB of UTF-8; opaque to the
        service, replaced on each save); its size in bytes."""
        result = await self.call("SaveContext", sessionEpoch=self.epoch, context=context)
        return int(result["bytes"])

    async def ack(self, *command_ids: str) -> int:
        """AckInteractions: this agent has taken these interactions in, so no successor is
        given them again; how many still wait for an agent."""
        result = await self.call(
            "AckInteractions", sessionEpoch=self.epoch, commandIds=list(command_ids)
        )
        return int(result["unacknowledged"])

    async def request_operation(
        self,
        *,
        action: Mapping[str, Any],
        confirmation: Literal["required", "none"] = "required",
        expires_in_seconds: int | None = None,
    ) -> dict[str, Any]:
        """RequestOperation of kind `action` ({title, description?, tool?, arguments?}): the
        operation, `awaiting_confirmation` (the user is asked) or `running` without one."""
        return await self._request(
            "action", {"action": dict(action)}, confirmation, expires_in_seconds
        )

    async def request_media(
        self,
        side: Literal["user", "agent"],
        source: Literal["camera", "screen"],
        *,
        expires_in_seconds: int | None = None,
    ) -> dict[str, Any]:
        """RequestOperation of kind `media.request`: the user decides (media.decide)."""
        media = {"media": {"side": side, "source": source}}
        return await self._request("media.request", media, "required", expires_in_seconds)

    async def _request(
        self, kind: str, what: dict[str, Any], confirmation: str, expires: int | None
    ) -> dict[str, Any]:
        params: dict[str, Any] = {
            "sessionEpoch": self.epoch,
            "requestId": str(uuid.uuid4()),
            "kind": kind,
            "confirmation": confirmation,
            **what,
        }
        if expires is not None:
            params["expiresInSeconds"] = expires
        return self._own(await self.call("RequestOperation", **params))

    async def update_operation(
        self,
        operation_id: str,
        state: Literal["running", "succeeded", "failed"],
        *,
        result: Any = _UNSET,
        error: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """UpdateOperation of a confirmed operation: `running`, then `succeeded` (with
        `result`) or `failed` (with `error`)."""
        params: dict[str, Any] = {
            "requestId": str(uuid.uuid4()),
            "operationId": operation_id,
            "state": state,
        }
        if result is not _UNSET:
            params["result"] = result
        if error is not None:
            params["error"] = dict(error)
        return self._own(await self.call("UpdateOperation", **params))

    def _own(self, result: dict[str, Any]) -> dict[str, Any]:
        operation: dict[str, Any] = result["operation"]
        self.inbox.seen_update(operation["operationId"], operation["state"])
        return operation

    async def append_transcript(
        self, role: Literal["user", "agent"], text: str, item_id: str | None = None
    ) -> str:
        """AppendTranscript of stable text (needs `retention.transcript` on, else
        CapabilityUnavailable -31009): the itemId, the message's id in the task history."""
        item = item_id or str(uuid.uuid4())
        await self.call(
            "AppendTranscript", sessionEpoch=self.epoch, itemId=item, role=role, text=text
        )
        return item

    async def operations(self) -> list[dict[str, Any]]:
        """ListOperations: every operation of the session."""
        result = await self.call("ListOperations")
        operations: list[dict[str, Any]] = result["operations"]
        return operations

    def receive(self, payload: bytes | str, topic: str | None) -> AgentMessage | None:
        """The service's message in a LiveKit data packet: InteractionMessage, OperationUpdate
        or LeaveNow (a successor took over: leave); None for another topic and for repeats (an
        interaction's commandId, an operation's state, seen before). AgentMessageError if it
        is not one."""
        return self.inbox.receive(payload, topic)

    async def sync(self) -> list[OperationUpdate]:
        """The operations whose state was resolved and not seen yet (by `receive`, `sync`, or
        this agent's own calls): what happened before this agent listened."""
        news = []
        for operation in await self.operations():
            operation_id, state = str(operation["operationId"]), str(operation["state"])
            if state in OPEN_STATES or self.inbox.seen_update(operation_id, state):
                continue
            news.append(OperationUpdate(operation_id, state, operation=operation))
        return news
