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
  #connected = false;
  #leaving = 0;  // disconnects this binding is making: their `disconnected` is not a drop
  #closed = false;
  /** @type {Array<() => void>} */
  #unlisten = [];
  /** @type {Promise<void> | null} */
  #rejoining = null;
  #onDisconnected = (/** @type {number | undefined} */ reason) => this.#dropped(reason);

  /**
   * @param {Session} session
   * @param {LiveKitRoom} room livekit-client's Room
   * @param {RoomBindingOptions} [options]
   */
  constructor(session, room, {refreshBeforeMs = 60000, rejoinAttempts = 5, rejoinDelayMs = 500,
                              onError = reported} = {}) {
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
   * is fresh) and connect the room with it; from then on the binding follows the session.
   * Called again after `superseded`, it takes the session back to this device.
   * @param {{joined?: JoinResult, signal?: AbortSignal}} [options]
   * @returns {Promise<JoinResult>}
   */
  async connect({joined, signal} = {}) {
    if (this.#closed) throw new TypeError("RoomBinding: closed");
    this.#listen();
    const usable = joined !== undefined && this.#fresh(joined) && !this.#session.superseded
      && joined.epoch >= this.#session.epoch;
    const chosen = usable ? joined : await this.#session.join({signal});
    await this.#enter(chosen);
    return chosen;
  }

  /** Stop following the session and the room; the room stays as it is. */
  close() {
    this.#closed = true;
    for (const stop of this.#unlisten.splice(0)) stop();
  }

  /** @param {JoinResult} joined */
  #fresh(joined) {
    return Date.parse(joined.expiresAt) - Date.now() > this.#refreshBeforeMs;
  }

  #listen() {
    if (this.#unlisten.length > 0) return;
    const session = this.#session;
    this.#room.on("disconnected", this.#onDisconnected);
    this.#unlisten.push(
      () => { this.#room.off("disconnected", this.#onDisconnected); },
      session.on("superseded", () => { this.#leave().catch(this.#onError); }),
      session.on("rebound", () => { this.#rebind().catch(this.#onError); }),
      session.on("ended", () => {
        this.#leave().catch(this.#onError).finally(() => this.close());
      }),
    );
  }

  /** @param {JoinResult} joined */
  async #enter(joined) {
    this.#joined = joined;
    await this.#room.connect(joined.url, joined.token);
    this.#connected = true;
  }

  /** Disconnect the room, if this binding connected it (no re-join follows). */
  async #leave() {
    if (!this.#connected) return;
    this.#connected = false;
    this.#leaving += 1;
    try {
      await this.#room.disconnect();
    } finally {
      this.#leaving -= 1;
    }
  }

  /** The room was replaced (a rebind): leave the old one, join the new one when ready. */
  async #rebind() {
    await this.#leave();
    if (this.#closed || this.#session.ended !== null || this.#session.superseded) return;
    await this.#enter(await this.#session.join());
  }

  /** @param {number | undefined} reason */
  #dropped(reason) {
    const ours = this.#leaving > 0 || reason === CLIENT_INITIATED;
    const wasConnected = this.#connected;
    this.#connected = false;
    if (ours || !wasConnected || this.#closed || this.#rejoining !== null) return;
    this.#rejoining = this.#rejoin()
      .catch(this.#onError)
      .finally(() => { this.#rejoining = null; });
  }

  /** Join again (a fresh token) and connect, with backoff, while the session is live and
   * this device still holds it (GetSession says so first: a device that lost the session
   * must not take it back on its own). */
  async #rejoin() {
    const session = this.#session;
    for (let attempt = 1; ; attempt++) {
      try {
        await session.refresh();
        if (this.#closed || session.ended !== null || session.superseded) return;
        if (["ending", "ended", "failed"].includes(session.state)) return;
        await this.#enter(await session.join());
        return;
      } catch (error) {
        if (attempt >= this.#rejoinAttempts) throw error;
      }
      await sleep(backoff(attempt, this.#rejoinDelayMs, MAX_REJOIN_DELAY_MS));
    }
  }
}
