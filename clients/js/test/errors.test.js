import "./setup.js";
import assert from "node:assert/strict";
import {test} from "node:test";

import * as library from "../src/aim-realtime.js";
import {errorOf, retryAfter} from "../src/errors.js";

const info = (reason, metadata = {}) =>
  ({"@type": "type.googleapis.com/google.rpc.ErrorInfo", reason, metadata});

test("each JSON-RPC code is thrown as its class, with what the service said", () => {
  const cases = [
    [-31003, "InvalidStateError"], [-32001, "NotFoundError"], [-31001, "NotFoundError"],
    [-31005, "NotFoundError"], [-31006, "NotFoundError"], [-31010, "NotFoundError"],
    [-31004, "CommandConflictError"], [-31011, "LimitExceededError"],
    [-31012, "UnavailableError"], [-31013, "AllowanceExhaustedError"],
    [-31403, "AuthError"], [-32602, "InvalidParamsError"], [-32603, "AimError"],
  ];
  for (const [code, name] of cases) {
    const error = errorOf({code, message: "said", data: [info("WHY", {a: "1"})]}, 200, null,
                          "aim.realtime.JoinSession");
    assert.equal(error.name, name, String(code));
    assert.ok(error instanceof library[name]);
    assert.ok(error instanceof library.AimError);
    assert.equal(error.message, "said");
    assert.deepEqual([error.code, error.reason, error.metadata, error.method],
                     [code, "WHY", {a: "1"}, "aim.realtime.JoinSession"]);
  }
});

test("a stale epoch says the current one, and superseded is its own class", () => {
  const stale = errorOf({code: -31002, data: [info("STALE_EPOCH",
                                                   {currentEpoch: "3", reason: "rebound"})]}, 200);
  assert.equal(stale.name, "StaleEpochError");
  assert.deepEqual([stale.currentEpoch, stale.staleReason], [3, "rebound"]);
  const gone = errorOf({code: -31002, data: [info("STALE_EPOCH",
                                                  {currentEpoch: "4", reason: "superseded"})]}, 200);
  assert.ok(gone instanceof library.SupersededError);
  assert.ok(gone instanceof library.StaleEpochError);
  assert.equal(gone.currentEpoch, 4);
});

test("a 401 says why: an expired token, or one no new token from the same source cures", () => {
  const expired = errorOf({code: -31401, data: [info("UNAUTHENTICATED",
                                                     {reason: "token_expired"})]}, 401);
  assert.ok(expired instanceof library.TokenExpiredError);
  assert.equal(expired.authReason, "token_expired");
  const wrong = errorOf({code: -31401, data: [info("UNAUTHENTICATED",
                                                   {reason: "invalid_audience"})]}, 401);
  assert.ok(wrong instanceof library.AuthMisconfiguredError);
  const forbidden = errorOf({code: -31002, data: []}, 403);  // the status wins over the code
  assert.equal(forbidden.name, "AuthError");
});

test("only a -31012 and a -31011 with a Retry-After may be sent again", () => {
  assert.equal(errorOf({code: -31012}, 503).retryable, true);
  assert.equal(errorOf({code: -31012, data: [info("X", {retryable: "false"})]}, 503).retryable,
               false);
  assert.equal(errorOf({code: -31011}, 429).retryable, false);
  const limited = errorOf({code: -31011}, 429, "2");
  assert.deepEqual([limited.retryable, limited.retryAfterMs], [true, 2000]);
  assert.equal(errorOf({code: -31003}, 200).retryable, false);
});

test("Retry-After is seconds or an HTTP-date, else metadata.retryAfterSeconds", () => {
  assert.equal(retryAfter("7", {}), 7000);
  assert.equal(retryAfter(null, {retryAfterSeconds: "3"}), 3000);
  assert.equal(retryAfter(null, {}), null);
  assert.equal(retryAfter("soon", {}), null);
  const later = retryAfter(new Date(Date.now() + 10000).toUTCString(), {});
  assert.ok(later > 8000 && later <= 10000, String(later));
  assert.equal(retryAfter(new Date(Date.now() - 10000).toUTCString(), {}), 0);
});

test("invalid params list the bad fields; an exhausted allowance says when it resets", () => {
  const bad = errorOf({code: -32602, data: [{"@type": "type.googleapis.com/google.rpc.BadRequest",
    fieldViolations: [{field: "params.text", description: "too long", extra: 1}]}]}, 200);
  assert.deepEqual(bad.violations, [{field: "params.text", description: "too long"}]);
  const spent = errorOf({code: -31013, data: [info("ALLOWANCE_EXHAUSTED",
    {allowance: "day", resetsAt: "2026-12-05T00:00:00Z"})]}, 402);
  assert.deepEqual([spent.allowance, spent.resetsAt], ["day", "2026-12-05T00:00:00Z"]);
  assert.equal(spent.retryable, false);
});

test("the package exports the classes an app builds or catches, and no Session", () => {
  const exported = Object.keys(library).sort();
  assert.deepEqual(exported, [
    "AimClient", "AimError", "AllowanceExhaustedError", "AuthError", "AuthMisconfiguredError",
    "CommandConflictError", "Events", "InvalidParamsError", "InvalidStateError",
    "LimitExceededError", "NotFoundError", "RedirectError", "StaleEpochError",
    "SupersededError", "TokenExpiredError", "UnavailableError",
  ]);
  assert.deepEqual(Object.values(library.Events).sort(), [
    "agent", "ended", "error", "interaction", "rebound", "requirement", "state", "superseded",
    "update"]);
  assert.ok(Object.isFrozen(library.Events));
});
