import "./setup.js";
import assert from "node:assert/strict";
import {test} from "node:test";

import {AimClient, LimitExceededError, RedirectError, UnavailableError} from "../src/aim-realtime.js";
import {FakeFetch, failed, hanging, ok} from "./fake-fetch.js";

const FAST = {attempts: 3, baseDelayMs: 1, maxDelayMs: 2};

function client(steps, options = {}) {
  const fake = new FakeFetch(steps);
  const aim = new AimClient({baseUrl: "https://aim.example/", token: "t", retry: FAST,
                             fetch: fake.fetch, ...options});
  return {aim, fake};
}

test("a call lost on the way is sent again, byte for byte, to /a2a with the four headers",
     async () => {
  const {aim, fake} = client([new TypeError("network"), ok({fine: true})]);
  assert.deepEqual(await aim.call("GetTask", {id: "t1"}), {fine: true});
  assert.equal(fake.requests.length, 2);
  assert.equal(fake.requests[0].body, fake.requests[1].body);
  assert.equal(fake.requests[0].url, "https://aim.example/a2a");
  assert.deepEqual(fake.requests[0].headers, {
    "Content-Type": "application/json", "Authorization": "Bearer t", "A2A-Version": "1.0",
    "A2A-Extensions": "urn:aim:a2a:realtime:v1"});
});

test("after the last attempt the call fails as unavailable, naming its method", async () => {
  const {aim, fake} = client([new TypeError("a"), new TypeError("b"), new TypeError("c")]);
  await assert.rejects(aim.call("GetTask", {}), (error) => {
    assert.ok(error instanceof UnavailableError);
    assert.equal(error.method, "GetTask");
    return true;
  });
  assert.equal(fake.requests.length, 3);
});

test("a rate limit is waited out as Retry-After says, unless longer than allowed", async () => {
  const {aim, fake} = client([failed(-31011, {}, 429, {"retry-after": "0"}), ok(1)]);
  assert.equal(await aim.call("GetTask", {}), 1);
  assert.equal(fake.requests.length, 2);
  const long = client([failed(-31011, {}, 429, {"retry-after": "120"})]);
  await assert.rejects(long.aim.call("GetTask", {}), LimitExceededError);
  assert.equal(long.fake.requests.length, 1);
});

test("an expired token is asked for again once, at once", async () => {
  let asked = 0;
  const {aim, fake} = client(
    [failed(-31401, {reason: "token_expired"}, 401), ok("done")],
    {token: () => `t${++asked}`});
  assert.equal(await aim.call("GetTask", {}), "done");
  assert.deepEqual(fake.requests.map((r) => r.headers.Authorization), ["Bearer t1", "Bearer t2"]);
});

test("a redirect is neither followed nor retried", async () => {
  const {aim, fake} = client([new Response("", {status: 307, headers: {location: "https://x"}})]);
  await assert.rejects(aim.call("GetTask", {}), RedirectError);
  assert.equal(fake.requests.length, 1);
});

test("a request with no answer in requestTimeoutMs is cut off and sent again", async () => {
  const {aim, fake} = client([hanging, ok("late but fine")], {requestTimeoutMs: 20});
  assert.equal(await aim.call("GetTask", {}), "late but fine");
  assert.equal(fake.requests.length, 2);
});

test("an AbortSignal stops a call in flight with its reason, and nothing is sent after",
     async () => {
  const {aim, fake} = client([hanging, ok("never")]);
  const controller = new AbortController();
  const call = aim.call("GetTask", {}, {signal: controller.signal});
  setTimeout(() => controller.abort(new Error("the user left")), 10);
  await assert.rejects(call, {message: "the user left"});
  await new Promise((resolve) => setTimeout(resolve, 30));
  assert.equal(fake.requests.length, 1);
});

test("an AbortSignal stops the wait between retries, and a signal aborted before sends nothing",
     async () => {
  const {aim, fake} = client([new TypeError("lost"), ok("never")],
                             {retry: {attempts: 5, baseDelayMs: 60000, maxDelayMs: 60000}});
  const call = aim.call("GetTask", {}, {signal: AbortSignal.timeout(20)});
  await assert.rejects(call, {name: "TimeoutError"});
  assert.equal(fake.requests.length, 1);
  const none = client([ok("never")]);
  await assert.rejects(none.aim.call("GetTask", {}, {signal: AbortSignal.abort()}),
                       {name: "AbortError"});
  assert.equal(none.fake.requests.length, 0);
});

test("baseUrl and token are required", () => {
  assert.throws(() => new AimClient({token: "t"}), /baseUrl is required/);
  assert.throws(() => new AimClient({baseUrl: "https://x"}), /token is required/);
});
