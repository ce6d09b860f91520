/**
 * The client of one service for one user: it starts sessions and picks up earlier ones.
 * @module
 */

import {AimError} from "./errors.js";
import {Session, requirementOf} from "./session.js";
import {Wire, realtimeOf, uuid} from "./wire.js";

/**
 * @typedef {import("./wire.js").ClientOptions} ClientOptions
 * @typedef {import("./wire.js").CallOptions} CallOptions
 * @typedef {import("./session.js").Capabilities} Capabilities
 */

/**
 * @typedef {object} CreateSessionOptions
 * @property {string} endpointKey names this device within the session (the same key: the
 *   same endpointId)
 * @property {Capabilities} [capabilities] what this device can do
 * @property {Record<string, unknown>} [requested] the session's media and interactions
 * @property {string[]} [requiredCapabilities] (["audio_input", "audio_output"])
 * @property {"off" | "on"} [recording] ("off")
 * @property {{transcript: string, summary: string}} [retention] (both "off")
 * @property {string} [text] the text part of the message ("Start a voice session")
 * @property {boolean} [returnImmediately] do not wait the service's up to 5 s for `ready`
 * @property {AbortSignal} [signal]
 */

/**
 * @typedef {object} ResumeSessionOptions
 * @property {string} sessionId
 * @property {string} endpointKey
 * @property {string} [taskId] (GetSession's)
 * @property {Capabilities} [capabilities]
 * @property {AbortSignal} [signal]
 */

const DEFAULT_REQUESTED = {
  mediaBinding: "livekit-webrtc-v1", audio: "bidirectional", userVideoSources: [],
  agentVideoSources: [], interactions: ["text", "confirmation"],
};

/**
 * The error for a task the service rejected: its status message's text and data.
 * @param {any} task
 */
function rejected(task) {
  const parts = task.status?.message?.parts ?? [];
  const said = parts.filter((/** @type {any} */ p) => typeof p.text === "string")
    .map((/** @type {any} */ p) => p.text).join(" ");
  const why = Object.entries(parts.find((/** @type {any} */ p) => p.data)?.data ?? {})
    .map(([key, value]) => [key, [value].flat().join(",")]);
  return new AimError(said || "the session was rejected",
                      {reason: "REJECTED", metadata: Object.fromEntries(why),
                       method: "SendMessage"});
}

/** A client of one service for one user (its token). */
export class AimClient {
  #wire;

  /** @param {ClientOptions} options */
  constructor(options) {
    this.#wire = new Wire(options ?? /** @type {ClientOptions} */ ({}));
  }

  /**
   * Any other JSON-RPC method (GetTask, aim.realtime.GetCommand, …), retried the same way.
   * @param {string} method
   * @param {Record<string, unknown>} params
   * @param {CallOptions} [options]
   * @returns {Promise<any>}
   */
  call(method, params, options = {}) {
    return this.#wire.call(method, params, options);
  }

  /**
   * Start a session: SendMessage with a `session.create` data part (messageId and
   * clientSessionId made once, kept on retries); it waits for `ready` the service's way (up
   * to 5 s), then reads GetSession (the session object, in `info`), unless
   * `returnImmediately`. A TASK_STATE_REJECTED task throws AimError "REJECTED".
   * @param {CreateSessionOptions} options
   * @returns {Promise<Session>}
   */
  async createSession(options) {
    const {endpointKey, capabilities, requested, recording = "off",
           requiredCapabilities = ["audio_input", "audio_output"],
           retention = {transcript: "off", summary: "off"}, text = "Start a voice session",
           returnImmediately = false, signal} = options ?? {};
    if (!endpointKey) throw new TypeError("createSession: endpointKey is required");
    const data = {
      operation: "session.create", clientSessionId: uuid(), requiredCapabilities, recording,
      retention, requested: requested ?? DEFAULT_REQUESTED,
    };
    const {task} = await this.#wire.call("SendMessage", {
      message: {messageId: uuid(), role: "ROLE_USER",
                parts: [...(text ? [{text}] : []), {mediaType: "application/json", data}]},
      configuration: {historyLength: 0, returnImmediately},
    }, {signal});
    const meta = realtimeOf(task);
    if (task.status.state === "TASK_STATE_REJECTED" || !meta.sessionId) throw rejected(task);
    const info = returnImmediately ? null : (await this.#wire.call(
      "aim.realtime.GetSession", {sessionId: meta.sessionId}, {signal})).session;
    return new Session(this.#wire, {
      sessionId: meta.sessionId, taskId: task.id, state: meta.sessionState,
      epoch: meta.sessionEpoch, taskState: task.status.state, taskVersion: meta.taskVersion,
      endpointKey, capabilities, info});
  }

  /**
   * A Session for one created earlier (an app restart, another device): GetSession and
   * GetTask (its state and open requirement); join() registers `endpointKey` (the same key:
   * the same endpointId).
   * @param {ResumeSessionOptions} options
   * @returns {Promise<Session>}
   */
  async resumeSession(options) {
    const {sessionId, taskId, endpointKey, capabilities, signal} = options ?? {};
    if (!sessionId || !endpointKey) {
      throw new TypeError("resumeSession: sessionId and endpointKey are required");
    }
    const {session} = await this.#wire.call("aim.realtime.GetSession", {sessionId}, {signal});
    const id = taskId ?? session.taskId;
    const task = await this.#wire.call("GetTask", {id, historyLength: 0}, {signal});
    const mine = session.endpoints.find(
      (/** @type {any} */ e) => e.clientEndpointKey === endpointKey);
    return new Session(this.#wire, {
      sessionId, taskId: id, state: session.state, epoch: session.sessionEpoch,
      taskState: task.status.state, taskVersion: realtimeOf(task).taskVersion,
      endpointId: mine?.endpointId, requirement: requirementOf(task.status),
      endpointKey, capabilities, info: session,
    });
  }
}
