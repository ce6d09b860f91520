/**
 * The wire: one JSON-RPC call to the service's /a2a, with the retry rules, and the helpers
 * every other module shares (ids, waits that an AbortSignal cuts short).
 * @module
 */

import {AimError, RedirectError, TokenExpiredError, errorOf, httpError, noAnswer} from "./errors.js";

export const REALTIME = "urn:aim:a2a:realtime:v1";

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
export function uuid() {
  if (typeof crypto.randomUUID === "function") return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/**
 * Resolves after `ms`, or rejects with the signal's reason as soon as it aborts.
 * @param {number} ms
 * @param {AbortSignal} [signal]
 * @returns {Promise<void>}
 */
export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const stop = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", stop);
      resolve();
    }, ms);
    signal?.addEventListener("abort", stop, {once: true});
  });
}

/**
 * Exponential backoff, full jitter: a random delay below min(max, base·2^(n-1)).
 * @param {number} n
 * @param {number} base
 * @param {number} max
 */
export const backoff = (n, base, max) => Math.random() * Math.min(max, base * 2 ** (n - 1));

/**
 * The realtime metadata of a task or status update.
 * @param {any} item
 * @returns {Record<string, any>}
 */
export const realtimeOf = (item) => item?.metadata?.[REALTIME] ?? {};

/**
 * An AbortController that aborts with `signal` too, and after `ms` when given; `release()`
 * drops the timer and the link.
 * @param {AbortSignal | undefined} signal
 * @param {number | null} ms
 */
export function linked(signal, ms) {
  const controller = new AbortController();
  const follow = () => controller.abort(signal?.reason);
  signal?.addEventListener("abort", follow, {once: true});
  if (signal?.aborted) follow();
  const timer = ms === null ? null : setTimeout(() => controller.abort(), ms);
  return {
    signal: controller.signal,
    release() {
      if (timer !== null) clearTimeout(timer);
      signal?.removeEventListener("abort", follow);
    },
  };
}

/**
 * The answer itself, unless it is a redirect: fetch was told not to follow it ("manual": the
 * browser hands back an opaque redirect, with neither status nor Location; a fetch of the
 * app's may hand back the 3xx as it came). Nothing was sent to where it points.
 * @param {Response} response
 * @param {string} method
 */
function notRedirected(response, method) {
  const status = response.status;
  if (response.type !== "opaqueredirect" && !(status >= 300 && status < 400)) return response;
  throw new RedirectError(
    "the service answered with a redirect, which this library does not follow (it would send " +
    "the request's body and token to another URL): check baseUrl",
    {reason: "REDIRECT", httpStatus: status || null, method});
}

/** One service, one user: how a call is sent and sent again. */
export class Wire {
  /** @type {(url: string, init: RequestInit) => Promise<Response>} */
  #fetch;
  /** @type {ClientOptions["token"]} */
  #token;
  #rpcId = 0;

  /** @param {ClientOptions} options */
  constructor({baseUrl, token, retry = {}, requestTimeoutMs = 30000, readyTimeoutMs = 20000,
               fetch: impl = globalThis.fetch}) {
    if (!baseUrl) throw new TypeError("AimClient: baseUrl is required");
    if (token === undefined || token === null) throw new TypeError("AimClient: token is required");
    this.url = `${String(baseUrl).replace(/\/+$/, "")}/a2a`;
    /** @type {Required<RetryOptions>} */
    this.retry = {attempts: 5, baseDelayMs: 250, maxDelayMs: 5000, maxRetryAfterMs: 60000,
                  ...retry};
    this.requestTimeoutMs = requestTimeoutMs;
    this.readyTimeoutMs = readyTimeoutMs;
    this.#fetch = (url, init) => impl(url, init);  // never as a method: "Illegal invocation"
    this.#token = token;
  }

  /**
   * A request body, serialized once: every retry sends these very bytes.
   * @param {string} method
   * @param {unknown} params
   */
  body(method, params) {
    return JSON.stringify({jsonrpc: "2.0", id: ++this.#rpcId, method, params});
  }

  /**
   * The four headers of every request (and `extra`); the token is asked for each time.
   * @param {Record<string, string>} [extra]
   * @returns {Promise<Record<string, string>>}
   */
  async headers(extra = {}) {
    const token = typeof this.#token === "function" ? await this.#token() : this.#token;
    return {"Content-Type": "application/json", "Authorization": `Bearer ${token}`,
            "A2A-Version": "1.0", "A2A-Extensions": REALTIME, ...extra};
  }

  /**
   * POST /a2a; a redirect is not followed but thrown (RedirectError).
   * @param {string} body
   * @param {Record<string, string>} headers
   * @param {AbortSignal} signal
   * @param {string} method
   */
  async post(body, headers, signal, method) {
    /** @type {RequestInit} */
    const init = {method: "POST", body, headers, signal, cache: "no-store", redirect: "manual"};
    return notRedirected(await this.#fetch(this.url, init), method);
  }

  /**
   * Whether a new token may cure `error`: it expired, and the token is a function.
   * @param {unknown} error
   */
  refreshes(error) {
    return error instanceof TokenExpiredError && typeof this.#token === "function";
  }

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
  async call(method, params, {signal} = {}) {
    signal?.throwIfAborted();
    const body = this.body(method, params);
    const {attempts, baseDelayMs, maxDelayMs, maxRetryAfterMs} = this.retry;
    let refresh = true;
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.#once(body, method, signal);
      } catch (error) {
        if (signal?.aborted) throw signal.reason;
        if (refresh && this.refreshes(error)) {
          refresh = false;  // the next attempt asks the token function for a new token
          attempt -= 1;
          continue;
        }
        if (!(error instanceof AimError) || !error.retryable || attempt >= attempts) throw error;
        const limited = error.code === -31011;
        const wait = error.retryAfterMs ?? 0;
        if (limited && wait > maxRetryAfterMs) throw error;  // the app decides
        await sleep(limited ? wait : backoff(attempt, baseDelayMs, maxDelayMs), signal);
      }
    }
  }

  /**
   * @param {string} body
   * @param {string} method
   * @param {AbortSignal | undefined} signal
   */
  async #once(body, method, signal) {
    const headers = await this.headers();
    const request = linked(signal, this.requestTimeoutMs);
    /** @type {Response} */
    let response;
    let answer = null;
    try {
      response = await this.post(body, headers, request.signal, method);
      const text = await response.text();
      try {
        answer = JSON.parse(text);
      } catch {
        // not JSON (a proxy's page): judged by its status
      }
    } catch (cause) {
      if (cause instanceof RedirectError) throw cause;
      const late = request.signal.aborted && !signal?.aborted;
      throw noAnswer(late ? "no answer in time" : "no answer", cause, null, method);
    } finally {
      request.release();
    }
    const retryAfterHeader = response.headers.get("retry-after");
    if (answer?.error) throw errorOf(answer.error, response.status, retryAfterHeader, method);
    if (answer !== null && typeof answer === "object" && "result" in answer) return answer.result;
    throw httpError(response.status, method);
  }
}
