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
export function reported(error: unknown): void;
/** The name of every event, the same in both client libraries. */
export const Events: Readonly<{
    readonly STATE: "state";
    readonly AGENT: "agent";
    readonly REQUIREMENT: "requirement";
    readonly INTERACTION: "interaction";
    readonly SUPERSEDED: "superseded";
    readonly REBOUND: "rebound";
    readonly ENDED: "ended";
    readonly ERROR: "error";
    readonly UPDATE: "update";
}>;
/** Listeners and iterators of one session's events. */
export class Emitter {
    /**
     * A TypeError for a name that is no event's, naming the events.
     * @param {string} name
     */
    static "__#private@#check"(name: string): void;
    /**
     * @param {string} name
     * @param {Function} fn
     * @param {boolean} once
     */
    add(name: string, fn: Function, once: boolean): void;
    /**
     * @param {string} name
     * @param {Function} fn
     */
    remove(name: string, fn: Function): void;
    /**
     * Every listener of the event's name, then every iterator that takes it. A listener that
     * throws is reported (reportError) and the others still hear the event.
     * @param {AnyEvent} event
     */
    emit(event: AnyEvent): void;
    /** Every iterator ends (after the events it holds). */
    endAll(): void;
    /**
     * The events from now on (subscribed at once), until `ended` or `error` (both yielded),
     * endAll(), or the signal; with `ended` (the session is over already), that end alone.
     * @param {EventsOptions} options
     * @param {EndedEvent | null} ended
     * @returns {AsyncIterableIterator<AnyEvent>}
     */
    iterate({ updates, signal }?: EventsOptions, ended?: EndedEvent | null): AsyncIterableIterator<AnyEvent>;
    #private;
}
/** Events an iterator of events() holds that were not read yet, at most. */
export const MAX_UNREAD: 1000;
/**
 * The session's state, its epoch, the task's state or version
 *   changed (not on repeats).
 */
export type StateEvent = {
    name: "state";
    state: string;
    epoch: number;
    taskState: string;
    taskVersion: number;
};
/**
 * The agent's state changed: dispatched, started, joined, what it
 *   reports of itself (listening, thinking, speaking), or `rotating` while a successor is
 *   brought in (nothing for the app to do), then the new agent's state.
 */
export type AgentEvent = {
    name: "agent";
    state: string;
    rotating: boolean;
    /**
     * the serving agent's (1, 2, …)
     */
    generation: number | null;
    /**
     * the one being brought in while rotating
     */
    successorGeneration: number | null;
    /**
     * on the first event of a new generation after rotating
     */
    rotatedFrom: number | null;
};
/**
 * The agent asks the user to confirm `action`.
 */
export type Requirement = {
    operationId: string;
    requirementId: string;
    action: Record<string, any>;
    actionDigest: string;
    expectedVersion: number;
};
export type RequirementEvent = Requirement & {
    name: "requirement";
};
/**
 * A SendInteraction this session object sent was accepted.
 */
export type Interaction = {
    commandId: string;
    type: string;
    acceptedAt: string;
    /**
     * the operation, when the result carried one
     */
    operation: Record<string, any> | null;
};
export type InteractionEvent = Interaction & {
    name: "interaction";
};
/**
 * Another device took the session over at `epoch`; commands
 *   are refused unsent until join() takes it back.
 */
export type SupersededEvent = {
    name: "superseded";
    epoch: number;
};
/**
 * The room was replaced at `epoch`: join() again.
 */
export type ReboundEvent = {
    name: "rebound";
    epoch: number;
};
/**
 * The task is terminal; the stream is closed after this event.
 */
export type EndedEvent = {
    name: "ended";
    state: string;
    taskState: string;
    endReason: string | null;
};
/**
 * The stream cannot go on; commands still work, and a new
 *   listener (or follow()) starts it again.
 */
export type StreamFailedEvent = {
    name: "error";
    error: import("./errors.js").AimError;
};
/**
 * One raw StreamResponse of the task and its SSE id, before the
 *   events made of it; only to `on("update")` and `events({updates: true})`.
 */
export type UpdateEvent = {
    name: "update";
    eventId: string | null;
    result: Record<string, any>;
};
export type EventMap = {
    state: StateEvent;
    agent: AgentEvent;
    requirement: RequirementEvent;
    interaction: InteractionEvent;
    superseded: SupersededEvent;
    rebound: ReboundEvent;
    ended: EndedEvent;
    error: StreamFailedEvent;
    update: UpdateEvent;
};
export type AnyEvent = EventMap[keyof EventMap];
export type SessionEvent = Exclude<AnyEvent, UpdateEvent>;
export type EventsOptions = {
    /**
     * also every raw frame (`update` events)
     */
    updates?: boolean | undefined;
    /**
     * ends the iteration when it aborts
     */
    signal?: AbortSignal | undefined;
};
export type EventName = (typeof Events)[keyof typeof Events];
