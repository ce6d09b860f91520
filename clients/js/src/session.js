/**
 * One realtime session as a device sees it: its state, its commands, its events.
 *
 * Every mutating call mints one commandId when it is called; the wire's retries send the same
 * body, so a command applies once whatever the network did. `epoch` is the newest epoch the
 * service showed; commands carry the newest one that is vetted: one from a session object
 * (GetSession, a command result: its endpoints say whether this device was superseded) or an
 * error's `currentEpoch`. An epoch the stream shows past the one this device joined at is
 * vetted with GetSession first; while that check fails it stays pending, and the next command
 * makes it before it is sent. EndSession carries no epoch. Once another device took the
 * session over, commands are refused unsent until join() takes it back.
 * @module
 */

import {AimError, StaleEpochError, SupersededError, UnavailableError, RedirectError, errorOf,
  httpError, noAnswer} from "./errors.js";
import {Emitter} from "./events.js";
import {RECONNECT, sse} from "./sse.js";
import {backoff, realtimeOf, sleep, uuid} from "./wire.js";

/**
 * @typedef {import("./wire.js").Wire} Wire
 * @typedef {import("./wire.js").CallOptions} CallOptions
 * @typedef {import("./events.js").EventMap} EventMap
 * @typedef {import("./events.js").AnyEvent} AnyEvent
 * @typedef {import("./events.js").EndedEvent} EndedEvent
 * @typedef {import("./events.js").EventsOptions} EventsOptions
 * @typedef {import("./events.js").Requirement} Requirement
 * @typedef {import("./events.js").Interaction} Interaction
 */

/**
 * @typedef {object} Capabilities what this device can do (RegisterEndpoint's capabilities)
 * @property {boolean} [audioInput]
 * @property {boolean} [audioOutput]
 * @property {boolean} [camera]
 * @property {boolean} [screen]
 * @property {string[]} [interactions]
 */

/**
 * @typedef {object} JoinResult JoinSession's media: what livekit-client's
 *   `room.connect(url, token)` needs.
 * @property {string} url the LiveKit server's URL
 * @property {string} token the join token (short-lived: see expiresAt)
 * @property {string} room the room's name
 * @property {string} identity this device's participant identity
 * @property {string} expiresAt when the token stops being accepted (RFC 3339)
 * @property {number} epoch the session's epoch after the join
 * @property {string} endpointId
 * @property {string} commandId the JoinSession's commandId
 */

/**
 * @typedef {object} ConfirmOptions
 * @property {"interaction" | "task"} [via] "task": answer with A2A ContinueTask
 * @property {string} [text] with via "task": a text part in the ContinueTask message
 * @property {AbortSignal} [signal]
 */

/**
 * @typedef {object} SessionFields what AimClient knows of a session when it makes the object
 * @property {string} sessionId
 * @property {string} taskId
 * @property {string} state
 * @property {number} epoch
 * @property {string} taskState
 * @property {number} taskVersion
 * @property {string} endpointKey
 * @property {Capabilities} [capabilities]
 * @property {string | null} [endpointId]
 * @property {Requirement | null} [requirement]
 * @property {Record<string, any> | null} [info]
 */

const TERMINAL = new Set(["TASK_STATE_COMPLETED", "TASK_STATE_CANCELED", "TASK_STATE_FAILED",
                          "TASK_STATE_REJECTED"]);
// reconnects: backoff and failures in a row; silence: three missed 15 s heartbeats
const STREAM = {baseMs: 250, maxMs: 5000, failures: 10, silenceMs: 45000};
const POLL_MS = 250;
const DEVICE = {audioInput: true, audioOutput: true, camera: false, screen: false,
                interactions: ["text", "confirmation"]};

/**
 * The open requirement in a task status (its data part), or null.
 * @param {any} status
 * @returns {Requirement | null}
 */
export function requirementOf(status) {
  const data = (status?.message?.parts ?? []).map((/** @type {any} */ p) => p.data)
    .find((/** @type {any} */ d) => d?.requirementId);
  if (status?.state !== "TASK_STATE_INPUT_REQUIRED" || !data) return null;
  const {operationId, requirementId, action, actionDigest, expectedVersion} = data;
  return {operationId, requirementId, action, actionDigest, expectedVersion};
}

/**
 * The JSON object in `text`, or null (not JSON, or not an object).
 * @param {string} text
 * @returns {any}
 */
function parsed(text) {
  try {
    const value = JSON.parse(text);
    return value !== null && typeof value === "object" ? value : null;
  } catch {
    return null;
  }
}

/**
 * `promise`, or the signal's reason as soon as it aborts (the promise itself goes on).
 * @template T
 * @param {Promise<T>} promise
 * @param {AbortSignal | undefined} signal
 * @returns {Promise<T>}
 */
function until(promise, signal) {
  if (!signal) return promise;
  signal.throwIfAborted();
  return new Promise((resolve, reject) => {
    const stop = () => reject(signal.reason);
    signal.addEventListener("abort", stop, {once: true});
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", stop));
  });
}

/**
 * One realtime session as this device sees it. Made by `AimClient.createSession` and
 * `AimClient.resumeSession`, never by the app.
 */
export class Session {
  #wire;
  #key;
  #capabilities;
  #emitter = new Emitter();
  /** @type {number | null} the epoch this object registered the device at */
  #registeredEpoch = null;
  /** @type {number | null} the epoch it joined at */
  #joinedEpoch = null;
  /** @type {number} the epoch commands carry: the newest vetted one */
  #epoch;
  /** @type {number | null} an epoch the stream showed that GetSession has not vetted yet */
  #unvetted = null;
  /** @type {Promise<unknown> | null} the GetSession vetting it, while under way */
  #checking = null;
  /** @type {number | null} */
  #reboundEpoch = null;
  /** @type {Map<string, Requirement>} requirementId → every requirement the stream showed */
  #seen = new Map();
  #following = false;
  #runs = 0;  // which stream loop is the live one
  /** @type {AbortController | null} */
  #abort = null;
  /** @type {string | null} */
  #lastEventId = null;
  #version = -1;  // of the newest session object seen
  #ending = false;  // the task is terminal: the end is being read, or was

  /**
   * @param {Wire} wire
   * @param {SessionFields} fields
   */
  constructor(wire, {endpointKey, capabilities, endpointId, requirement, info, ...fields}) {
    this.#wire = wire;
    this.#key = endpointKey;
    this.#capabilities = {...DEVICE, ...capabilities};
    /** @type {string} */
    this.sessionId = fields.sessionId;
    /** @type {string} */
    this.taskId = fields.taskId;
    /** @type {string} the session's state: provisioning, ready, joining, active, … */
    this.state = fields.state;
    /** @type {number} the newest epoch the service showed */
    this.epoch = fields.epoch;
    /** @type {string} the A2A task's state */
    this.taskState = fields.taskState;
    /** @type {number} */
    this.taskVersion = fields.taskVersion;
    this.#epoch = fields.epoch;
    /** @type {string | null} this device's endpoint, once registered */
    this.endpointId = endpointId ?? null;
    /** @type {Requirement | null} the open requirement, as the task shows it */
    this.requirement = requirement ?? null;
    /** @type {boolean} another device holds the session: commands are refused unsent */
    this.superseded = false;
    /** @type {string | null} the agent's state as the stream last named it */
    this.agentState = null;
    /** @type {number | null} the serving agent's generation, as the stream named it */
    this.agentGeneration = null;
    /** @type {Record<string, any> | null} the newest session object (GetSession, a command) */
    this.info = null;
    /** @type {EndedEvent | null} the end, once the task is terminal */
    this.ended = null;
    if (info) this.#observeSession(info);
  }

  // ---- events ------------------------------------------------------------------------------

  /**
   * Listen to an event; listening starts the stream (follow()).
   * @template {keyof EventMap} K
   * @param {K} name one of `Events`
   * @param {(event: EventMap[K]) => void} fn
   * @returns {() => void} stops this listener
   */
  on(name, fn) {
    this.#emitter.add(name, fn, false);
    this.follow();
    return () => this.off(name, fn);
  }

  /**
   * Listen to the next event of `name` only; listening starts the stream (follow()).
   * @template {keyof EventMap} K
   * @param {K} name one of `Events`
   * @param {(event: EventMap[K]) => void} fn
   * @returns {() => void} stops this listener
   */
  once(name, fn) {
    this.#emitter.add(name, fn, true);
    this.follow();
    return () => this.off(name, fn);
  }

  /**
   * Stop a listener (the stream goes on: close() stops it).
   * @template {keyof EventMap} K
   * @param {K} name
   * @param {(event: EventMap[K]) => void} fn
   */
  off(name, fn) {
    this.#emitter.remove(name, fn);
  }

  /**
   * Every event from the call on, `for await`; it starts the stream (follow()). It ends
   * after `ended` or `error` (both yielded), at close(), or when `signal` aborts (what it
   * held unread is dropped); once the session has ended, it yields that end only. One that
   * holds more than 1000 events nobody read ends with an `error` event (EVENTS_UNREAD).
   * @param {EventsOptions} [options]
   * @returns {AsyncIterableIterator<AnyEvent>}
   */
  events(options = {}) {
    if (this.ended === null) this.follow();
    return this.#emitter.iterate(options, this.ended);
  }

  /** @param {AnyEvent} event */
  #emit(event) {
    this.#emitter.emit(event);
  }

  /**
   * What the service reported; a `state` event when any of the four changed.
   * @param {{state?: string, epoch?: number, taskState?: string, taskVersion?: number}} seen
   */
  #observe({state, epoch, taskState, taskVersion}) {
    const before = [this.state, this.epoch, this.taskState, this.taskVersion];
    if (state !== undefined) this.state = state;
    if (typeof epoch === "number") this.epoch = Math.max(this.epoch ?? epoch, epoch);
    if (taskState !== undefined) this.taskState = taskState;
    if (typeof taskVersion === "number") this.taskVersion = taskVersion;
    const now = [this.state, this.epoch, this.taskState, this.taskVersion];
    if (now.some((value, i) => value !== before[i])) {
      this.#emit({name: "state", state: this.state, epoch: this.epoch, taskState: this.taskState,
                  taskVersion: this.taskVersion});
    }
  }

  /**
   * A session resource (GetSession, a command's result; older versions ignored): the state
   * only while no stream runs (the stream has them in order); its epoch, for commands too,
   * once its endpoints said whether this device was superseded.
   * @param {any} session
   */
  #observeSession(session) {
    if (!session || typeof session !== "object") return;
    const version = typeof session.version === "number" ? session.version : 0;
    if (version < this.#version) return;
    this.#version = version;
    this.info = session;
    const state = this.#following ? undefined : session.state;
    this.#observe({epoch: session.sessionEpoch, state});
    if (this.#joinedEpoch !== null && this.endpointId !== null) {
      const mine = (session.endpoints ?? []).find(
        (/** @type {any} */ e) => e.endpointId === this.endpointId);
      if (mine?.state === "superseded") this.#supersede(session.sessionEpoch);
    }
    this.#vetted(session.sessionEpoch);
  }

  /**
   * An epoch commands may carry (it only grows).
   * @param {unknown} epoch
   */
  #vetted(epoch) {
    if (typeof epoch !== "number") return;
    this.#epoch = Math.max(this.#epoch ?? epoch, epoch);
    if (this.#unvetted !== null && this.#unvetted <= this.#epoch) this.#unvetted = null;
  }

  /**
   * The pending check of an epoch the stream showed, if any (one GetSession at a time). A
   * failure is thrown and leaves it pending: the next event or command asks again.
   * @param {AbortSignal} [signal] stops waiting for it (the check itself goes on)
   */
  async #vet(signal) {
    if (this.#unvetted === null) return;
    this.#checking ??= this.refresh().finally(() => { this.#checking = null; });
    await until(this.#checking, signal);
  }

  /**
   * GetSession: the whole session object now (also kept in `info`).
   * @param {CallOptions} [options]
   * @returns {Promise<Record<string, any>>}
   */
  async refresh({signal} = {}) {
    const {session} = await this.#wire.call("aim.realtime.GetSession",
                                            {sessionId: this.sessionId}, {signal});
    this.#observeSession(session);
    return session;
  }

  /**
   * Poll GetSession while the session is `provisioning`: the state it left it for (AimError
   * reason TIMEOUT after `timeoutMs`, by default the client's readyTimeoutMs).
   * @param {{timeoutMs?: number, signal?: AbortSignal}} [options]
   * @returns {Promise<string>}
   */
  async waitReady({timeoutMs = this.#wire.readyTimeoutMs, signal} = {}) {
    const deadline = Date.now() + timeoutMs;
    let {state} = await this.refresh({signal});
    while (state === "provisioning") {
      if (Date.now() > deadline) {
        throw new AimError(`the session is still provisioning after ${timeoutMs / 1000} s`,
                           {reason: "TIMEOUT", method: "aim.realtime.GetSession"});
      }
      await sleep(POLL_MS, signal);
      ({state} = await this.refresh({signal}));
    }
    return state;
  }

  // ---- the stream (SubscribeToTask) --------------------------------------------------------

  /** Follow the task live (listening does it too); a second call does nothing. */
  follow() {
    if (this.#following || this.#ending) return;
    this.#following = true;
    const run = ++this.#runs;
    this.#run(() => this.#following && this.#runs === run)
      .catch((error) => this.#emit({name: "error", error}));
  }

  /** Stop the stream (no command is sent); iterators of events() end. */
  close() {
    this.#following = false;
    this.#abort?.abort();
    this.#emitter.endAll();
  }

  /**
   * Reconnects (Last-Event-ID) after backoff until ended; `error` after 10 failures in a row.
   * A stream the service cut on purpose (`: reconnect`) is resumed at once, and no failure.
   * @param {() => boolean} live
   */
  async #run(live) {
    for (let failures = 0; live();) {
      /** @type {any} */
      let error = null;
      try {
        const outcome = await this.#streamOnce(live, () => { failures = 0; });
        if (outcome === true) return;
        if (outcome === RECONNECT) {
          failures = 0;
          continue;
        }
      } catch (caught) {
        error = caught;
      }
      if (!live()) return;
      failures += 1;
      // auth (but an expired token, with a token function: a new one), not found, a bug, …
      const fatal = error !== null && !error.retryable && !this.#wire.refreshes(error);
      if (fatal || failures >= STREAM.failures) {
        this.#following = false;
        const gaveUp = `the stream failed ${failures} times in a row`;
        const failed = fatal ? error
          : new UnavailableError(gaveUp, {cause: error, method: "SubscribeToTask"});
        this.#emit({name: "error", error: failed});
        return;
      }
      await sleep(backoff(failures, STREAM.baseMs, STREAM.maxMs));
    }
  }

  /**
   * One SubscribeToTask: true once over (ended), RECONNECT when the service cut it on
   * purpose, false when it closed early; or throws.
   * @param {() => boolean} live
   * @param {() => void} onFrame
   * @returns {Promise<boolean | typeof RECONNECT>}
   */
  async #streamOnce(live, onFrame) {
    const wire = this.#wire;
    const method = "SubscribeToTask";
    const controller = new AbortController();
    this.#abort = controller;
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    let timer;
    const watch = () => {  // no byte for this long (heartbeats come every 15 s): a dead link
      clearTimeout(timer);
      timer = setTimeout(() => controller.abort(), STREAM.silenceMs);
    };
    /** @type {Record<string, string>} */
    const extra = {"Accept": "text/event-stream"};
    if (this.#lastEventId) extra["Last-Event-ID"] = this.#lastEventId;
    const headers = await wire.headers(extra);
    try {
      watch();
      const body = wire.body(method, {id: this.taskId, historyLength: 0});
      const response = await wire.post(body, headers, controller.signal, method)
        .catch((cause) => {
          throw cause instanceof RedirectError ? cause
            : noAnswer("the stream could not be opened", cause, null, method);
        });
      if (!(response.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
        return await this.#refused(response);
      }
      if (response.body === null) throw noAnswer("the stream has no body", null, null, method);
      /** @type {AimError | null} an error frame: this connection is over */
      let broken = null;
      let cut = false;  // the service said `: reconnect`
      try {
        for await (const frame of sse(response.body, watch)) {
          if (!live()) return true;
          if ("reconnect" in frame) {
            cut = true;
            continue;
          }
          const message = parsed(frame.data);
          if (message === null) continue;  // not JSON-RPC: nothing this library understands
          if (message.error || frame.event === "error") {
            broken = errorOf(message.error ?? {}, response.status, null, method);
            break;
          }
          if (message.result === null || typeof message.result !== "object") continue;
          if (frame.id) this.#lastEventId = frame.id;
          onFrame();
          if (await this.#onFrame(message.result, frame.id || null)) return true;
        }
      } catch (cause) {
        throw cause instanceof AimError ? cause
          : noAnswer("the stream broke off", cause, null, method);
      }
      if (broken?.code === -32004) return await this.#terminal(broken);
      if (broken) throw noAnswer("the stream sent an error frame", broken, null, method);
      return cut ? RECONNECT : false;
    } finally {
      clearTimeout(timer);
      if (this.#abort === controller) this.#abort = null;
    }
  }

  /**
   * A JSON answer to the subscribe: -32004 on a terminal task is `ended`; else thrown.
   * @param {Response} response
   */
  async #refused(response) {
    const answer = await response.json().catch(() => null);
    if (!answer?.error) throw httpError(response.status, "SubscribeToTask");
    const error = errorOf(answer.error, response.status, response.headers.get("retry-after"),
                          "SubscribeToTask");
    if (error.code !== -32004) throw error;
    return this.#terminal(error);
  }

  /**
   * -32004 (an answer or an error frame): `ended` if GetTask shows the task terminal.
   * @param {AimError} error
   */
  async #terminal(error) {
    const task = await this.#wire.call("GetTask", {id: this.taskId, historyLength: 0});
    if (!TERMINAL.has(task.status.state)) throw error;
    this.#observe({state: realtimeOf(task).sessionState, taskState: task.status.state});
    await this.#end();
    return true;
  }

  /**
   * `agent` when the frame names the agent's state and it, or the serving generation,
   * changed; `rotatedFrom` on the first frame of a new generation after `rotating`.
   * @param {Record<string, any>} meta
   */
  #onAgent(meta) {
    if (typeof meta.agentState !== "string") return;
    const generation = Number.isInteger(meta.agentGeneration) ? meta.agentGeneration : null;
    const before = this.agentGeneration;
    if (meta.agentState === this.agentState && generation === before) return;
    const rotated = this.agentState === "rotating" && generation !== null && before !== null
      && generation !== before;
    this.agentState = meta.agentState;
    this.agentGeneration = generation;
    this.#emit({
      name: "agent",
      state: meta.agentState,
      rotating: meta.agentState === "rotating",
      generation,
      successorGeneration: Number.isInteger(meta.successorGeneration)
        ? meta.successorGeneration : null,
      rotatedFrom: rotated ? before : null,
    });
  }

  /**
   * One frame: update, state, agent, requirement, superseded or rebound, ended. True once
   * terminal.
   * @param {Record<string, any>} result
   * @param {string | null} eventId
   */
  async #onFrame(result, eventId) {
    this.#emit({name: "update", eventId, result});
    const item = result.task ?? result.statusUpdate;
    const meta = realtimeOf(item);
    const epoch = meta.sessionEpoch;
    this.#observe({state: meta.sessionState, epoch, taskState: item.status.state,
                   taskVersion: meta.taskVersion});
    // the agent's state, when the frame names it: "rotating" while a successor is brought in
    // before the serving agent's connection ends (nothing for the app to do)
    this.#onAgent(meta);
    const requirement = requirementOf(item.status);
    this.requirement = requirement;
    if (requirement && !this.#seen.has(requirement.requirementId)) {
      this.#seen.set(requirement.requirementId, requirement);
      this.#emit({name: "requirement", ...requirement});
    }
    const moved = this.#joinedEpoch !== null && epoch > this.#joinedEpoch;
    if (moved && meta.sessionState === "provisioning" && this.#reboundEpoch !== epoch) {
      this.#reboundEpoch = epoch;
      this.#emit({name: "rebound", epoch});
    } else if (this.#joinedEpoch === null || this.superseded) {
      this.#vetted(epoch);  // nothing to be superseded from (or already told)
    } else if (moved && meta.sessionState !== "provisioning" && epoch > this.#epoch) {
      // another device may have taken over: commands carry this epoch only once GetSession
      // said this endpoint is not superseded (they wait for the check, see #command)
      this.#unvetted = Math.max(this.#unvetted ?? 0, epoch);
      this.#vet().catch(() => {});  // not awaited: the stream reads on; a failure stays pending
    }
    if (!TERMINAL.has(item.status.state)) return false;
    await this.#end();
    return true;
  }

  /** @param {number} epoch */
  #supersede(epoch) {
    if (this.superseded) return;
    this.superseded = true;
    this.#emit({name: "superseded", epoch});
  }

  async #end() {
    this.#following = false;
    if (this.#ending) return;
    this.#ending = true;  // before the read: a listener meanwhile starts no second stream
    const read = this.#wire.call("aim.realtime.GetSession", {sessionId: this.sessionId});
    const endReason = await read.then(({session}) => session.endReason ?? null, () => null);
    /** @type {EndedEvent} */
    const ended = {name: "ended", state: this.state, taskState: this.taskState, endReason};
    this.ended = ended;
    this.#emit(ended);
  }

  // ---- commands ----------------------------------------------------------------------------

  /**
   * Once superseded, commands are refused here, unsent, until join() takes the session back.
   * @param {string} method
   */
  #guard(method) {
    if (!this.superseded) return;
    throw new SupersededError("This session continues on another device; join() takes it back.", {
      code: -31002, reason: "STALE_EPOCH", method,
      metadata: {currentEpoch: String(this.epoch), reason: "superseded"}});
  }

  /**
   * A mutating call: one commandId for this intent (kept on every retry), the vetted epoch
   * unless `epoch: false` (after the pending check, if any); `guard`: refused, unsent, once
   * superseded.
   * @param {string} method
   * @param {Record<string, unknown>} params
   * @param {{epoch?: boolean, guard?: boolean, signal?: AbortSignal}} [how]
   * @returns {Promise<Record<string, any>>}
   */
  async #command(method, params, {epoch = true, guard = false, signal} = {}) {
    if (epoch) await this.#vet(signal);
    if (guard) this.#guard(method);
    const commandId = uuid();
    const sent = {sessionId: this.sessionId, ...(epoch ? {sessionEpoch: this.#epoch} : {}),
                  commandId, ...params};
    try {
      const result = await this.#wire.call(method, sent, {signal});
      this.#observeSession(result.session);
      return {...result, commandId};
    } catch (error) {
      if (error instanceof StaleEpochError && error.currentEpoch !== null) {
        this.#observe({epoch: error.currentEpoch});
        this.#vetted(error.currentEpoch);
      }
      if (error instanceof SupersededError) this.#supersede(error.currentEpoch ?? this.epoch);
      throw error;
    }
  }

  /**
   * RegisterEndpoint with this device's key and capabilities: the endpoint object.
   * @param {CallOptions} [options]
   * @returns {Promise<Record<string, any>>}
   */
  async register({signal} = {}) {
    const registered = await this.#command("aim.realtime.RegisterEndpoint",
                                           {clientEndpointKey: this.#key,
                                            capabilities: this.#capabilities}, {signal});
    this.endpointId = registered.endpoint.endpointId;
    this.#registeredEpoch = registered.session.sessionEpoch;
    return registered.endpoint;
  }

  /**
   * Register this device (once per epoch) and JoinSession at the current epoch: the LiveKit
   * url and token for room.connect(url, token). Waits while the session is `provisioning`
   * (AimError reason TIMEOUT after `readyTimeoutMs`). Called again: a new JoinSession (a new
   * token); after `superseded` it takes the session back.
   * @param {CallOptions} [options]
   * @returns {Promise<JoinResult>}
   */
  async join({signal} = {}) {
    if (this.state === "provisioning") await this.waitReady({signal});
    await this.#vet(signal);
    if (this.endpointId === null || this.#registeredEpoch !== this.#epoch || this.superseded) {
      this.#joinedEpoch = null;  // a superseded device registers again before it joins
      await this.register({signal});
    }
    const joined = await this.#command("aim.realtime.JoinSession", {endpointId: this.endpointId},
                                       {signal});
    const epoch = joined.session.sessionEpoch;
    this.#joinedEpoch = epoch;
    this.superseded = false;
    const {url, token, room, identity = "", expiresAt} = joined.media;
    return {url, token, room, identity, expiresAt, epoch,
            endpointId: String(this.endpointId), commandId: joined.commandId};
  }

  /**
   * input.text to the agent: the accepted interaction.
   * @param {string} text
   * @param {CallOptions} [options]
   * @returns {Promise<Interaction>}
   */
  sendText(text, options = {}) {
    return this.sendInteraction("input.text", {text}, options);
  }

  /**
   * Any SendInteraction (protocol.md lists the types): the accepted interaction, with the
   * operation when the result carried one.
   * @param {string} type
   * @param {Record<string, unknown>} [payload]
   * @param {CallOptions} [options]
   * @returns {Promise<Interaction>}
   */
  async sendInteraction(type, payload = {}, {signal} = {}) {
    const method = "aim.realtime.SendInteraction";
    const result = await this.#command(method, {type, payload}, {guard: true, signal});
    const {commandId, acceptedAt} = result.interaction;
    /** @type {Interaction} */
    const interaction = {commandId, type: result.interaction.type, acceptedAt,
                         operation: result.operation ?? null};
    this.#emit({name: "interaction", ...interaction});
    return interaction;
  }

  /**
   * GetOperation: one operation of this session now.
   * @param {string} operationId
   * @param {CallOptions} [options]
   * @returns {Promise<Record<string, any>>}
   */
  async operation(operationId, {signal} = {}) {
    const params = {sessionId: this.sessionId, operationId};
    return (await this.#wire.call("aim.realtime.GetOperation", params, {signal})).operation;
  }

  /**
   * The open requirement of an operation the stream has not shown (yet): GetTask's, else the
   * operation's (GetOperation) at the task's current version; the service judges it.
   * @param {string} operationId
   * @param {AbortSignal | undefined} signal
   * @returns {Promise<Requirement>}
   */
  async #requirement(operationId, signal) {
    const task = await this.#wire.call("GetTask", {id: this.taskId, historyLength: 0}, {signal});
    const shown = requirementOf(task.status);
    if (shown?.operationId === operationId) return shown;
    const {requirementId = "", action = {}, actionDigest = ""} =
      (await this.operation(operationId, {signal})).requirement ?? {};
    return {operationId, requirementId, action, actionDigest,
            expectedVersion: realtimeOf(task).taskVersion ?? 0};
  }

  /**
   * Answer a confirmation the agent asked for: "approve" (operation.confirm) or "deny"
   * (operation.cancel); `{via: "task"}` answers with A2A ContinueTask. Returns the operation.
   * @param {string} operationId
   * @param {"approve" | "deny"} decision
   * @param {ConfirmOptions} [options]
   * @returns {Promise<Record<string, any>>}
   */
  async confirm(operationId, decision, {via = "interaction", text, signal} = {}) {
    if (decision !== "approve" && decision !== "deny") {
      throw new TypeError(`confirm: the decision is "approve" or "deny", not ${decision}`);
    }
    await this.#vet(signal);
    this.#guard(via === "task" ? "ContinueTask" : "aim.realtime.SendInteraction");
    if (via === "task") {
      const asked = this.requirement?.operationId === operationId ? this.requirement
        : await this.#requirement(operationId, signal);  // its expectedVersion: the task's now
      const parts = [...(text ? [{text}] : []),
                     {data: {decision}, mediaType: "application/json"}];
      await this.#wire.call("ContinueTask", {
        id: this.taskId, requirementId: asked.requirementId, actionDigest: asked.actionDigest,
        expectedVersion: asked.expectedVersion, historyLength: 0,
        message: {messageId: uuid(), role: "ROLE_USER", taskId: this.taskId, parts}}, {signal});
      return this.operation(operationId, {signal});
    }
    /** @type {Interaction} */
    let answered;
    if (decision === "deny") {
      answered = await this.sendInteraction("operation.cancel", {operationId}, {signal});
    } else {
      const asked = [...this.#seen.values()].reverse().find((r) => r.operationId === operationId)
        ?? await this.#requirement(operationId, signal);
      const {requirementId, actionDigest} = asked;
      answered = await this.sendInteraction("operation.confirm",
                                            {operationId, requirementId, actionDigest}, {signal});
    }
    return answered.operation ?? this.operation(operationId, {signal});
  }

  /**
   * EndSession (no epoch: any device of the user may end it): the session resource after it.
   * @param {string} [reason]
   * @param {CallOptions} [options]
   * @returns {Promise<Record<string, any>>}
   */
  async end(reason = "ended by the app", {signal} = {}) {
    const {session} = await this.#command("aim.realtime.EndSession", {reason},
                                          {epoch: false, signal});
    return session;
  }
}
