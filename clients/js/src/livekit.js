/**
 * The LiveKit room, handled: a binding of a Session to livekit-client's `Room` that connects
 * it with a join token, disconnects it when the session moves to another device or ends, and
 * joins again with a fresh token when the room drops while the session is live.
 *
 *   import {Room} from "livekit-client";
 *   import {RoomBinding} from "aim-realtime-client/livekit";
 *   const binding = new RoomBinding(session, new Room());
 *   await binding.connect();
 *
 * livekit-client is not imported here: the app passes its Room (any object with the members
 * of `LiveKitRoom`).
 * @module
 */

import {reported} from "./events.js";
import {backoff, sleep} from "./wire.js";

/**
 * @typedef {import("./session.js").Session} Session
 * @typedef {import("./session.js").JoinResult} JoinResult
 */

/**
 * What the binding uses of livekit-client's `Room` (checked against its declarations).
 * @typedef {object} LiveKitRoom
 * @property {(url: string, token: string) => Promise<void>} connect
 * @property {() => Promise<void>} disconnect
 * @property {(event: "disconnected", listener: (reason?: number) => void) => unknown} on
 * @property {(event: "disconnected", listener: (reason?: number) => void) => unknown} off
 */

/**
 * @typedef {object} RoomBindingOptions
 * @property {number} [refreshBeforeMs] a join token that expires sooner than this is not
 *   handed to LiveKit: a new JoinSession gives a fresh one (60000)
 * @property {number} [rejoinAttempts] joins after the room dropped, before giving up (5)
 * @property {number} [rejoinDelayMs] the backoff's base between them (500, doubling, at most
 *   8 s, full jitter)
 * @property {(error: unknown) => void} [onError] told when a join after a drop gave up, or
 *   a reconnect after a rebind failed (default: reportError, as an uncaught error)
 */

// livekit's DisconnectReason.CLIENT_INITIATED: the app (or this binding) called disconnect()
const CLIENT_INITIATED = 1;
const MAX_REJOIN_DELAY_MS = 8000;
const OVER = new Set(["ending", "ended", "failed"]);

/** A Session bound to a LiveKit room. */
export class RoomBinding {
  #session;
  #room;
  #refreshBeforeMs;
  #rejoinAttempts;
  #rejoinDelayMs;
  #onError;
  /** @type {JoinResult | null} */
  #joined = null;
  #wanted = false;  // connect() asked for the room, and nothing since said to leave
  #connected = false;  // connected by the binding: a `disconnected` now is a drop
  /** @type {Array<() => void>} */
  #unlisten = [];
  /** @type {Promise<unknown>} the room's entries and exits, one at a time, in order */
  #turn = Promise.resolve();
  /** @type {AbortController | null} the re-join under way */
  #rejoin = null;
  #onDisconnected = (/** @type {number | undefined} */ reason) => this.#dropped(reason);

  /**
   * @param {Session} session
   * @param {LiveKitRoom} room livekit-client's Room
   * @param {RoomBindingOptions} [options]
   */
  constructor(session, room, {refreshBeforeMs = 60000, rejoinAttempts = 5, rejoinDelayMs = 500,
                              onError = reported} = {}) {
    if (!(rejoinAttempts >= 1)) throw new RangeError("RoomBinding: rejoinAttempts must be >= 1");
    this.#session = session;
    this.#room = room;
    this.#refreshBeforeMs = refreshBeforeMs;
    this.#rejoinAttempts = rejoinAttempts;
    this.#rejoinDelayMs = rejoinDelayMs;
    this.#onError = onError;
  }

  /** @returns {JoinResult | null} the join the room is (or was last) connected with */
  get joined() {
    return this.#joined;
  }

  /** @returns {boolean} whether the room is connected by this binding now */
  get connected() {
    return this.#connected;
  }

  /** @returns {boolean} from connect() until the session ended or close() */
  get listening() {
    return this.#unlisten.length > 0;
  }

  /**
   * Join the session (or use `joined`, an earlier session.join()'s result, while its token
   * is fresh and its epoch the session's) and connect the room with it, leaving it first if
   * the binding has it connected; from then on the binding follows the session. Called again
   * after `superseded`, it takes the session back. `signal` aborts the join (not LiveKit's
   * connect). A failure leaves the binding out of the room until connect() is called again.
   * @param {{joined?: JoinResult, signal?: AbortSignal}} [options]
   * @returns {Promise<JoinResult>}
   */
  async connect({joined, signal} = {}) {
    this.#listen();
    this.#cancelRejoin();
    this.#wanted = true;
    try {
      return await this.#serial(async () => {
        const chosen = joined !== undefined && this.#usable(joined) ? joined
          : await this.#session.join({signal});
        await this.#enter(chosen);
        return chosen;
      });
    } catch (error) {
      if (!this.#connected) this.#wanted = false;
      throw error;
    }
  }

  /**
   * Stop following the session and the room, and any re-join; the room stays as it is.
   * Resolves once what the binding was doing to the room is over. connect() starts again.
   * @returns {Promise<void>}
   */
  async close() {
    this.#stop();
    await this.#turn;
  }

  /** @param {JoinResult} joined */
  #usable(joined) {
    const fresh = Date.parse(joined.expiresAt) - Date.now() > this.#refreshBeforeMs;
    return fresh && joined.epoch >= this.#session.epoch && !this.#session.superseded;
  }

  /** The session goes on for this device: not over, not taken over. */
  #live() {
    const session = this.#session;
    return session.ended === null && !OVER.has(session.state) && !session.superseded;
  }

  /**
   * `work` after every entry or exit asked for before it (one at a time).
   * @template T
   * @param {() => Promise<T>} work
   * @returns {Promise<T>}
   */
  #serial(work) {
    const run = this.#turn.then(work);
    this.#turn = run.catch(() => {});
    return run;
  }

  #listen() {
    if (this.#unlisten.length > 0) return;
    const session = this.#session;
    this.#room.on("disconnected", this.#onDisconnected);
    this.#unlisten.push(
      () => { this.#room.off("disconnected", this.#onDisconnected); },
      session.on("superseded", () => this.#superseded()),
      session.on("rebound", () => { if (this.#wanted) this.#startRejoin(true); }),
      session.on("ended", () => {
        this.#stop();
        this.#exit();
      }),
    );
  }

  #stop() {
    for (const stop of this.#unlisten.splice(0)) stop();
    this.#wanted = false;
    this.#cancelRejoin();
  }

  /** Another device holds the session: out of the room; connect() takes it back. */
  #superseded() {
    this.#wanted = false;
    this.#cancelRejoin();
    this.#exit();
  }

  /** Out of the room, unless connect() was called since it was decided. */
  #exit() {
    this.#serial(async () => {
      if (!this.#wanted) await this.#leave();
    }).catch(this.#onError);
  }

  /** @param {JoinResult} joined */
  async #enter(joined) {
    if (this.#connected) await this.#leave();
    this.#joined = joined;
    await this.#room.connect(joined.url, joined.token);
    this.#connected = true;
  }

  /** Disconnect the room, if this binding connected it (its `disconnected` is no drop). */
  async #leave() {
    if (!this.#connected) return;
    this.#connected = false;
    await this.#room.disconnect();
  }

  /** @param {number | undefined} reason */
  #dropped(reason) {
    if (!this.#connected) return;  // not connected, or the binding's own disconnect
    this.#connected = false;
    if (reason === CLIENT_INITIATED) this.#wanted = false;  // the app left: it stays out
    else if (this.#wanted && this.#live()) this.#startRejoin(false);
  }

  /** @param {boolean} leave */
  #startRejoin(leave) {
    this.#cancelRejoin();
    const controller = new AbortController();
    this.#rejoin = controller;
    this.#reenter(leave, controller.signal)
      .finally(() => { if (this.#rejoin === controller) this.#rejoin = null; });
  }

  #cancelRejoin() {
    this.#rejoin?.abort();
    this.#rejoin = null;
  }

  /**
   * Into the room again, at most `rejoinAttempts` times: GetSession, then a new join (a fresh
   * token) while this device still holds a live session (a device that lost the session must
   * not take it back on its own); `leave` first (a rebind). Giving up is told to onError.
   * @param {boolean} leave
   * @param {AbortSignal} signal
   */
  async #reenter(leave, signal) {
    let failure = null;
    for (let attempt = 1; attempt <= this.#rejoinAttempts; attempt++) {
      try {
        if (attempt > 1) {
          await sleep(backoff(attempt - 1, this.#rejoinDelayMs, MAX_REJOIN_DELAY_MS), signal);
        }
        if (signal.aborted || !this.#wanted || !this.#live()) return;
        await this.#serial(async () => {
          signal.throwIfAborted();
          if (leave) await this.#leave();
          await this.#session.refresh({signal});
          if (!this.#live()) return;  // taken over (its `superseded` event says so) or over
          await this.#enter(await this.#session.join({signal}));
        });
        return;
      } catch (error) {
        if (signal.aborted) return;
        failure = error;
      }
    }
    this.#wanted = false;
    if (this.#live()) this.#onError(failure);
  }
}
