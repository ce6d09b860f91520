/** A client of one service for one user (its token). */
export class AimClient {
    /** @param {ClientOptions} options */
    constructor(options: ClientOptions);
    /**
     * Any other JSON-RPC method (GetTask, aim.realtime.GetCommand, …), retried the same way.
     * @param {string} method
     * @param {Record<string, unknown>} params
     * @param {CallOptions} [options]
     * @returns {Promise<any>}
     */
    call(method: string, params: Record<string, unknown>, options?: CallOptions): Promise<any>;
    /**
     * Start a session: SendMessage with a `session.create` data part (messageId and
     * clientSessionId made once, kept on retries); it waits for `ready` the service's way (up
     * to 5 s), then reads GetSession (the session object, in `info`), unless
     * `returnImmediately`. A TASK_STATE_REJECTED task throws AimError "REJECTED".
     * @param {CreateSessionOptions} options
     * @returns {Promise<Session>}
     */
    createSession(options: CreateSessionOptions): Promise<Session>;
    /**
     * A Session for one created earlier (an app restart, another device): GetSession and
     * GetTask (its state and open requirement); join() registers `endpointKey` (the same key:
     * the same endpointId).
     * @param {ResumeSessionOptions} options
     * @returns {Promise<Session>}
     */
    resumeSession(options: ResumeSessionOptions): Promise<Session>;
    #private;
}
export type ClientOptions = import("./wire.js").ClientOptions;
export type CallOptions = import("./wire.js").CallOptions;
export type Capabilities = import("./session.js").Capabilities;
export type CreateSessionOptions = {
    /**
     * names this device within the session (the same key: the
     * same endpointId)
     */
    endpointKey: string;
    /**
     * what this device can do
     */
    capabilities?: import("./session.js").Capabilities | undefined;
    /**
     * the session's media and interactions
     */
    requested?: Record<string, unknown> | undefined;
    /**
     * (["audio_input", "audio_output"])
     */
    requiredCapabilities?: string[] | undefined;
    /**
     * ("off")
     */
    recording?: "off" | "on" | undefined;
    /**
     * (both "off")
     */
    retention?: {
        transcript: string;
        summary: string;
    } | undefined;
    /**
     * the text part of the message ("Start a voice session")
     */
    text?: string | undefined;
    /**
     * do not wait the service's up to 5 s for `ready`
     */
    returnImmediately?: boolean | undefined;
    signal?: AbortSignal | undefined;
};
export type ResumeSessionOptions = {
    sessionId: string;
    endpointKey: string;
    /**
     * (GetSession's)
     */
    taskId?: string | undefined;
    capabilities?: import("./session.js").Capabilities | undefined;
    signal?: AbortSignal | undefined;
};
import { Session } from "./session.js";
