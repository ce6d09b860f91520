/**
 * Types of aim-realtime.js, the browser client of the AIM realtime service
 * (docs/browser-client.md). Served beside it: GET /sdk/aim-realtime.d.ts.
 */

/** A bearer token, or a function giving one (called for every request). */
export type TokenSource = string | (() => string | Promise<string>);

export interface RetryOptions {
  /** Attempts in all, the first included (default 5). */
  attempts?: number;
  /** First backoff cap in ms, doubling per attempt (default 250). */
  baseDelayMs?: number;
  /** Largest backoff cap in ms (default 5000). */
  maxDelayMs?: number;
  /** The longest Retry-After of a -31011 waited out, in ms (default 60000): a longer one is
   * thrown at once (a LimitExceededError with its `retryAfterMs`), for the app to decide. */
  maxRetryAfterMs?: number;
}

export interface AimClientOptions {
  /** The service's origin (and path prefix, if any): requests go to `<baseUrl>/a2a`. */
  baseUrl: string;
  token: TokenSource;
  retry?: RetryOptions;
  /** One request's time to answer (default 30000). An open stream silent for 45 s counts as broken. */
  requestTimeoutMs?: number;
  /** How long join() waits while the session is `provisioning` (default 20000); then it throws
   * an AimError with reason "TIMEOUT". */
  readyTimeoutMs?: number;
  /** A fetch to use instead of the global one. */
  fetch?: typeof fetch;
}

export type InteractionClass = "text" | "pointer" | "confirmation" | "tool";
export type Capability = "audio_input" | "audio_output" | "vision_input";
export type VideoSource = "camera" | "screen";

/** What this device can do (RegisterEndpoint's `capabilities`). */
export interface Capabilities {
  audioInput?: boolean;
  audioOutput?: boolean;
  camera?: boolean;
  screen?: boolean;
  interactions?: InteractionClass[];
}

/** session.create's `requested`. */
export interface Requested {
  mediaBinding: "livekit-webrtc-v1";
  audio: "bidirectional";
  userVideoSources: VideoSource[];
  agentVideoSources: VideoSource[];
  interactions: InteractionClass[];
}

export interface CreateSessionOptions {
  /** This device's clientEndpointKey: stable across restarts of the app. */
  endpointKey: string;
  capabilities?: Capabilities;
  requested?: Requested;
  requiredCapabilities?: Capability[];
  recording?: "off";
  retention?: { transcript: "on" | "off"; summary: "off" };
  /** The message's text part (default "Start a voice session"). */
  text?: string;
  /** Return while the session is still `provisioning` instead of waiting up to 5 s. */
  returnImmediately?: boolean;
}

export interface ResumeSessionOptions {
  sessionId: string;
  /** The session's task (GetSession names it when left out). */
  taskId?: string;
  endpointKey: string;
  capabilities?: Capabilities;
}

export type SessionState =
  | "provisioning" | "ready" | "joining" | "active" | "reconnecting" | "ending" | "ended"
  | "failed";

export type TaskState =
  | "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING" | "TASK_STATE_INPUT_REQUIRED"
  | "TASK_STATE_AUTH_REQUIRED" | "TASK_STATE_COMPLETED" | "TASK_STATE_CANCELED"
  | "TASK_STATE_FAILED" | "TASK_STATE_REJECTED";

/** join()'s result, for livekit-client's `room.connect(url, token)`. */
export interface JoinResult {
  url: string;
  token: string;
  room: string;
  expiresAt: string;
  epoch: number;
}

/** An accepted SendInteraction. */
export interface Interaction {
  commandId: string;
  type: string;
  acceptedAt: string;
}

export interface Action {
  title: string;
  tool?: string;
  arguments?: Record<string, unknown>;
  media?: { side: "user" | "agent"; source: VideoSource };
  [member: string]: unknown;
}

/** What the agent asks the user to confirm. */
export interface Requirement {
  operationId: string;
  requirementId: string;
  action: Action;
  actionDigest: string;
  expectedVersion: number;
}

/** An operation (GetOperation's `operation`). */
export interface Operation {
  operationId: string;
  sessionId: string;
  kind: "action" | "media.request";
  state:
    | "pending" | "awaiting_confirmation" | "running" | "succeeded" | "failed" | "canceled"
    | "expired";
  createdBy: "client" | "provider";
  createdAt: string;
  updatedAt: string;
  requirement?: { requirementId: string; action: Action; actionDigest: string; expiresAt: string };
  [member: string]: unknown;
}

/** The session resource (GetSession's `session`). */
export interface SessionResource {
  sessionId: string;
  taskId: string;
  sessionEpoch: number;
  state: SessionState;
  version: number;
  endReason?: string;
  endpoints: { endpointId: string; clientEndpointKey: string; state: string }[];
  [member: string]: unknown;
}

export interface StateEvent {
  state: SessionState;
  epoch: number;
  taskState: TaskState;
  taskVersion: number;
}

/** The agent's state changed; `rotating` while a successor is brought in before the serving
 * agent's connection ends (the serving agent still answers, the session keeps its state:
 * nothing for the app to do), then the new agent's state. */
export interface AgentEvent {
  state: AgentState;
  rotating: boolean;
  /** The serving agent's generation (1, 2, …); null from a service that does not name it. */
  generation: number | null;
  /** While `rotating`: the generation being brought in. */
  successorGeneration: number | null;
  /** On the first event of a new generation after `rotating`: the generation it took over
   * from (the rotation is over); else null. */
  rotatedFrom: number | null;
}

export type AgentState =
  | "dispatching"
  | "dispatched"
  | "started"
  | "joined"
  | "listening"
  | "thinking"
  | "speaking"
  | "left"
  | "rotating";

export interface EndedEvent {
  state: SessionState;
  taskState: TaskState;
  endReason: string | null;
}

/** Session events by name. */
export interface SessionEventMap {
  state: StateEvent;
  agent: AgentEvent;
  requirement: Requirement;
  interaction: Interaction;
  superseded: { epoch: number };
  rebound: { epoch: number };
  ended: EndedEvent;
  error: { error: AimError };
}

export class AimClient {
  constructor(options: AimClientOptions);
  /** Any other JSON-RPC method (GetTask, aim.realtime.GetCommand, ...), retried the same way. */
  call(method: string, params: Record<string, unknown>): Promise<any>;
  createSession(options: CreateSessionOptions): Promise<Session>;
  resumeSession(options: ResumeSessionOptions): Promise<Session>;
}

export class Session {
  private constructor();
  readonly sessionId: string;
  readonly taskId: string;
  readonly state: SessionState;
  readonly epoch: number;
  readonly taskState: TaskState;
  readonly taskVersion: number;
  readonly endpointId: string | null;
  readonly requirement: Requirement | null;
  readonly superseded: boolean;
  /** The agent's state as the stream last named it (null before it did). */
  readonly agentState: AgentState | null;
  /** The serving agent's generation as the stream last named it (null before it did). */
  readonly agentGeneration: number | null;

  /** Listen; the first listener starts the stream. Returns the unsubscribe function. */
  on<K extends keyof SessionEventMap>(name: K, fn: (event: SessionEventMap[K]) => void): () => void;
  off<K extends keyof SessionEventMap>(name: K, fn: (event: SessionEventMap[K]) => void): void;
  follow(): void;
  close(): void;
  join(): Promise<JoinResult>;
  sendText(text: string): Promise<Interaction>;
  sendInteraction(type: string, payload?: Record<string, unknown>): Promise<Interaction>;
  confirm(
    operationId: string, decision: "approve" | "deny", options?: { via?: "interaction" | "task" },
  ): Promise<Operation>;
  end(reason?: string): Promise<SessionResource>;
}

export interface AimErrorFields {
  code?: number | null;
  reason?: string;
  metadata?: Record<string, string>;
  retryAfterMs?: number | null;
  retryable?: boolean;
  httpStatus?: number | null;
  data?: object[];
  cause?: unknown;
}

export class AimError extends Error {
  constructor(message: string, fields?: AimErrorFields);
  /** The JSON-RPC code; null for a transport failure or a bare HTTP error. */
  readonly code: number | null;
  /** ErrorInfo.reason ("" if none). */
  readonly reason: string;
  readonly metadata: Record<string, string>;
  readonly retryAfterMs: number | null;
  readonly retryable: boolean;
  readonly httpStatus: number | null;
  /** The JSON-RPC error's `data` (ErrorInfo, BadRequest, ...). */
  readonly data: object[];
}
export class StaleEpochError extends AimError {
  readonly currentEpoch: number | null;
  /** metadata.reason: "superseded" | "rebound" | "ended" | "ahead". */
  readonly staleReason: string;
}
export class SupersededError extends StaleEpochError {}
export class InvalidStateError extends AimError {}
export class NotFoundError extends AimError {}
export class CommandConflictError extends AimError {}
export class LimitExceededError extends AimError {}
/** -31013: the tenant's session minutes of the UTC day or month are used up; never retried. */
export class AllowanceExhaustedError extends AimError {
  /** `session_minutes_per_day` or `session_minutes_per_month`. */
  readonly allowance: string;
  /** When the allowance resets (RFC 3339), or null when the service did not say. */
  readonly resetsAt: string | null;
}
export class UnavailableError extends AimError {}
/** -31401/-31403, HTTP 401/403. `authReason`: why a 401 (metadata.reason; "" if none). */
export class AuthError extends AimError {
  readonly authReason: string;
}
/** 401 token_expired: get a new token (a token function is asked again once, by itself). */
export class TokenExpiredError extends AuthError {}
/** 401 that a new token from the same source does not cure: invalid_signature, unknown_key,
 * invalid_audience, invalid_issuer, invalid_claims, malformed_token, token_not_yet_valid. */
export class AuthMisconfiguredError extends AuthError {}
/** The service's URL answered a redirect (reason "REDIRECT"): not followed, since that would
 * send the call's body and token to another URL, and not retried. */
export class RedirectError extends AimError {}
export class InvalidParamsError extends AimError {
  readonly violations: { field: string; description: string }[];
}
