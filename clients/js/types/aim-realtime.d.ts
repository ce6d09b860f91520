export { AimClient } from "./client.js";
export { Events } from "./events.js";
/**
 * made by AimClient, never by the app
 */
export type Session = import("./session.js").Session;
export type JoinResult = import("./session.js").JoinResult;
export type Capabilities = import("./session.js").Capabilities;
export type ConfirmOptions = import("./session.js").ConfirmOptions;
export type CreateSessionOptions = import("./client.js").CreateSessionOptions;
export type ResumeSessionOptions = import("./client.js").ResumeSessionOptions;
export type ClientOptions = import("./wire.js").ClientOptions;
export type RetryOptions = import("./wire.js").RetryOptions;
export type CallOptions = import("./wire.js").CallOptions;
export type ErrorFields = import("./errors.js").ErrorFields;
export type EventName = import("./events.js").EventName;
export type EventMap = import("./events.js").EventMap;
export type AnyEvent = import("./events.js").AnyEvent;
export type SessionEvent = import("./events.js").SessionEvent;
export type EventsOptions = import("./events.js").EventsOptions;
export type StateEvent = import("./events.js").StateEvent;
export type AgentEvent = import("./events.js").AgentEvent;
export type Requirement = import("./events.js").Requirement;
export type RequirementEvent = import("./events.js").RequirementEvent;
export type Interaction = import("./events.js").Interaction;
export type InteractionEvent = import("./events.js").InteractionEvent;
export type SupersededEvent = import("./events.js").SupersededEvent;
export type ReboundEvent = import("./events.js").ReboundEvent;
export type EndedEvent = import("./events.js").EndedEvent;
export type StreamFailedEvent = import("./events.js").StreamFailedEvent;
export type UpdateEvent = import("./events.js").UpdateEvent;
export { AimError, AllowanceExhaustedError, AuthError, AuthMisconfiguredError, CommandConflictError, InvalidParamsError, InvalidStateError, LimitExceededError, NotFoundError, RedirectError, StaleEpochError, SupersededError, TokenExpiredError, UnavailableError } from "./errors.js";
