/**
 * @typedef {object} RetryOptions
 * @property {number} [attempts] tries of one call, the first included (5)
 * @property {number} [baseDelayMs] backoff after no answer: a random delay below
 *   min(maxDelayMs, baseDelayMs·2^(n-1)) (250)
 * @property {number} [maxDelayMs] (5000)
 * @property {number} [maxRetryAfterMs] a -31011 asking to wait longer is thrown at once (60000)
 */
/**
 * @typedef {object} ClientOptions
 * @property {string} baseUrl the service's URL (its /a2a is called)
 * @property {string | (() => string | Promise<string>)} token a bearer token, or a function
 *   giving one (asked before every request, and again after a 401 token_expired)
 * @property {RetryOptions} [retry]
 * @property {number} [requestTimeoutMs] one request's limit (30000)
 * @property {number} [readyTimeoutMs] how long join() and waitReady() wait for a session
 *   to leave `provisioning` (20000)
 * @property {typeof globalThis.fetch} [fetch] the fetch to use (globalThis.fetch)
 */
/**
 * @typedef {object} CallOptions
 * @property {AbortSignal} [signal] aborts the call: its request and every wait between
 *   retries; the call then rejects with the signal's reason (a command may still have applied)
 */
/** UUID v4: crypto.randomUUID where there is one (secure contexts), else getRandomValues. */
export function uuid(): string;
/**
 * Resolves after `ms`, or rejects with the signal's reason as soon as it aborts.
 * @param {number} ms
 * @param {AbortSignal} [signal]
 * @returns {Promise<void>}
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void>;
/**
 * An AbortController that aborts with `signal` too, and after `ms` when given; `release()`
 * drops the timer and the link.
 * @param {AbortSignal | undefined} signal
 * @param {number | null} ms
 */
export function linked(signal: AbortSignal | undefined, ms: number | null): {
    signal: AbortSignal;
    release(): void;
};
export const REALTIME: "urn:aim:a2a:realtime:v1";
export function backoff(n: number, base: number, max: number): number;
export function realtimeOf(item: any): Record<string, any>;
/** One service, one user: how a call is sent and sent again. */
export class Wire {
    /** @param {ClientOptions} options */
    constructor({ baseUrl, token, retry, requestTimeoutMs, readyTimeoutMs, fetch: impl }: ClientOptions);
    url: string;
    /** @type {Required<RetryOptions>} */
    retry: Required<RetryOptions>;
    requestTimeoutMs: number;
    readyTimeoutMs: number;
    /**
     * A request body, serialized once: every retry sends these very bytes.
     * @param {string} method
     * @param {unknown} params
     */
    body(method: string, params: unknown): string;
    /**
     * The four headers of every request (and `extra`); the token is asked for each time.
     * @param {Record<string, string>} [extra]
     * @returns {Promise<Record<string, string>>}
     */
    headers(extra?: Record<string, string>): Promise<Record<string, string>>;
    /**
     * POST /a2a; a redirect is not followed but thrown (RedirectError).
     * @param {string} body
     * @param {Record<string, string>} headers
     * @param {AbortSignal} signal
     * @param {string} method
     */
    post(body: string, headers: Record<string, string>, signal: AbortSignal, method: string): Promise<Response>;
    /**
     * Whether a new token may cure `error`: it expired, and the token is a function.
     * @param {unknown} error
     */
    refreshes(error: unknown): boolean;
    /**
     * One call: sent again (same bytes) after no answer, a gateway's 502/503/504, -31012 (unless
     * its metadata says `retryable: "false"`), or -31011 with a Retry-After (waited out, unless
     * longer than `retry.maxRetryAfterMs`), up to `retry.attempts` times; after a 401
     * token_expired once, at once, with the token function asked again; else thrown, typed.
     * An aborted `signal` rejects with its reason, at once.
     * @param {string} method
     * @param {unknown} params
     * @param {CallOptions} [options]
     * @returns {Promise<any>}
     */
    call(method: string, params: unknown, { signal }?: CallOptions): Promise<any>;
    #private;
}
export type RetryOptions = {
    /**
     * tries of one call, the first included (5)
     */
    attempts?: number | undefined;
    /**
     * backoff after no answer: a random delay below
     * min(maxDelayMs, baseDelayMs·2^(n-1)) (250)
     */
    baseDelayMs?: number | undefined;
    /**
     * (5000)
     */
    maxDelayMs?: number | undefined;
    /**
     * a -31011 asking to wait longer is thrown at once (60000)
     */
    maxRetryAfterMs?: number | undefined;
};
export type ClientOptions = {
    /**
     * the service's URL (its /a2a is called)
     */
    baseUrl: string;
    /**
     * a bearer token, or a function
     * giving one (asked before every request, and again after a 401 token_expired)
     */
    token: string | (() => string | Promise<string>);
    retry?: RetryOptions | undefined;
    /**
     * one request's limit (30000)
     */
    requestTimeoutMs?: number | undefined;
    /**
     * how long join() and waitReady() wait for a session
     * to leave `provisioning` (20000)
     */
    readyTimeoutMs?: number | undefined;
    /**
     * the fetch to use (globalThis.fetch)
     */
    fetch?: typeof fetch | undefined;
};
export type CallOptions = {
    /**
     * aborts the call: its request and every wait between
     * retries; the call then rejects with the signal's reason (a command may still have applied)
     */
    signal?: AbortSignal | undefined;
};
