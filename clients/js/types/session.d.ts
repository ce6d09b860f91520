/**
 * The open requirement in a task status (its data part), or null.
 * @param {any} status
 * @returns {Requirement | null}
 */
export function requirementOf(status: any): Requirement | null;
/**
 * One realtime session as this device sees it. Made by `AimClient.createSession` and
 * `AimClient.resumeSession`, never by the app.
 */
export class Session {
    /**
     * @param {Wire} wire
     * @param {SessionFields} fields
     */
    constructor(wire: Wire, { endpointKey, capabilities, endpointId, requirement, info, ...fields }: SessionFields);
    /** @type {string} */
    sessionId: string;
    /** @type {string} */
    taskId: string;
    /** @type {string} the session's state: provisioning, ready, joining, active, … */
    state: string;
    /** @type {number} the newest epoch the service showed */
    epoch: number;
    /** @type {string} the A2A task's state */
    taskState: string;
    /** @type {number} */
    taskVersion: number;
    /** @type {string | null} this device's endpoint, once registered */
    endpointId: string | null;
    /** @type {Requirement | null} the open requirement, as the task shows it */
    requirement: Requirement | null;
    /** @type {boolean} another device holds the session: commands are refused unsent */
    superseded: boolean;
    /** @type {string | null} the agent's state as the stream last named it */
    agentState: string | null;
    /** @type {number | null} the serving agent's generation, as the stream named it */
    agentGeneration: number | null;
    /** @type {Record<string, any> | null} the newest session object (GetSession, a command) */
    info: Record<string, any> | null;
    /** @type {EndedEvent | null} the end, once the task is terminal */
    ended: EndedEvent | null;
    /**
     * Listen to an event; listening starts the stream (follow()).
     * @template {keyof EventMap} K
     * @param {K} name one of `Events`
     * @param {(event: EventMap[K]) => void} fn
     * @returns {() => void} stops this listener
     */
    on<K extends keyof EventMap>(name: K, fn: (event: EventMap[K]) => void): () => void;
    /**
     * Listen to the next event of `name` only; listening starts the stream (follow()).
     * @template {keyof EventMap} K
     * @param {K} name one of `Events`
     * @param {(event: EventMap[K]) => void} fn
     * @returns {() => void} stops this listener
     */
    once<K extends keyof EventMap>(name: K, fn: (event: EventMap[K]) => void): () => void;
    /**
     * Stop a listener (the stream goes on: close() stops it).
     * @template {keyof EventMap} K
     * @param {K} name
     * @param {(event: EventMap[K]) => void} fn
     */
    off<K extends keyof EventMap>(name: K, fn: (event: EventMap[K]) => void): void;
    /**
     * Every event from the call on, `for await`; it starts the stream (follow()). It ends
     * after `ended` or `error` (both yielded), at close(), or when `signal` aborts (what it
     * held unread is dropped); once the session has ended, it yields that end only. One that
     * holds more than 1000 events nobody read ends with an `error` event (EVENTS_UNREAD).
     * @param {EventsOptions} [options]
     * @returns {AsyncIterableIterator<AnyEvent>}
     */
    events(options?: EventsOptions): AsyncIterableIterator<AnyEvent>;
    /**
     * GetSession: the whole session object now (also kept in `info`).
     * @param {CallOptions} [options]
     * @returns {Promise<Record<string, any>>}
     */
    refresh({ signal }?: CallOptions): Promise<Record<string, any>>;
    /**
     * Poll GetSession while the session is `provisioning`: the state it left it for (AimError
     * reason TIMEOUT after `timeoutMs`, by default the client's readyTimeoutMs).
     * @param {{timeoutMs?: number, signal?: AbortSignal}} [options]
     * @returns {Promise<string>}
     */
    waitReady({ timeoutMs, signal }?: {
        timeoutMs?: number;
        signal?: AbortSignal;
    }): Promise<string>;
    /** Follow the task live (listening does it too); a second call does nothing. */
    follow(): void;
    /** Stop the stream (no command is sent); iterators of events() end. */
    close(): void;
    /**
     * RegisterEndpoint with this device's key and capabilities: the endpoint object.
     * @param {CallOptions} [options]
     * @returns {Promise<Record<string, any>>}
     */
    register({ signal }?: CallOptions): Promise<Record<string, any>>;
    /**
     * Register this device (once per epoch) and JoinSession at the current epoch: the LiveKit
     * url and token for room.connect(url, token). Waits while the session is `provisioning`
     * (AimError reason TIMEOUT after `readyTimeoutMs`). Called again: a new JoinSession (a new
     * token); after `superseded` it takes the session back.
     * @param {CallOptions} [options]
     * @returns {Promise<JoinResult>}
     */
    join({ signal }?: CallOptions): Promise<JoinResult>;
    /**
     * input.text to the agent: the accepted interaction.
     * @param {string} text
     * @param {CallOptions} [options]
     * @returns {Promise<Interaction>}
     */
    sendText(text: string, options?: CallOptions): Promise<Interaction>;
    /**
     * Any SendInteraction (protocol.md lists the types): the accepted interaction, with the
     * operation when the result carried one.
     * @param {string} type
     * @param {Record<string, unknown>} [payload]
     * @param {CallOptions} [options]
     * @returns {Promise<Interaction>}
     */
    sendInteraction(type: string, payload?: Record<string, unknown>, { signal }?: CallOptions): Promise<Interaction>;
    /**
     * GetOperation: one operation of this session now.
     * @param {string} operationId
     * @param {CallOptions} [options]
     * @returns {Promise<Record<string, any>>}
     */
    operation(operationId: string, { signal }?: CallOptions): Promise<Record<string, any>>;
    /**
     * Answer a confirmation the agent asked for: "approve" (operation.confirm) or "deny"
     * (operation.cancel); `{via: "task"}` answers with A2A ContinueTask. Returns the operation.
     * @param {string} operationId
     * @param {"approve" | "deny"} decision
     * @param {ConfirmOptions} [options]
     * @returns {Promise<Record<string, any>>}
     */
    confirm(operationId: string, decision: "approve" | "deny", { via, text, signal }?: ConfirmOptions): Promise<Record<string, any>>;
    /**
     * EndSession (no epoch: any device of the user may end it): the session resource after it.
     * @param {string} [reason]
     * @param {CallOptions} [options]
     * @returns {Promise<Record<string, any>>}
     */
    end(reason?: string, { signal }?: CallOptions): Promise<Record<string, any>>;
    #private;
}
export type Wire = import("./wire.js").Wire;
export type CallOptions = import("./wire.js").CallOptions;
export type EventMap = import("./events.js").EventMap;
export type AnyEvent = import("./events.js").AnyEvent;
export type EndedEvent = import("./events.js").EndedEvent;
export type EventsOptions = import("./events.js").EventsOptions;
export type Requirement = import("./events.js").Requirement;
export type Interaction = import("./events.js").Interaction;
/**
 * what this device can do (RegisterEndpoint's capabilities)
 */
export type Capabilities = {
    audioInput?: boolean | undefined;
    audioOutput?: boolean | undefined;
    camera?: boolean | undefined;
    screen?: boolean | undefined;
    interactions?: string[] | undefined;
};
/**
 * JoinSession's media: what livekit-client's
 *   `room.connect(url, token)` needs.
 */
export type JoinResult = {
    /**
     * the LiveKit server's URL
     */
    url: string;
    /**
     * the join token (short-lived: see expiresAt)
     */
    token: string;
    /**
     * the room's name
     */
    room: string;
    /**
     * this device's participant identity
     */
    identity: string;
    /**
     * when the token stops being accepted (RFC 3339)
     */
    expiresAt: string;
    /**
     * the session's epoch after the join
     */
    epoch: number;
    endpointId: string;
    /**
     * the JoinSession's commandId
     */
    commandId: string;
};
export type ConfirmOptions = {
    /**
     * "task": answer with A2A ContinueTask
     */
    via?: "interaction" | "task" | undefined;
    /**
     * with via "task": a text part in the ContinueTask message
     */
    text?: string | undefined;
    signal?: AbortSignal | undefined;
};
/**
 * what AimClient knows of a session when it makes the object
 */
export type SessionFields = {
    sessionId: string;
    taskId: string;
    state: string;
    epoch: number;
    taskState: string;
    taskVersion: number;
    endpointKey: string;
    capabilities?: Capabilities | undefined;
    endpointId?: string | null | undefined;
    requirement?: import("./events.js").Requirement | null | undefined;
    info?: Record<string, any> | null | undefined;
};
