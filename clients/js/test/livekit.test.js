import "./setup.js";
import assert from "node:assert/strict";
import {test} from "node:test";

import {RoomBinding} from "../src/livekit.js";
import {FakeRoom} from "./fake-room.js";

/**
 * A session as RoomBinding sees it (the members it uses of Session): each join() gives a new
 * token; `service` is what GetSession would say of this device now.
 */
class FakeSession {
  epoch = 1;
  state = "ready";
  superseded = false;
  ended = null;
  joins = 0;
  refreshes = 0;
  listeners = new Map();
  service = {superseded: false, state: "active"};
  joinFailures = 0;
  expiresInMs = 300000;

  on(name, fn) {
    if (!this.listeners.has(name)) this.listeners.set(name, new Set());
    this.listeners.get(name).add(fn);
    return () => this.listeners.get(name).delete(fn);
  }

  emit(name, event) {
    for (const fn of [...(this.listeners.get(name) ?? [])]) fn({name, ...event});
  }

  async refresh() {
    this.refreshes += 1;
    this.superseded ||= this.service.superseded;
    this.state = this.service.state;
    return {};
  }

  async join({signal} = {}) {
    if (this.hold) {  // a JoinSession that has not answered yet
      await new Promise((resolve, reject) => {
        this.release = resolve;
        signal?.addEventListener("abort", () => reject(signal.reason), {once: true});
      });
    }
    if (this.joinFailures > 0) {
      this.joinFailures -= 1;
      throw new Error("the service is away");
    }
    this.joins += 1;
    this.superseded = false;
    const expiresAt = new Date(Date.now() + this.expiresInMs).toISOString();
    return {url: "wss://lk.example", token: `token-${this.joins}`, room: "r", identity: "i",
            expiresAt, epoch: this.epoch, endpointId: "e", commandId: `c-${this.joins}`};
  }
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 5));
/** Until `done()` holds (polled each millisecond, 2 s at most: then the test fails). */
async function until(done) {
  for (let waited = 0; !done(); waited++) {
    assert.ok(waited < 2000, "still not done after 2 s");
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
}
const FAST = {rejoinDelayMs: 1};

async function bound(options = {}) {
  const session = new FakeSession();
  const room = new FakeRoom();
  const errors = [];
  const binding = new RoomBinding(session, room, {...FAST, onError: (e) => errors.push(e),
                                                  ...options});
  const joined = await binding.connect();
  return {session, room, binding, joined, errors};
}

test("connect joins the session and connects the room with the join token", async () => {
  const {session, room, binding, joined} = await bound();
  assert.equal(joined.token, "token-1");
  assert.deepEqual(room.calls, [["connect", "wss://lk.example", "token-1"]]);
  assert.equal(binding.joined, joined);
  assert.equal(binding.connected, true);
  assert.equal(session.joins, 1);
});

test("an earlier join's result is used while its token is fresh, else a new join", async () => {
  const session = new FakeSession();
  const room = new FakeRoom();
  const early = await session.join();
  await new RoomBinding(session, room).connect({joined: early});
  assert.deepEqual(room.calls, [["connect", "wss://lk.example", "token-1"]]);
  session.expiresInMs = 30000;  // inside refreshBeforeMs (60 s): not handed to LiveKit
  const again = new FakeSession();
  again.expiresInMs = 30000;
  const late = await again.join();
  const other = new FakeRoom();
  await new RoomBinding(again, other).connect({joined: late});
  assert.deepEqual(other.calls, [["connect", "wss://lk.example", "token-2"]]);
});

test("superseded: the room is disconnected and not joined again", async () => {
  const {session, room, binding} = await bound();
  session.superseded = true;
  session.emit("superseded", {epoch: 2});
  await settle();
  assert.deepEqual(room.calls.map((c) => c[0]), ["connect", "disconnect"]);
  assert.equal(binding.connected, false);
  assert.equal(session.joins, 1);
});

test("ended: the room is disconnected and the binding stops listening", async () => {
  const {session, room, binding} = await bound();
  assert.equal(binding.listening, true);
  session.ended = {name: "ended"};
  session.emit("ended", {});
  await settle();
  assert.deepEqual(room.calls.map((c) => c[0]), ["connect", "disconnect"]);
  assert.equal(room.listeners.size, 0);
  assert.equal([...session.listeners.values()].reduce((n, s) => n + s.size, 0), 0);
  assert.equal(binding.listening, false);
});

test("rebound: the old room is left and the new one joined with a new token", async () => {
  const {session, room} = await bound();
  session.epoch = 2;
  session.emit("rebound", {epoch: 2});
  await settle();
  assert.deepEqual(room.calls, [["connect", "wss://lk.example", "token-1"], ["disconnect"],
                                ["connect", "wss://lk.example", "token-2"]]);
});

test("a drop while the session is live: GetSession, then a fresh token, then connect",
     async () => {
  const {session, room, binding} = await bound();
  room.drop();
  await settle();
  assert.equal(session.refreshes, 1);
  assert.deepEqual(room.calls.at(-1), ["connect", "wss://lk.example", "token-2"]);
  assert.equal(binding.connected, true);
  assert.equal(binding.joined.token, "token-2");
});

test("a drop after another device took over is not answered by taking the session back",
     async () => {
  const {session, room, binding} = await bound();
  session.service.superseded = true;  // the stream has not said so yet; GetSession does
  room.drop(4);  // PARTICIPANT_REMOVED
  await settle();
  assert.equal(session.refreshes, 1);
  assert.equal(session.joins, 1);
  assert.deepEqual(room.calls.map((c) => c[0]), ["connect"]);
  assert.equal(binding.connected, false);
});

test("a drop while the session is ending is not joined again", async () => {
  const {session, room} = await bound();
  session.service.state = "ending";
  room.drop();
  await settle();
  assert.equal(session.joins, 1);
  assert.deepEqual(room.calls.map((c) => c[0]), ["connect"]);
});

test("the app's own disconnect is not a drop", async () => {
  const {session, room} = await bound();
  await room.disconnect();
  await settle();
  assert.equal(session.refreshes, 0);
  assert.deepEqual(room.calls.map((c) => c[0]), ["connect", "disconnect"]);
});

test("joins after a drop are retried, then given up on and told to onError", async () => {
  const {session, room, errors} = await bound({rejoinAttempts: 3});
  session.joinFailures = 2;
  room.drop();
  await until(() => room.token !== null);
  assert.deepEqual(room.calls.at(-1), ["connect", "wss://lk.example", "token-2"]);
  assert.deepEqual(errors, []);
  session.joinFailures = 3;
  room.drop();
  await until(() => errors.length > 0);
  assert.equal(errors.length, 1);
  assert.equal(errors[0].message, "the service is away");
  assert.equal(session.joins, 2);
});

test("close() stops following: a drop after it is left alone; connect() starts again",
     async () => {
  const {session, room, binding} = await bound();
  await binding.close();
  room.drop();
  await settle();
  assert.equal(session.refreshes, 0);
  assert.equal(room.listeners.size, 0);
  assert.equal(binding.listening, false);
  await binding.connect();
  assert.equal(binding.listening, true);
  assert.deepEqual(room.calls.at(-1), ["connect", "wss://lk.example", "token-2"]);
});

test("close() stops a re-join under way: the room stays out", async () => {
  const {session, room, binding} = await bound();
  session.hold = true;
  room.drop();
  await settle();
  assert.equal(session.refreshes, 1);  // GetSession done; the JoinSession has not answered
  await binding.close();
  session.release?.();
  await settle();
  assert.deepEqual(room.calls.map((c) => c[0]), ["connect"]);
  assert.equal(room.token, null);
});

test("connect() right after a takeover is not undone by the leaving", async () => {
  const {session, room, binding} = await bound();
  session.superseded = true;
  session.emit("superseded", {epoch: 2});
  const joined = await binding.connect();  // the app takes the session back at once
  await settle();
  assert.equal(joined.token, "token-2");
  assert.deepEqual(room.calls, [["connect", "wss://lk.example", "token-1"], ["disconnect"],
                                ["connect", "wss://lk.example", "token-2"]]);
  assert.equal(room.token, "token-2");
  assert.equal(binding.connected, true);
});

test("a takeover while the room is connecting leaves it once it is in", async () => {
  const session = new FakeSession();
  const room = new FakeRoom();
  const binding = new RoomBinding(session, room, FAST);
  session.hold = true;
  const connecting = binding.connect();
  await settle();
  session.superseded = true;
  session.emit("superseded", {epoch: 2});
  session.release();
  await connecting;
  await settle();
  assert.deepEqual(room.calls.map((c) => c[0]), ["connect", "disconnect"]);
  assert.equal(room.token, null);
  assert.equal(binding.connected, false);
});

test("connect() on a connected binding leaves the room first (LiveKit ignores a second connect)",
     async () => {
  const {room, binding} = await bound();
  await binding.connect();
  assert.deepEqual(room.calls, [["connect", "wss://lk.example", "token-1"], ["disconnect"],
                                ["connect", "wss://lk.example", "token-2"]]);
});

test("a connect that fails leaves the binding out: a rebound after it joins nothing", async () => {
  const session = new FakeSession();
  const room = new FakeRoom();
  const binding = new RoomBinding(session, room, FAST);
  room.refusals.push(new Error("refused"));
  await assert.rejects(binding.connect(), /refused/);
  assert.equal(binding.connected, false);
  session.emit("rebound", {epoch: 2});
  await settle();
  assert.equal(session.joins, 1);
  assert.deepEqual(room.calls.map((c) => c[0]), ["connect"]);
});

test("a drop and a rebound together end in one join and one connect", async () => {
  const {session, room} = await bound();
  session.epoch = 2;
  room.drop(5);  // ROOM_DELETED
  session.emit("rebound", {epoch: 2});
  await settle();
  assert.deepEqual(room.calls.filter((c) => c[0] === "connect").map((c) => c[2]),
                   ["token-1", "token-2"]);
  assert.equal(session.joins, 2);
  assert.equal(room.token, "token-2");
});

test("after the app's own disconnect the binding stays out, a rebound included", async () => {
  const {session, room} = await bound();
  await room.disconnect();
  session.emit("rebound", {epoch: 2});
  await settle();
  assert.equal(session.joins, 1);
  assert.deepEqual(room.calls.map((c) => c[0]), ["connect", "disconnect"]);
});

test("rejoinAttempts is at least one", () => {
  assert.throws(() => new RoomBinding(new FakeSession(), new FakeRoom(), {rejoinAttempts: 0}),
                RangeError);
});
