/**
 * A room with livekit-client's Room's members that RoomBinding uses (types/room-fits.ts
 * checks both against LiveKitRoom): it records what it was asked and drops on demand, as a
 * LiveKit server dropping the connection would.
 */

/** @typedef {(reason?: number) => void} Listener */

export class FakeRoom {
  /** @type {Array<[string, ...unknown[]]>} */
  calls = [];
  /** @type {Set<Listener>} */
  listeners = new Set();
  /** @type {string | null} the token it is connected with */
  token = null;
  /** @type {Array<Error>} what the next connects throw, in order */
  refusals = [];

  /**
   * @param {string} url
   * @param {string} token
   */
  async connect(url, token) {
    this.calls.push(["connect", url, token]);
    const refusal = this.refusals.shift();
    if (refusal) throw refusal;
    this.token = token;
  }

  async disconnect() {
    this.calls.push(["disconnect"]);
    if (this.token === null) return;
    this.token = null;
    this.fire(1);  // livekit-client: Disconnected with CLIENT_INITIATED
  }

  /**
   * @param {"disconnected"} event
   * @param {Listener} listener
   */
  on(event, listener) {
    if (event === "disconnected") this.listeners.add(listener);
    return this;
  }

  /**
   * @param {"disconnected"} event
   * @param {Listener} listener
   */
  off(event, listener) {
    if (event === "disconnected") this.listeners.delete(listener);
    return this;
  }

  /**
   * The server dropped the connection (livekit's DisconnectReason, e.g. 9 SIGNAL_CLOSE).
   * @param {number} reason
   */
  drop(reason = 9) {
    this.token = null;
    this.fire(reason);
  }

  /** @param {number} reason */
  fire(reason) {
    for (const listener of [...this.listeners]) listener(reason);
  }
}
