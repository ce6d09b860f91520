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
  constructor(message, fields = {}) {
    super(message, fields.cause === undefined ? undefined : {cause: fields.cause});
    this.name = new.target.name;
    /** @type {number | null} */
    this.code = fields.code ?? null;
    /** @type {string} */
    this.reason = fields.reason ?? "";
    /** @type {Record<string, string>} */
    this.metadata = fields.metadata ?? {};
    /** @type {number | null} */
    this.retryAfterMs = fields.retryAfterMs ?? null;
    /** @type {boolean} */
    this.retryable = fields.retryable ?? false;
    /** @type {number | null} */
    this.httpStatus = fields.httpStatus ?? null;
    /** @type {Array<Record<string, any>>} */
    this.data = fields.data ?? [];
    /** @type {string} the JSON-RPC method of the call ("" when none was made) */
    this.method = fields.method ?? "";
  }
}

/** -31002: the command named another epoch than the session's. */
export class StaleEpochError extends AimError {
  /**
   * @param {string} message
   * @param {ErrorFields} [fields]
   */
  constructor(message, fields = {}) {
    super(message, fields);
    const current = Number.parseInt(this.metadata.currentEpoch ?? "", 10);
    /** @type {number | null} */
    this.currentEpoch = Number.isNaN(current) ? null : current;
    /** @type {string} superseded, rebound, ended or ahead */
    this.staleReason = this.metadata.reason ?? "";
  }
}
/** -31002 reason superseded: another device took the session over. */
export class SupersededError extends StaleEpochError {}
/** -31003: not allowed in the session's state. */
export class InvalidStateError extends AimError {}
/** -32001, -31001, -31005, -31006, -31010: no such task, session, command, operation… */
export class NotFoundError extends AimError {}
/** -31004: a commandId reused for another call. */
export class CommandConflictError extends AimError {}
/** -31011: a limit (`retryAfterMs`: when the rate limit lets the call through). */
export class LimitExceededError extends AimError {}
/** -31013: the tenant's session minutes of the UTC day or month are used up; nothing starts
 * before `resetsAt`. Never retried: waiting seconds does not help. */
export class AllowanceExhaustedError extends AimError {
  /**
   * @param {string} message
   * @param {ErrorFields} [fields]
   */
  constructor(message, fields = {}) {
    super(message, fields);
    /** @type {string} day or month */
    this.allowance = this.metadata.allowance ?? "";
    /** @type {string | null} an RFC 3339 time */
    this.resetsAt = this.metadata.resetsAt ?? null;
  }
}
/** -31012, and no answer after the last attempt. */
export class UnavailableError extends AimError {}
/** -31401/-31403, HTTP 401/403; `authReason` says why a 401 (metadata.reason, "" if none). */
export class AuthError extends AimError {
  /**
   * @param {string} message
   * @param {ErrorFields} [fields]
   */
  constructor(message, fields = {}) {
    super(message, fields);
    /** @type {string} */
    this.authReason = this.metadata.reason ?? "";
  }
}
/** A 401 token_expired: get a new token (a token function is asked again on its own). */
export class TokenExpiredError extends AuthError {}
/** A 401 no new token from the same source cures: another key, audience, issuer, clock… */
export class AuthMisconfiguredError extends AuthError {}
/** The service's URL answered a redirect: never followed (it would send the call's body and
 * token elsewhere), never retried; `baseUrl` is wrong, or something in between redirects. */
export class RedirectError extends AimError {}
/** -32602: `violations` lists the bad fields. */
export class InvalidParamsError extends AimError {
  /**
   * @param {string} message
   * @param {ErrorFields} [fields]
   */
  constructor(message, fields = {}) {
    super(message, fields);
    const bad = this.data.find((d) => String(d["@type"] ?? "").endsWith("google.rpc.BadRequest"));
    /** @type {Array<{field: string, description: string}>} */
    this.violations = (bad?.fieldViolations ?? [])
      .map((/** @type {{field: string, description: string}} */ {field, description}) =>
        ({field, description}));
  }
}

const MISCONFIGURED = new Set(["malformed_token", "token_not_yet_valid", "invalid_signature",
  "unknown_key", "invalid_audience", "invalid_issuer", "invalid_claims"]);

/** @type {Map<number, typeof AimError>} */
const CLASSES = new Map([
  [-31003, InvalidStateError], [-32001, NotFoundError], [-31001, NotFoundError],
  [-31005, NotFoundError], [-31006, NotFoundError], [-31010, NotFoundError],
  [-31004, CommandConflictError], [-31011, LimitExceededError], [-31012, UnavailableError],
  [-31013, AllowanceExhaustedError],
  [-31401, AuthError], [-31403, AuthError], [-32602, InvalidParamsError],
]);

/**
 * Retry-After (delay-seconds or an HTTP-date) or metadata.retryAfterSeconds, in ms.
 * @param {string | null} header
 * @param {Record<string, string>} metadata
 * @returns {number | null}
 */
export function retryAfter(header, metadata) {
  const value = String(header ?? metadata.retryAfterSeconds ?? "").trim();
  if (value === "") return null;
  if (/^\d+$/.test(value)) return Number(value) * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, date - Date.now());
}

/**
 * The typed error of a JSON-RPC error object.
 * @param {{code?: number, message?: string, data?: unknown}} error
 * @param {number | null} httpStatus
 * @param {string | null} [retryAfterHeader]
 * @param {string} [method]
 * @returns {AimError}
 */
export function errorOf(error, httpStatus, retryAfterHeader = null, method = "") {
  /** @type {Array<Record<string, any>>} */
  const data = Array.isArray(error.data) ? error.data : [];
  const info = data.find((d) => String(d["@type"] ?? "").endsWith("google.rpc.ErrorInfo")) ?? {};
  /** @type {Record<string, string>} */
  const metadata = info.metadata ?? {};
  const code = error.code ?? null;
  const retryAfterMs = retryAfter(retryAfterHeader, metadata);
  // -31012 unless its metadata says otherwise (a service not configured for LiveKit)
  const retryable = (code === -31012 && metadata.retryable !== "false")
    || (code === -31011 && retryAfterMs !== null);
  let Class = (code === null ? undefined : CLASSES.get(code)) ?? AimError;
  if (httpStatus === 401 || httpStatus === 403) Class = AuthError;  // whatever the code says
  else if (code === -31002) {
    Class = metadata.reason === "superseded" ? SupersededError : StaleEpochError;
  }
  if (Class === AuthError && httpStatus !== 403 && code !== -31403) {  // a 401: why, in data
    if (metadata.reason === "token_expired") Class = TokenExpiredError;
    else if (MISCONFIGURED.has(metadata.reason)) Class = AuthMisconfiguredError;
  }
  return new Class(String(error.message ?? ""), {
    code, reason: info.reason ?? "", metadata, retryAfterMs, retryable, httpStatus, data, method});
}

/**
 * No answer (or a gateway's 502/503/504, `httpStatus`): the call may have applied.
 * @param {string} message
 * @param {unknown} cause
 * @param {number | null} [httpStatus]
 * @param {string} [method]
 */
export function noAnswer(message, cause, httpStatus = null, method = "") {
  return new UnavailableError(message, {retryable: true, cause, httpStatus, method});
}

/**
 * The error of an HTTP answer without a JSON-RPC body.
 * @param {number} status
 * @param {string} [method]
 * @returns {AimError}
 */
export function httpError(status, method = "") {
  const message = `HTTP ${status} without a JSON-RPC answer`;
  if ([502, 503, 504].includes(status)) return noAnswer(message, undefined, status, method);
  const Class = status === 401 || status === 403 ? AuthError : AimError;
  return new Class(message, {httpStatus: status, method});
}
