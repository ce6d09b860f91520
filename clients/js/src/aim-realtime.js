/**
 * aim-realtime-client: the browser client of the AIM realtime service. ES modules, no
 * dependency: fetch, ReadableStream and TextDecoder. The same code is served by the service
 * at /sdk/aim-realtime.js.
 *
 *   import {AimClient, Events} from "aim-realtime-client";
 *   const client = new AimClient({baseUrl: "https://<service>", token: () => myToken()});
 *   const session = await client.createSession({endpointKey: "alice-phone"});
 *   session.on(Events.STATE, ({state}) => console.log(state));
 *   const {url, token} = await session.join();  // livekit-client: room.connect(url, token)
 *
 * Every mutating call mints one commandId when it is called and, when the answer is lost or
 * the service says to retry, sends the very same request again: it applies once. The room
 * binding is in "aim-realtime-client/livekit" (livekit.js).
 * @module aim-realtime-client
 */

export {AimClient} from "./client.js";
export {
  AimError,
  AllowanceExhaustedError,
  AuthError,
  AuthMisconfiguredError,
  CommandConflictError,
  InvalidParamsError,
  InvalidStateError,
  LimitExceededError,
  NotFoundError,
  RedirectError,
  StaleEpochError,
  SupersededError,
  TokenExpiredError,
  UnavailableError,
} from "./errors.js";
export {Events} from "./events.js";

/**
 * @typedef {import("./session.js").Session} Session made by AimClient, never by the app
 * @typedef {import("./session.js").JoinResult} JoinResult
 * @typedef {import("./session.js").Capabilities} Capabilities
 * @typedef {import("./session.js").ConfirmOptions} ConfirmOptions
 * @typedef {import("./client.js").CreateSessionOptions} CreateSessionOptions
 * @typedef {import("./client.js").ResumeSessionOptions} ResumeSessionOptions
 * @typedef {import("./wire.js").ClientOptions} ClientOptions
 * @typedef {import("./wire.js").RetryOptions} RetryOptions
 * @typedef {import("./wire.js").CallOptions} CallOptions
 * @typedef {import("./errors.js").ErrorFields} ErrorFields
 * @typedef {import("./events.js").EventName} EventName
 * @typedef {import("./events.js").EventMap} EventMap
 * @typedef {import("./events.js").AnyEvent} AnyEvent
 * @typedef {import("./events.js").SessionEvent} SessionEvent
 * @typedef {import("./events.js").EventsOptions} EventsOptions
 * @typedef {import("./events.js").StateEvent} StateEvent
 * @typedef {import("./events.js").AgentEvent} AgentEvent
 * @typedef {import("./events.js").Requirement} Requirement
 * @typedef {import("./events.js").RequirementEvent} RequirementEvent
 * @typedef {import("./events.js").Interaction} Interaction
 * @typedef {import("./events.js").InteractionEvent} InteractionEvent
 * @typedef {import("./events.js").SupersededEvent} SupersededEvent
 * @typedef {import("./events.js").ReboundEvent} ReboundEvent
 * @typedef {import("./events.js").EndedEvent} EndedEvent
 * @typedef {import("./events.js").StreamFailedEvent} StreamFailedEvent
 * @typedef {import("./events.js").UpdateEvent} UpdateEvent
 */
