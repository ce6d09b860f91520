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

  async join() {
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
  await settle();
  assert.deepEqual(room.calls.at(-1), ["connect", "wss://lk.example", "token-2"]);
  assert.deepEqual(errors, []);
  session.joinFailures = 3;
  room.drop();
  await settle();
  assert.equal(errors.length, 1);
  assert.equal(errors[0].message, "the service is away");
  assert.equal(session.joins, 2);
});

test("close() stops following: a drop after it is left alone", async () => {
  const {session, room, binding} = await bound();
  binding.close();
  room.drop();
  await settle();
  assert.equal(session.refreshes, 0);
  assert.equal(room.listeners.size, 0);
  await assert.rejects(binding.connect(), /closed/);
});
