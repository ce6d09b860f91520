/**
 * What a session tells its app: the event names (`Events`), each event's shape, and the
 * emitter behind `on`, `once`, `off` and `events()`.
 * @module
 */

import {AimError} from "./errors.js";

/** The name of every event, the same in both client libraries. */
export const Events = Object.freeze(/** @type {const} */ ({
  STATE: "state",
  AGENT: "agent",
  REQUIREMENT: "requirement",
  INTERACTION: "interaction",
  SUPERSEDED: "superseded",
  REBOUND: "rebound",
  ENDED: "ended",
  ERROR: "error",
  UPDATE: "update",
}));

/** @typedef {typeof Events[keyof typeof Events]} EventName */

const NAMES = new Set(Object.values(Events));

/**
 * @typedef {object} StateEvent The session's state, its epoch, the task's state or version
 *   changed (not on repeats).
 * @property {"state"} name
 * @property {string} state
 * @property {number} epoch
 * @property {string} taskState
 * @property {number} taskVersion
 */

/**
 * @typedef {object} AgentEvent The agent's state changed: dispatched, started, joined, what it
 *   reports of itself (listening, thinking, speaking), or `rotating` while a successor is
 *   brought in (nothing for the app to do), then the new agent's state.
 * @property {"agent"} name
 * @property {string} state
 * @property {boolean} rotating
 * @property {number | null} generation the serving agent's (1, 2, …)
 * @property {number | null} successorGeneration the one being brought in while rotating
 * @property {number | null} rotatedFrom on the first event of a new generation after rotating
 */

/**
 * @typedef {object} Requirement The agent asks the user to confirm `action`.
 * @property {string} operationId
 * @property {string} requirementId
 * @property {Record<string, any>} action
 * @property {string} actionDigest
 * @property {number} expectedVersion
 */

/** @typedef {Requirement & {name: "requirement"}} RequirementEvent */

/**
 * @typedef {object} Interaction A SendInteraction this session object sent was accepted.
 * @property {string} commandId
 * @property {string} type
 * @property {string} acceptedAt
 * @property {Record<string, any> | null} operation the operation, when the result carried one
 */

/** @typedef {Interaction & {name: "interaction"}} InteractionEvent */

/**
 * @typedef {object} SupersededEvent Another device took the session over at `epoch`; commands
 *   are refused unsent until join() takes it back.
 * @property {"superseded"} name
 * @property {number} epoch
 */

/**
 * @typedef {object} ReboundEvent The room was replaced at `epoch`: join() again.
 * @property {"rebound"} name
 * @property {number} epoch
 */

/**
 * @typedef {object} EndedEvent The task is terminal; the stream is closed after this event.
 * @property {"ended"} name
 * @property {string} state
 * @property {string} taskState
 * @property {string | null} endReason
 */

/**
 * @typedef {object} StreamFailedEvent The stream cannot go on; commands still work, and a new
 *   listener (or follow()) starts it again.
 * @property {"error"} name
 * @property {import("./errors.js").AimError} error
 */

/**
 * @typedef {object} UpdateEvent One raw StreamResponse of the task and its SSE id, before the
 *   events made of it; only to `on("update")` and `events({updates: true})`.
 * @property {"update"} name
 * @property {string | null} eventId
 * @property {Record<string, any>} result
 */

/**
 * @typedef {object} EventMap
 * @property {StateEvent} state
 * @property {AgentEvent} agent
 * @property {RequirementEvent} requirement
 * @property {InteractionEvent} interaction
 * @property {SupersededEvent} superseded
 * @property {ReboundEvent} rebound
 * @property {EndedEvent} ended
 * @property {StreamFailedEvent} error
 * @property {UpdateEvent} update
 */

/** @typedef {EventMap[keyof EventMap]} AnyEvent */
/** @typedef {Exclude<AnyEvent, UpdateEvent>} SessionEvent */

/**
 * @typedef {object} EventsOptions
 * @property {boolean} [updates] also every raw frame (`update` events)
 * @property {AbortSignal} [signal] ends the iteration when it aborts
 */

/**
 * An error of the app's that no caller can catch, reported as the platform reports an
 * uncaught one: `reportError` (the console, the window's `error` event), else thrown apart.
 * @param {unknown} error
 */
export function reported(error) {
  if (typeof globalThis.reportError === "function") globalThis.reportError(error);
  else queueMicrotask(() => { throw error; });
}

/** Listeners and iterators of one session's events. */
export class Emitter {
  /** @type {Map<string, Map<Function, boolean>>} name → listener → once */
  #listeners = new Map();
  /** @type {Set<Subscription>} */
  #subscribers = new Set();

  /**
   * @param {string} name
   * @param {Function} fn
   * @param {boolean} once
   */
  add(name, fn, once) {
    Emitter.#check(name);
    if (typeof fn !== "function") throw new TypeError(`the listener of ${name} is not a function`);
    if (!this.#listeners.has(name)) this.#listeners.set(name, new Map());
    this.#listeners.get(name)?.set(fn, once);
  }

  /**
   * @param {string} name
   * @param {Function} fn
   */
  remove(name, fn) {
    Emitter.#check(name);
    this.#listeners.get(name)?.delete(fn);
  }

  /**
   * A TypeError for a name that is no event's, naming the events.
   * @param {string} name
   */
  static #check(name) {
    if (!NAMES.has(/** @type {EventName} */ (name))) {
      throw new TypeError(`no event ${name}: one of ${[...NAMES].join(", ")}`);
    }
  }

  /**
   * Every listener of the event's name, then every iterator that takes it. A listener that
   * throws is reported (reportError) and the others still hear the event.
   * @param {AnyEvent} event
   */
  emit(event) {
    const listeners = this.#listeners.get(event.name);
    for (const [fn, once] of [...(listeners ?? [])]) {
      if (!listeners?.has(fn)) continue;  // removed by a listener before it
      if (once) listeners.delete(fn);
      try {
        fn(event);
      } catch (error) {
        reported(error);  // the stream goes on
      }
    }
    for (const subscriber of [...this.#subscribers]) subscriber.push(event);
  }

  /** Every iterator ends (after the events it holds). */
  endAll() {
    for (const subscriber of this.#subscribers) subscriber.end();
  }

  /**
   * The events from now on (subscribed at once), until `ended` or `error` (both yielded),
   * endAll(), or the signal; with `ended` (the session is over already), that end alone.
   * @param {EventsOptions} options
   * @param {EndedEvent | null} ended
   * @returns {AsyncIterableIterator<AnyEvent>}
   */
  iterate({updates = false, signal} = {}, ended = null) {
    const subscription = new Subscription(updates, signal,
                                          () => this.#subscribers.delete(subscription));
    if (ended !== null) subscription.push(ended);
    else this.#subscribers.add(subscription);
    return subscription;
  }
}

/** Events an iterator of events() holds that were not read yet, at most. */
export const MAX_UNREAD = 1000;

/** One iterator of events(): a queue the emitter fills and the app reads, `for await`. */
class Subscription {
  #updates;
  #signal;
  #release;
  /** @type {AnyEvent[]} */
  #queue = [];
  /** @type {((result: IteratorResult<AnyEvent, undefined>) => void) | null} */
  #waiting = null;
  #over = false;  // no more events are taken (its last one is in the queue, if any)
  #stop = () => this.#finish();

  /**
   * @param {boolean} updates
   * @param {AbortSignal | undefined} signal
   * @param {() => void} release
   */
  constructor(updates, signal, release) {
    this.#updates = updates;
    this.#signal = signal;
    this.#release = release;
    signal?.addEventListener("abort", this.#stop, {once: true});
    if (signal?.aborted) this.#finish();
  }

  /** @param {AnyEvent} event */
  push(event) {
    if (this.#over || (event.name === "update" && !this.#updates)) return;
    if (this.#queue.length >= MAX_UNREAD) {  // nobody reads it: it ends, saying why
      const behind = new AimError(`events() held ${MAX_UNREAD} events nobody read; it ended`,
                                  {reason: "EVENTS_UNREAD"});
      this.#queue = [{name: "error", error: behind}];
      this.#close();
      return;
    }
    if (event.name === "ended" || event.name === "error") this.#close();
    if (this.#waiting !== null) {
      const wake = this.#waiting;
      this.#waiting = null;
      wake({value: event, done: false});
    } else {
      this.#queue.push(event);
    }
  }

  /** No more events: what it holds is still read, then it is done. */
  end() {
    this.#close();
    if (this.#waiting !== null && this.#queue.length === 0) this.#finish();
  }

  /** @returns {Promise<IteratorResult<AnyEvent, undefined>>} */
  next() {
    const event = this.#queue.shift();
    if (event !== undefined) return Promise.resolve({value: event, done: false});
    if (this.#over) {
      this.#finish();
      return Promise.resolve({value: undefined, done: true});
    }
    return new Promise((resolve) => { this.#waiting = resolve; });
  }

  /** @returns {Promise<IteratorResult<AnyEvent, undefined>>} */
  return() {
    this.#finish();
    return Promise.resolve({value: undefined, done: true});
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  #close() {
    if (this.#over) return;
    this.#over = true;
    this.#release();
  }

  /** Over now: what it held is dropped, a pending next() is done. */
  #finish() {
    this.#close();
    this.#signal?.removeEventListener("abort", this.#stop);
    this.#queue = [];
    const wake = this.#waiting;
    this.#waiting = null;
    wake?.({value: undefined, done: true});
  }
}
