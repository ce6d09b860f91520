/**
 * aim-realtime.js: the browser client of the AIM realtime service (docs/browser-client.md).
 * One ES module, no build step, no dependency: fetch, ReadableStream and TextDecoder.
 *
 *   import {AimClient} from "https://<service>/sdk/aim-realtime.js";
 *   const client = new AimClient({baseUrl: "https://<service>", token: () => myToken()});
 *   const session = await client.createSession({endpointKey: "alice-phone"});
 *   session.on("state", ({state}) => console.log(state));
 *   const {url, token} = await session.join();  // livekit-client: room.connect(url, token)
 *
 * Every mutating call mints one commandId when it is called and, when the answer is lost or
 * the service says to retry, sends the very same request again: it applies once.
 * @module aim-realtime
 */

const REALTIME = "urn:aim:a2a:realtime:v1";
const TERMINAL = new Set(["TASK_STATE_COMPLETED", "TASK_STATE_CANCELED", "TASK_STATE_FAILED",
                          "TASK_STATE_REJECTED"]);
const EVENTS = new Set(["state", "agent", "requirement", "interaction", "superseded", "rebound",
                        "ended", "error"]);
// reconnects: backoff and failures in a row; silence: three missed 15 s heartbeats
const STREAM = {baseMs: 250, maxMs: 5000, failures: 10, silenceMs: 45000};
// the service's last line of a stream it cut on purpose (lifetime, a reader that fell behind)
const RECONNECT = ": reconnect";
const POLL_MS = 250;
const DEVICE = {audioInput: true, audioOutput: true, camera: false, screen: false,
                interactions: ["text", "confirmation"]};

// ---- typed errors --------------------------------------------------------------------------

/** A failed call: the JSON-RPC error (code, ErrorInfo reason, metadata) or no answer. The
 * types of every class, option and event are in aim-realtime.d.ts, served beside this file. */
export class AimError extends Error {
  constructor(message, fields = {}) {
    super(message, fields.cause === undefined ? undefined : {cause: fields.cause});
    this.name = new.target.name;
    this.code = fields.code ?? null;
    this.reason = fields.reason ?? "";
    this.metadata = fields.metadata ?? {};
    this.retryAfterMs = fields.retryAfterMs ?? null;
    this.retryable = fields.retryable ?? false;
    this.httpStatus = fields.httpStatus ?? null;
    this.data = fields.data ?? [];
  }
}

/** -31002: the command named another epoch than the session's. */
export class StaleEpochError extends AimError {
  constructor(message, fields = {}) {
    super(message, fields);
    const current = Number.parseInt(this.metadata.currentEpoch ?? "", 10);
    this.currentEpoch = Number.isNaN(current) ? null : current;
    this.staleReason = this.metadata.reason ?? "";
  }
}
export class SupersededError extends StaleEpochError {}  // -31002 superseded: another device
export class InvalidStateError extends AimError {}  // -31003: not allowed in this state
export class NotFoundError extends AimError {}  // -32001 -31001 -31005 -31006 -31010
export class CommandConflictError extends AimError {}  // -31004: an id reused for another call
export class LimitExceededError extends AimError {}  // -31011 (retryAfterMs: the rate limit)
/** -31013: the tenant's session minutes of the UTC day or month are used up; nothing starts
 * before `resetsAt`. Never retried: waiting seconds does not help. */
export class AllowanceExhaustedError extends AimError {
  constructor(message, fields = {}) {
    super(message, fields);
    this.allowance = this.metadata.allowance ?? "";
    this.resetsAt = this.metadata.resetsAt ?? null;
  }
}
export class UnavailableError extends AimError {}  // -31012; no answer after the last attempt
/** -31401/-31403, HTTP 401/403; `authReason` says why a 401 (metadata.reason, "" if none). */
export class AuthError extends AimError {
  constructor(message, fields = {}) {
    super(message, fields);
    this.authReason = this.metadata.reason ?? "";
  }
}
export class TokenExpiredError extends AuthError {}  // 401 token_expired: get a new token
/** A 401 no new token from the same source cures: another key, audience, issuer, clock… */
export class AuthMisconfiguredError extends AuthError {}
const MISCONFIGURED = new Set(["malformed_token", "token_not_yet_valid", "invalid_signature",
  "unknown_key", "invalid_audience", "invalid_issuer", "invalid_claims"]);
/** The service's URL answered a redirect: never followed (it would send the call's body and
 * token elsewhere), never retried; `baseUrl` is wrong, or something in between redirects. */
export class RedirectError extends AimError {}
/** -32602: `violations` lists the bad fields, [{field, description}]. */
export class InvalidParamsError extends AimError {
  constructor(message, fields = {}) {
    super(message, fields);
    const bad = this.data.find((d) => String(d["@type"] ?? "").endsWith("google.rpc.BadRequest"));
    this.violations = (bad?.fieldViolations ?? [])
      .map(({field, description}) => ({field, description}));
  }
}

const CLASSES = new Map([
  [-31003, InvalidStateError], [-32001, NotFoundError], [-31001, NotFoundError],
  [-31005, NotFoundError], [-31006, NotFoundError], [-31010, NotFoundError],
  [-31004, CommandConflictError], [-31011, LimitExceededError], [-31012, UnavailableError],
  [-31013, AllowanceExhaustedError],
  [-31401, AuthError], [-31403, AuthError], [-32602, InvalidParamsError],
]);

/** Retry-After (delay-seconds or an HTTP-date) or metadata.retryAfterSeconds, in ms. */
function retryAfter(header, metadata) {
  const value = String(header ?? metadata.retryAfterSeconds ?? "").trim();
  if (value === "") return null;
  if (/^\d+$/.test(value)) return Number(value) * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, date - Date.now());
}

/** The typed error of a JSON-RPC error object. */
function errorOf(error, httpStatus, retryAfterHeader = null) {
  const data = Array.isArray(error.data) ? error.data : [];
  const info = data.find((d) => String(d["@type"] ?? "").endsWith("google.rpc.ErrorInfo")) ?? {};
  const metadata = info.metadata ?? {};
  const code = error.code ?? null;
  const retryAfterMs = retryAfter(retryAfterHeader, metadata);
  // -31012 unless its metadata says otherwise (a service not configured for LiveKit)
  const retryable = (code === -31012 && metadata.retryable !== "false")
    || (code === -31011 && retryAfterMs !== null);
  let Class = CLASSES.get(code) ?? AimError;
  if (httpStatus === 401 || httpStatus === 403) Class = AuthError;  // whatever the code says
  else if (code === -31002) {
    Class = metadata.reason === "superseded" ? SupersededError : StaleEpochError;
  }
  if (Class === AuthError && httpStatus !== 403 && code !== -31403) {  // a 401: why, in data
    if (metadata.reason === "token_expired") Class = TokenExpiredError;
    else if (MISCONFIGURED.has(metadata.reason)) Class = AuthMisconfiguredError;
  }
  return new Class(String(error.message ?? ""), {
    code, reason: info.reason ?? "", metadata, retryAfterMs, retryable, httpStatus, data});
}

/** No answer (or a gateway's 502/503/504, `httpStatus`): the call may have applied. */
function noAnswer(message, cause, httpStatus = null) {
  return new UnavailableError(message, {retryable: true, cause, httpStatus});
}

/** The answer itself, unless it is a redirect: fetch was told not to follow it ("manual": the
 * browser hands back an opaque redirect, with neither status nor Location; a fetch of the
 * app's may hand back the 3xx as it came). Nothing was sent to where it points. */
function notRedirected(response) {
  const status = response.status;
  if (response.type !== "opaqueredirect" && !(status >= 300 && status < 400)) return response;
  throw new RedirectError(
    "the service answered with a redirect, which this library does not follow (it would send " +
    "the request's body and token to another URL): check baseUrl",
    {reason: "REDIRECT", httpStatus: status || null});
}

/** The error of an HTTP answer without a JSON-RPC body. */
function httpError(status) {
  const message = `HTTP ${status} without a JSON-RPC answer`;
  if ([502, 503, 504].includes(status)) return noAnswer(message, undefined, status);
  const Class = status === 401 || status === 403 ? AuthError : AimError;
  return new Class(message, {httpStatus: status});
}

// ---- helpers -------------------------------------------------------------------------------

/** UUID v4: crypto.randomUUID where there is one (secure contexts), else getRandomValues. */
function uuid() {
  if (typeof crypto.randomUUID === "function") return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
/** Exponential backoff, full jitter: a random delay below min(max, base·2^(n-1)). */
const backoff = (n, base, max) => Math.random() * Math.min(max, base * 2 ** (n - 1));
const realtimeOf = (item) => item?.metadata?.[REALTIME] ?? {};

/** The JSON object in `text`, or null (not JSON, or not an object). */
function parsed(text) {
  try {
    const value = JSON.parse(text);
    return value !== null && typeof value === "object" ? value : null;
  } catch {
    return null;
  }
}

/** The open requirement in a task status (its data part), or null. */
function requirementOf(status) {
  const data = (status?.message?.parts ?? []).map((p) => p.data).find((d) => d?.requirementId);
  if (status?.state !== "TASK_STATE_INPUT_REQUIRED" || !data) return null;
  const {operationId, requirementId, action, actionDigest, expectedVersion} = data;
  return {operationId, requirementId, action, actionDigest, expectedVersion};
}

/** The frames {id, data, event} of a text/event-stream body, and {reconnect: true} for the
 * service's `: reconnect`; `onChunk` is told of every chunk. */
async function* sse(body, onChunk) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let data = null;
  let event = "";
  let id = "";  // SSE's last-event-id buffer: it carries over to the frames after
  try {
    for (;;) {
      const {value, done} = await reader.read();
      if (done) return;  // a frame cut off at the end is dropped, as SSE says
      onChunk();
      buffer += decoder.decode(value, {stream: true});
      const keep = buffer.endsWith("\r") ? 1 : 0;  // maybe the first half of a CRLF
      const lines = buffer.slice(0, buffer.length - keep).split(/\r\n|\r|\n/);
      buffer = lines.pop() + buffer.slice(buffer.length - keep);
      for (const line of lines) {
        if (line === "") {
          if (data !== null) yield {id, data, event: event || "message"};
          data = null;
          event = "";
        } else if (line.startsWith(":")) {  // a comment: ": keepalive", or ": reconnect"
          if (line.trim() === RECONNECT) yield {reconnect: true};
        } else {
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "data") data = data === null ? text : `${data}\n${text}`;
          else if (field === "event") event = text;
          else if (field === "id" && !text.includes("\0")) id = text;
        }
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

// ---- the wire: one JSON-RPC call, with the retry rules --------------------------------------

class Wire {
  #fetch;
  #token;
  #rpcId = 0;

  constructor({baseUrl, token, retry = {}, requestTimeoutMs = 30000, readyTimeoutMs = 20000,
               fetch: impl = globalThis.fetch}) {
    if (!baseUrl) throw new TypeError("AimClient: baseUrl is required");
    if (token === undefined || token === null) throw new TypeError("AimClient: token is required");
    this.url = `${String(baseUrl).replace(/\/+$/, "")}/a2a`;
    this.retry = {attempts: 5, baseDelayMs: 250, maxDelayMs: 5000, maxRetryAfterMs: 60000,
                  ...retry};
    this.requestTimeoutMs = requestTimeoutMs;
    this.readyTimeoutMs = readyTimeoutMs;
    this.#fetch = (url, init) => impl(url, init);  // never as a method: "Illegal invocation"
    this.#token = token;
  }

  /** A request body, serialized once: every retry sends these very bytes. */
  body(method, params) {
    return JSON.stringify({jsonrpc: "2.0", id: ++this.#rpcId, method, params});
  }

  /** The four headers of every request (and `extra`); the token is asked for each time. */
  async headers(extra = {}) {
    const token = typeof this.#token === "function" ? await this.#token() : this.#token;
    return {"Content-Type": "application/json", "Authorization": `Bearer ${token}`,
            "A2A-Version": "1.0", "A2A-Extensions": REALTIME, ...extra};
  }

  /** POST /a2a; a redirect is not followed but thrown (RedirectError). */
  async post(body, headers, signal) {
    const init = {method: "POST", body, headers, signal, cache: "no-store", redirect: "manual"};
    return notRedirected(await this.#fetch(this.url, init));
  }

  /** Whether a new token may cure `error`: it expired, and the token is a function. */
  refreshes(error) {
    return error instanceof TokenExpiredError && typeof this.#token === "function";
  }

  /** One call: sent again (same bytes) after no answer, a gateway's 502/503/504, -31012 (unless
   * its metadata says `retryable: "false"`), or -31011 with a Retry-After (waited out, unless
   * longer than `retry.maxRetryAfterMs`), up to `retry.attempts` times; after a 401
   * token_expired once, at once, with the token function asked again; else thrown, typed. */
  async call(method, params) {
    const body = this.body(method, params);
    const {attempts, baseDelayMs, maxDelayMs, maxRetryAfterMs} = this.retry;
    let refresh = true;
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.#once(body);
      } catch (error) {
        if (refresh && this.refreshes(error)) {
          refresh = false;  // the next attempt asks the token function for a new token
          attempt -= 1;
          continue;
        }
        if (!(error instanceof AimError) || !error.retryable || attempt >= attempts) throw error;
        const limited = error.code === -31011;
        if (limited && error.retryAfterMs > maxRetryAfterMs) throw error;  // the app decides
        await sleep(limited ? error.retryAfterMs : backoff(attempt, baseDelayMs, maxDelayMs));
      }
    }
  }

  async #once(body) {
    const headers = await this.headers();
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), this.requestTimeoutMs);
    let response;
    let answer = null;
    try {
      response = await this.post(body, headers, controller.signal);
      const text = await response.text();
      try {
        answer = JSON.parse(text);
      } catch {
        // not JSON (a proxy's page): judged by its status
      }
    } catch (cause) {
      if (cause instanceof RedirectError) throw cause;
      throw noAnswer(controller.signal.aborted ? "no answer in time" : "no answer", cause);
    } finally {
      clearTimeout(timer);
    }
    const retryAfterHeader = response.headers.get("retry-after");
    if (answer?.error) throw errorOf(answer.error, response.status, retryAfterHeader);
    if (answer !== null && typeof answer === "object" && "result" in answer) return answer.result;
    throw httpError(response.status);
  }
}

// ---- the client ----------------------------------------------------------------------------

/** A client of one service for one user (its token). */
export class AimClient {
  #wire;

  /** {baseUrl, token, retry?: {attempts, baseDelayMs, maxDelayMs, maxRetryAfterMs},
   * requestTimeoutMs?, readyTimeoutMs?, fetch?}: `token` is a string or a function giving one
   * (sync or async). */
  constructor(options = {}) {
    this.#wire = new Wire(options);
  }

  /** Any other JSON-RPC method (GetTask, aim.realtime.GetCommand, …), retried the same way. */
  call(method, params) {
    return this.#wire.call(method, params);
  }

  /**
   * Start a session: SendMessage with a `session.create` data part (messageId and
   * clientSessionId made once, kept on retries). Waits for `ready` the service's way (up to
   * 5 s) unless `returnImmediately`. A TASK_STATE_REJECTED task throws AimError "REJECTED".
   */
  async createSession(options = {}) {
    const {endpointKey, capabilities, requested, recording = "off",
           requiredCapabilities = ["audio_input", "audio_output"],
           retention = {transcript: "off", summary: "off"}, text = "Start a voice session",
           returnImmediately = false} = options;
    if (!endpointKey) throw new TypeError("createSession: endpointKey is required");
    const data = {
      operation: "session.create", clientSessionId: uuid(), requiredCapabilities, recording,
      retention, requested: requested ?? {
        mediaBinding: "livekit-webrtc-v1", audio: "bidirectional", userVideoSources: [],
        agentVideoSources: [], interactions: ["text", "confirmation"]},
    };
    const {task} = await this.#wire.call("SendMessage", {
      message: {messageId: uuid(), role: "ROLE_USER",
                parts: [{text}, {mediaType: "application/json", data}]},
      configuration: {historyLength: 0, returnImmediately},
    });
    if (task.status.state === "TASK_STATE_REJECTED") {  // the data part's members: metadata
      const parts = task.status.message?.parts ?? [];
      const said = parts.filter((p) => typeof p.text === "string").map((p) => p.text).join(" ");
      const why = Object.entries(parts.find((p) => p.data)?.data ?? {})
        .map(([key, value]) => [key, [value].flat().join(",")]);
      throw new AimError(said || "the session was rejected",
                         {reason: "REJECTED", metadata: Object.fromEntries(why)});
    }
    const meta = realtimeOf(task);
    const fields = {sessionId: meta.sessionId, taskId: task.id, state: meta.sessionState,
                    epoch: meta.sessionEpoch, taskState: task.status.state,
                    taskVersion: meta.taskVersion, endpointKey, capabilities};
    if (fields.state === "provisioning" && !returnImmediately) {
      const {session} = await this.#wire.call("aim.realtime.GetSession",
                                              {sessionId: fields.sessionId});
      Object.assign(fields, {state: session.state, epoch: session.sessionEpoch});
    }
    return new Session(this.#wire, fields);
  }

  /** A Session for one created earlier (an app restart, another device): GetSession and
   * GetTask; join() registers `endpointKey` (the same key: the same endpointId). */
  async resumeSession({sessionId, taskId, endpointKey, capabilities} = {}) {
    if (!sessionId || !endpointKey) {
      throw new TypeError("resumeSession: sessionId and endpointKey are required");
    }
    const {session} = await this.#wire.call("aim.realtime.GetSession", {sessionId});
    const id = taskId ?? session.taskId;
    const task = await this.#wire.call("GetTask", {id, historyLength: 0});
    const mine = session.endpoints.find((e) => e.clientEndpointKey === endpointKey);
    return new Session(this.#wire, {
      sessionId, taskId: id, state: session.state, epoch: session.sessionEpoch,
      taskState: task.status.state, taskVersion: realtimeOf(task).taskVersion,
      endpointId: mine?.endpointId, requirement: requirementOf(task.status),
      endpointKey, capabilities,
    });
  }
}

// ---- a session -----------------------------------------------------------------------------

/** One realtime session as this device sees it (made by AimClient). */
export class Session {
  #wire;
  #key;
  #capabilities;
  #listeners = new Map();
  #registeredEpoch = null;  // the epoch this object registered the device at
  #joinedEpoch = null;      // the epoch it joined at
  #epoch;                   // the epoch commands carry: the newest vetted one
  #unvetted = null;         // an epoch the stream showed that GetSession has not vetted yet
  #checking = null;         // the GetSession vetting it, while under way
  #reboundEpoch = null;
  #seen = new Map();        // requirementId → every requirement the stream showed
  #following = false;
  #runs = 0;                // which stream loop is the live one
  #abort = null;
  #lastEventId = null;
  #ended = false;

  constructor(wire, {endpointKey, capabilities, endpointId, requirement, ...fields}) {
    this.#wire = wire;
    this.#key = endpointKey;
    this.#capabilities = {...DEVICE, ...capabilities};
    const {sessionId, taskId, state, epoch, taskState, taskVersion} = fields;
    Object.assign(this, {sessionId, taskId, state, epoch, taskState, taskVersion});
    this.#epoch = epoch;
    this.endpointId = endpointId ?? null;
    this.requirement = requirement ?? null;
    this.superseded = false;
    this.agentState = null;  // as the stream last named it: "rotating" during a rotation
    this.agentGeneration = null;  // the serving agent's, as the stream named it
  }

  // ---- events ------------------------------------------------------------------------------

  /** Listen to event `name`; the first listener starts the stream. @returns an unsubscribe */
  on(name, fn) {
    if (!EVENTS.has(name)) throw new TypeError(`no event ${name}: one of ${[...EVENTS]}`);
    if (!this.#listeners.has(name)) this.#listeners.set(name, new Set());
    this.#listeners.get(name).add(fn);
    this.follow();
    return () => this.off(name, fn);
  }

  off(name, fn) {
    this.#listeners.get(name)?.delete(fn);
  }

  #emit(name, payload) {
    for (const fn of [...(this.#listeners.get(name) ?? [])]) {
      try {
        fn(payload);
      } catch (error) {
        queueMicrotask(() => { throw error; });  // reported; the stream goes on
      }
    }
  }

  /** What the service reported; a `state` event when any of the four changed. */
  #observe({state, epoch, taskState, taskVersion}) {
    const before = [this.state, this.epoch, this.taskState, this.taskVersion];
    if (state !== undefined) this.state = state;
    if (typeof epoch === "number") this.epoch = Math.max(this.epoch ?? epoch, epoch);
    if (taskState !== undefined) this.taskState = taskState;
    if (typeof taskVersion === "number") this.taskVersion = taskVersion;
    const now = [this.state, this.epoch, this.taskState, this.taskVersion];
    if (now.some((value, i) => value !== before[i])) {
      this.#emit("state", {state: now[0], epoch: now[1], taskState: now[2], taskVersion: now[3]});
    }
  }

  /** A session resource (GetSession, a command's result): the state only while no stream
   * runs (the stream has them in order); its epoch, for commands too, once its endpoints said
   * whether this device was superseded. */
  #observeSession(session) {
    if (!session) return;
    const state = this.#following ? undefined : session.state;
    this.#observe({epoch: session.sessionEpoch, state});
    if (this.#joinedEpoch !== null && this.endpointId !== null) {
      const mine = (session.endpoints ?? []).find((e) => e.endpointId === this.endpointId);
      if (mine?.state === "superseded") this.#supersede(session.sessionEpoch);
    }
    this.#vetted(session.sessionEpoch);
  }

  /** An epoch commands may carry (it only grows). */
  #vetted(epoch) {
    if (typeof epoch !== "number") return;
    this.#epoch = Math.max(this.#epoch ?? epoch, epoch);
    if (this.#unvetted !== null && this.#unvetted <= this.#epoch) this.#unvetted = null;
  }

  /** The pending check of an epoch the stream showed, if any (one GetSession at a time). A
   * failure is thrown and leaves it pending: the next event or command asks again. */
  async #vet() {
    if (this.#unvetted === null) return;
    this.#checking ??= this.#getSession().finally(() => { this.#checking = null; });
    await this.#checking;
  }

  async #getSession() {
    const {session} = await this.#wire.call("aim.realtime.GetSession", {sessionId: this.sessionId});
    this.#observeSession(session);
    return session;
  }

  // ---- the stream (SubscribeToTask) --------------------------------------------------------

  /** Follow the task live (`on` does it too); a second call does nothing. */
  follow() {
    if (this.#following || this.#ended) return;
    this.#following = true;
    const run = ++this.#runs;
    this.#run(() => this.#following && this.#runs === run)
      .catch((error) => this.#emit("error", {error}));
  }

  /** Stop the stream; no command is sent. */
  close() {
    this.#following = false;
    this.#abort?.abort();
  }

  /** Reconnects (Last-Event-ID) after backoff until ended; `error` after 10 failures in a row.
   * A stream the service cut on purpose (`: reconnect`) is resumed at once, and no failure. */
  async #run(live) {
    for (let failures = 0; live();) {
      let error = null;
      try {
        const outcome = await this.#streamOnce(live, () => { failures = 0; });
        if (outcome === true) return;
        if (outcome === RECONNECT) {
          failures = 0;
          continue;
        }
      } catch (caught) {
        error = caught;
      }
      if (!live()) return;
      failures += 1;
      // auth (but an expired token, with a token function: a new one), not found, a bug, …
      const fatal = error !== null && !error.retryable && !this.#wire.refreshes(error);
      if (fatal || failures >= STREAM.failures) {
        this.#following = false;
        const gaveUp = `the stream failed ${failures} times in a row`;
        this.#emit("error", {error: fatal ? error : new UnavailableError(gaveUp, {cause: error})});
        return;
      }
      await sleep(backoff(failures, STREAM.baseMs, STREAM.maxMs));
    }
  }

  /** One SubscribeToTask: true once over (ended), RECONNECT when the service cut it on
   * purpose, false when it closed early; or throws. */
  async #streamOnce(live, onFrame) {
    const wire = this.#wire;
    const controller = new AbortController();
    this.#abort = controller;
    let timer = null;
    const watch = () => {  // no byte for this long (heartbeats come every 15 s): a dead link
      clearTimeout(timer);
      timer = setTimeout(() => controller.abort(), STREAM.silenceMs);
    };
    const extra = {"Accept": "text/event-stream"};
    if (this.#lastEventId) extra["Last-Event-ID"] = this.#lastEventId;
    const headers = await wire.headers(extra);
    try {
      watch();
      const body = wire.body("SubscribeToTask", {id: this.taskId, historyLength: 0});
      const response = await wire.post(body, headers, controller.signal)
        .catch((cause) => {
          throw cause instanceof RedirectError ? cause
            : noAnswer("the stream could not be opened", cause);
        });
      if (!(response.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
        return await this.#refused(response);
      }
      let broken = null;  // an error frame: this connection is over
      let cut = false;  // the service said `: reconnect`
      try {
        for await (const frame of sse(response.body, watch)) {
          if (!live()) return true;
          if (frame.reconnect) {
            cut = true;
            continue;
          }
          const message = parsed(frame.data);
          if (message === null) continue;  // not JSON-RPC: nothing this library understands
          if (message.error || frame.event === "error") {
            broken = errorOf(message.error ?? {}, response.status);
            break;
          }
          if (message.result === null || typeof message.result !== "object") continue;
          if (frame.id) this.#lastEventId = frame.id;
          onFrame();
          if (await this.#onFrame(message.result)) return true;
        }
      } catch (cause) {
        throw cause instanceof AimError ? cause : noAnswer("the stream broke off", cause);
      }
      if (broken?.code === -32004) return await this.#terminal(broken);
      if (broken) throw noAnswer("the stream sent an error frame", broken);  // reconnect
      return cut ? RECONNECT : false;
    } finally {
      clearTimeout(timer);
      if (this.#abort === controller) this.#abort = null;
    }
  }

  /** A JSON answer to the subscribe: -32004 on a terminal task is `ended`; else thrown. */
  async #refused(response) {
    const answer = await response.json().catch(() => null);
    if (!answer?.error) throw httpError(response.status);
    const error = errorOf(answer.error, response.status, response.headers.get("retry-after"));
    if (error.code !== -32004) throw error;
    return this.#terminal(error);
  }

  /** -32004 (an answer or an error frame): `ended` if GetTask shows the task terminal. */
  async #terminal(error) {
    const task = await this.#wire.call("GetTask", {id: this.taskId, historyLength: 0});
    if (!TERMINAL.has(task.status.state)) throw error;
    this.#observe({state: realtimeOf(task).sessionState, taskState: task.status.state});
    await this.#end();
    return true;
  }

  /** `agent` when the frame names the agent's state and it, or the serving generation,
   * changed; `rotatedFrom` on the first frame of a new generation after `rotating`. */
  #onAgent(meta) {
    if (typeof meta.agentState !== "string") return;
    const generation = Number.isInteger(meta.agentGeneration) ? meta.agentGeneration : null;
    const before = this.agentGeneration;
    if (meta.agentState === this.agentState && generation === before) return;
    const rotated = this.agentState === "rotating" && generation !== null && before !== null
      && generation !== before;
    this.agentState = meta.agentState;
    this.agentGeneration = generation;
    this.#emit("agent", {
      state: meta.agentState,
      rotating: meta.agentState === "rotating",
      generation,
      successorGeneration: Number.isInteger(meta.successorGeneration)
        ? meta.successorGeneration : null,
      rotatedFrom: rotated ? before : null,
    });
  }

  /** One frame: state, agent, requirement, superseded or rebound, ended. True once terminal. */
  async #onFrame(result) {
    const item = result.task ?? result.statusUpdate;
    const meta = realtimeOf(item);
    const epoch = meta.sessionEpoch;
    this.#observe({state: meta.sessionState, epoch, taskState: item.status.state,
                   taskVersion: meta.taskVersion});
    // the agent's state, when the frame names it: "rotating" while a successor is brought in
    // before the serving agent's connection ends (nothing for the app to do)
    this.#onAgent(meta);
    const requirement = requirementOf(item.status);
    this.requirement = requirement;
    if (requirement && !this.#seen.has(requirement.requirementId)) {
      this.#seen.set(requirement.requirementId, requirement);
      this.#emit("requirement", requirement);
    }
    const moved = this.#joinedEpoch !== null && epoch > this.#joinedEpoch;
    if (moved && meta.sessionState === "provisioning" && this.#reboundEpoch !== epoch) {
      this.#reboundEpoch = epoch;
      this.#emit("rebound", {epoch});
    } else if (this.#joinedEpoch === null || this.superseded) {
      this.#vetted(epoch);  // nothing to be superseded from (or already told)
    } else if (moved && meta.sessionState !== "provisioning" && epoch > this.#epoch) {
      // another device may have taken over: commands carry this epoch only once GetSession
      // said this endpoint is not superseded (they wait for the check, see #command)
      this.#unvetted = Math.max(this.#unvetted ?? 0, epoch);
      this.#vet().catch(() => {});  // not awaited: the stream reads on; a failure stays pending
    }
    if (!TERMINAL.has(item.status.state)) return false;
    await this.#end();
    return true;
  }

  #supersede(epoch) {
    if (this.superseded) return;
    this.superseded = true;
    this.#emit("superseded", {epoch});
  }

  async #end() {
    this.#following = false;
    if (this.#ended) return;
    this.#ended = true;
    const read = this.#wire.call("aim.realtime.GetSession", {sessionId: this.sessionId});
    const endReason = await read.then(({session}) => session.endReason ?? null, () => null);
    this.#emit("ended", {state: this.state, taskState: this.taskState, endReason});
  }

  // ---- commands ----------------------------------------------------------------------------

  /** Once superseded, commands are refused here, unsent, until join() takes the session back. */
  #guard() {
    if (!this.superseded) return;
    throw new SupersededError("This session continues on another device; join() takes it back.", {
      code: -31002, reason: "STALE_EPOCH",
      metadata: {currentEpoch: String(this.epoch), reason: "superseded"}});
  }

  /** A mutating call: one commandId for this intent (kept on every retry), the vetted epoch
   * unless `epoch: false` (after the pending check, if any); `guard`: refused, unsent, once
   * superseded. */
  async #command(method, params, {epoch = true, guard = false} = {}) {
    if (epoch) await this.#vet();
    if (guard) this.#guard();
    const sent = {sessionId: this.sessionId, ...(epoch ? {sessionEpoch: this.#epoch} : {}),
                  commandId: uuid(), ...params};
    try {
      const result = await this.#wire.call(method, sent);
      this.#observeSession(result.session);
      return result;
    } catch (error) {
      if (error instanceof StaleEpochError && error.currentEpoch !== null) {
        this.#observe({epoch: error.currentEpoch});
        this.#vetted(error.currentEpoch);
      }
      if (error instanceof SupersededError) this.#supersede(error.currentEpoch ?? this.epoch);
      throw error;
    }
  }

  /**
   * Register this device (once per epoch) and JoinSession at the current epoch: the LiveKit
   * url and token for room.connect(url, token). Waits while the session is `provisioning`
   * (AimError reason TIMEOUT after `readyTimeoutMs`). Called again: a new JoinSession (a new
   * token); after `superseded` it takes the session back.
   */
  async join() {
    const limit = this.#wire.readyTimeoutMs;
    const deadline = Date.now() + limit;
    let {state} = this;
    if (state === "provisioning") ({state} = await this.#getSession());
    while (state === "provisioning") {
      if (Date.now() > deadline) {
        throw new AimError(`the session is still provisioning after ${limit / 1000} s`,
                           {reason: "TIMEOUT"});
      }
      await sleep(POLL_MS);
      ({state} = await this.#getSession());
    }
    await this.#vet();
    if (this.endpointId === null || this.#registeredEpoch !== this.#epoch || this.superseded) {
      this.#joinedEpoch = null;  // a superseded device registers again before it joins
      const registered = await this.#command("aim.realtime.RegisterEndpoint",
                                             {clientEndpointKey: this.#key,
                                              capabilities: this.#capabilities});
      this.endpointId = registered.endpoint.endpointId;
      this.#registeredEpoch = registered.session.sessionEpoch;
    }
    const joined = await this.#command("aim.realtime.JoinSession", {endpointId: this.endpointId});
    const epoch = joined.session.sessionEpoch;
    this.#joinedEpoch = epoch;
    this.superseded = false;
    const {url, token, room, expiresAt} = joined.media;
    return {url, token, room, expiresAt, epoch};
  }

  /** input.text to the agent: the accepted interaction {commandId, type, acceptedAt}. */
  sendText(text) {
    return this.sendInteraction("input.text", {text});
  }

  /** Any SendInteraction (protocol.md lists the types): the result's `interaction`. */
  async sendInteraction(type, payload = {}) {
    return (await this.#interact(type, payload)).interaction;
  }

  async #interact(type, payload) {
    const result = await this.#command("aim.realtime.SendInteraction", {type, payload},
                                       {guard: true});
    if (result.interaction) this.#emit("interaction", result.interaction);
    return result;
  }

  async #operation(operationId) {
    const params = {sessionId: this.sessionId, operationId};
    return (await this.#wire.call("aim.realtime.GetOperation", params)).operation;
  }

  /** The open requirement of an operation the session does not show now: GetTask's, else the
   * operation's (GetOperation) at the task's current version; the service judges it. */
  async #requirement(operationId) {
    const task = await this.#wire.call("GetTask", {id: this.taskId, historyLength: 0});
    const shown = requirementOf(task.status);
    if (shown?.operationId === operationId) return shown;
    const {requirementId = "", action = {}, actionDigest = ""} =
      (await this.#operation(operationId)).requirement ?? {};
    return {operationId, requirementId, action, actionDigest,
            expectedVersion: realtimeOf(task).taskVersion ?? 0};
  }

  /**
   * Answer a confirmation the agent asked for: "approve" (operation.confirm) or "deny"
   * (operation.cancel); `{via: "task"}` answers with A2A ContinueTask. Returns the operation.
   */
  async confirm(operationId, decision, {via = "interaction"} = {}) {
    if (decision !== "approve" && decision !== "deny") {
      throw new TypeError(`confirm: the decision is "approve" or "deny", not ${decision}`);
    }
    await this.#vet();
    this.#guard();
    if (via === "task") {
      const asked = this.requirement?.operationId === operationId ? this.requirement
        : await this.#requirement(operationId);  // its expectedVersion: the task's now
      await this.#wire.call("ContinueTask", {
        id: this.taskId, requirementId: asked.requirementId, actionDigest: asked.actionDigest,
        expectedVersion: asked.expectedVersion, historyLength: 0,
        message: {messageId: uuid(), role: "ROLE_USER", taskId: this.taskId,
                  parts: [{data: {decision}}]}});
      return this.#operation(operationId);
    }
    if (decision === "deny") {
      return (await this.#interact("operation.cancel", {operationId})).operation;
    }
    let asked = [...this.#seen.values()].reverse().find((r) => r.operationId === operationId);
    asked ??= (await this.#operation(operationId)).requirement ?? {};
    const {requirementId, actionDigest} = asked;
    return (await this.#interact("operation.confirm", {operationId, requirementId, actionDigest}))
      .operation;
  }

  /** EndSession (no epoch: any device of the user may end it): the session resource after it. */
  async end(reason = "ended by the app") {
    const {session} = await this.#command("aim.realtime.EndSession", {reason}, {epoch: false});
    return session;
  }
}
