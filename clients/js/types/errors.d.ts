/**
 * Retry-After (delay-seconds or an HTTP-date) or metadata.retryAfterSeconds, in ms.
 * @param {string | null} header
 * @param {Record<string, string>} metadata
 * @returns {number | null}
 */
export function retryAfter(header: string | null, metadata: Record<string, string>): number | null;
/**
 * The typed error of a JSON-RPC error object.
 * @param {{code?: number, message?: string, data?: unknown}} error
 * @param {number | null} httpStatus
 * @param {string | null} [retryAfterHeader]
 * @param {string} [method]
 * @returns {AimError}
 */
export function errorOf(error: {
    code?: number;
    message?: string;
    data?: unknown;
}, httpStatus: number | null, retryAfterHeader?: string | null, method?: string): AimError;
/**
 * No answer (or a gateway's 502/503/504, `httpStatus`): the call may have applied.
 * @param {string} message
 * @param {unknown} cause
 * @param {number | null} [httpStatus]
 * @param {string} [method]
 */
export function noAnswer(message: string, cause: unknown, httpStatus?: number | null, method?: string): UnavailableError;
/**
 * The error of an HTTP answer without a JSON-RPC body.
 * @param {number} status
 * @param {string} [method]
 * @returns {AimError}
 */
export function httpError(status: number, method?: string): AimError;
/**
 * The typed errors of the library, and how a JSON-RPC error, an HTTP answer or no answer
 * becomes one.
 * @module
 */
/**
 * @typedef {object} ErrorFields
 * @property {number | null} [code] the JSON-RPC error code
 * @property {string} [reason] the ErrorInfo reason
 * @property {Record<string, string>} [metadata] the ErrorInfo metadata
 * @property {number | null} [retryAfterMs] Retry-After (or metadata.retryAfterSeconds), in ms
 * @property {boolean} [retryable] whether the same request may be sent again
 * @property {number | null} [httpStatus]
 * @property {Array<Record<string, any>>} [data] the error's `data` details
 * @property {string} [method] the JSON-RPC method of the call that failed
 * @property {unknown} [cause]
 */
/** A failed call: the JSON-RPC error (code, ErrorInfo reason, metadata) or no answer. */
export class AimError extends Error {
    /**
     * @param {string} message
     * @param {ErrorFields} [fields]
     */
    constructor(message: string, fields?: ErrorFields);
    /** @type {number | null} */
    code: number | null;
    /** @type {string} */
    reason: string;
    /** @type {Record<string, string>} */
    metadata: Record<string, string>;
    /** @type {number | null} */
    retryAfterMs: number | null;
    /** @type {boolean} */
    retryable: boolean;
    /** @type {number | null} */
    httpStatus: number | null;
    /** @type {Array<Record<string, any>>} */
    data: Array<Record<string, any>>;
    /** @type {string} the JSON-RPC method of the call ("" when none was made) */
    method: string;
}
/** -31002: the command named another epoch than the session's. */
export class StaleEpochError extends AimError {
    /** @type {number | null} */
    currentEpoch: number | null;
    /** @type {string} superseded, rebound, ended or ahead */
    staleReason: string;
}
/** -31002 reason superseded: another device took the session over. */
export class SupersededError extends StaleEpochError {
}
/** -31003: not allowed in the session's state. */
export class InvalidStateError extends AimError {
}
/** -32001, -31001, -31005, -31006, -31010: no such task, session, command, operation… */
export class NotFoundError extends AimError {
}
/** -31004: a commandId reused for another call. */
export class CommandConflictError extends AimError {
}
/** -31011: a limit (`retryAfterMs`: when the rate limit lets the call through). */
export class LimitExceededError extends AimError {
}
/** -31013: the tenant's session minutes of the UTC day or month are used up; nothing starts
 * before `resetsAt`. Never retried: waiting seconds does not help. */
export class AllowanceExhaustedError extends AimError {
    /** @type {string} day or month */
    allowance: string;
    /** @type {string | null} an RFC 3339 time */
    resetsAt: string | null;
}
/** -31012, and no answer after the last attempt. */
export class UnavailableError extends AimError {
}
/** -31401/-31403, HTTP 401/403; `authReason` says why a 401 (metadata.reason, "" if none). */
export class AuthError extends AimError {
    /** @type {string} */
    authReason: string;
}
/** A 401 token_expired: get a new token (a token function is asked again on its own). */
export class TokenExpiredError extends AuthError {
}
/** A 401 no new token from the same source cures: another key, audience, issuer, clock… */
export class AuthMisconfiguredError extends AuthError {
}
/** The service's URL answered a redirect: never followed (it would send the call's body and
 * token elsewhere), never retried; `baseUrl` is wrong, or something in between redirects. */
export class RedirectError extends AimError {
}
/** -32602: `violations` lists the bad fields. */
export class InvalidParamsError extends AimError {
    /** @type {Array<{field: string, description: string}>} */
    violations: Array<{
        field: string;
        description: string;
    }>;
}
export type ErrorFields = {
    /**
     * the JSON-RPC error code
     */
    code?: number | null | undefined;
    /**
     * the ErrorInfo reason
     */
    reason?: string | undefined;
    /**
     * the ErrorInfo metadata
     */
    metadata?: Record<string, string> | undefined;
    /**
     * Retry-After (or metadata.retryAfterSeconds), in ms
     */
    retryAfterMs?: number | null | undefined;
    /**
     * whether the same request may be sent again
     */
    retryable?: boolean | undefined;
    httpStatus?: number | null | undefined;
    /**
     * the error's `data` details
     */
    data?: Record<string, any>[] | undefined;
    /**
     * the JSON-RPC method of the call that failed
     */
    method?: string | undefined;
    cause?: unknown;
};
