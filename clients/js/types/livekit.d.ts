/** A Session bound to a LiveKit room. */
export class RoomBinding {
    /**
     * @param {Session} session
     * @param {LiveKitRoom} room livekit-client's Room
     * @param {RoomBindingOptions} [options]
     */
    constructor(session: Session, room: LiveKitRoom, { refreshBeforeMs, rejoinAttempts, rejoinDelayMs, onError }?: RoomBindingOptions);
    /** @returns {JoinResult | null} the join the room is (or was last) connected with */
    get joined(): JoinResult | null;
    /** @returns {boolean} whether the room is connected by this binding now */
    get connected(): boolean;
    /** @returns {boolean} from connect() until the session ended or close() */
    get listening(): boolean;
    /**
     * Join the session (or use `joined`, an earlier session.join()'s result, while its token
     * is fresh and its epoch the session's) and connect the room with it, leaving it first if
     * the binding has it connected; from then on the binding follows the session. Called again
     * after `superseded`, it takes the session back. `signal` aborts the join (not LiveKit's
     * connect). A failure leaves the binding out of the room until connect() is called again.
     * @param {{joined?: JoinResult, signal?: AbortSignal}} [options]
     * @returns {Promise<JoinResult>}
     */
    connect({ joined, signal }?: {
        joined?: JoinResult;
        signal?: AbortSignal;
    }): Promise<JoinResult>;
    /**
     * Stop following the session and the room, and any re-join; the room stays as it is.
     * Resolves once what the binding was doing to the room is over. connect() starts again.
     * @returns {Promise<void>}
     */
    close(): Promise<void>;
    #private;
}
export type Session = import("./session.js").Session;
export type JoinResult = import("./session.js").JoinResult;
/**
 * What the binding uses of livekit-client's `Room` (checked against its declarations).
 */
export type LiveKitRoom = {
    connect: (url: string, token: string) => Promise<void>;
    disconnect: () => Promise<void>;
    on: (event: "disconnected", listener: (reason?: number) => void) => unknown;
    off: (event: "disconnected", listener: (reason?: number) => void) => unknown;
};
export type RoomBindingOptions = {
    /**
     * a join token that expires sooner than this is not
     * handed to LiveKit: a new JoinSession gives a fresh one (60000)
     */
    refreshBeforeMs?: number | undefined;
    /**
     * joins after the room dropped, before giving up (5)
     */
    rejoinAttempts?: number | undefined;
    /**
     * the backoff's base between them (500, doubling, at most
     * 8 s, full jitter)
     */
    rejoinDelayMs?: number | undefined;
    /**
     * told when a join after a drop gave up, or
     * a reconnect after a rebind failed (default: reportError, as an uncaught error)
     */
    onError?: ((error: unknown) => void) | undefined;
};
