import "./setup.js";
import assert from "node:assert/strict";
import {test} from "node:test";

import {AimClient, Events} from "../src/aim-realtime.js";
import {FakeFetch, hanging, ok} from "./fake-fetch.js";

const REALTIME = "urn:aim:a2a:realtime:v1";

function task(state, sessionState, version, epoch = 1) {
  return {id: "task-1", status: {state},
          metadata: {[REALTIME]: {sessionId: "s-1", sessionState, sessionEpoch: epoch,
                                  taskVersion: version}}};
}

const SESSION = {sessionId: "s-1", taskId: "task-1", state: "ready", sessionEpoch: 1, version: 2,
                 endpoints: [], endReason: "user_ended"};

/** An SSE answer of these StreamResponses (each with its id). */
function stream(...results) {
  const text = results.map((result, i) =>
    `id: ${i + 1}\ndata: ${JSON.stringify({jsonrpc: "2.0", id: 1, result})}\n\n`).join("");
  return new Response(text, {headers: {"content-type": "text/event-stream"}});
}

async function created(...more) {
  const fake = new FakeFetch([ok({task: task("TASK_STATE_WORKING", "ready", 1)}),
                              ok({session: SESSION}), ...more]);
  const client = new AimClient({baseUrl: "https://aim.example", token: "t", fetch: fake.fetch});
  const session = await client.createSession({endpointKey: "phone"});
  return {session, fake};
}

const frames = () => stream(
  {task: task("TASK_STATE_WORKING", "joining", 2)},
  {statusUpdate: {taskId: "task-1", status: {state: "TASK_STATE_WORKING"},
                  metadata: {[REALTIME]: {sessionState: "active", sessionEpoch: 1,
                                          taskVersion: 3, agentState: "listening"}}}},
  {statusUpdate: {taskId: "task-1", status: {state: "TASK_STATE_COMPLETED"},
                  metadata: {[REALTIME]: {sessionState: "ended", sessionEpoch: 1,
                                          taskVersion: 4}}}});

test("events() yields every event in order, ends after `ended`, and iterating started the stream",
     async () => {
  const {session, fake} = await created(frames(), ok({session: SESSION}));
  assert.deepEqual(session.info, SESSION);
  const seen = [];
  for await (const event of session.events()) seen.push(event);
  assert.deepEqual(seen.map((e) => e.name === "state" ? `state ${e.state}` : e.name),
                   ["state joining", "state active", "agent", "state ended", "ended"]);
  assert.deepEqual(seen.at(-1), {name: Events.ENDED, state: "ended",
                                 taskState: "TASK_STATE_COMPLETED", endReason: "user_ended"});
  assert.deepEqual(fake.methods, ["SendMessage", "aim.realtime.GetSession", "SubscribeToTask",
                                  "aim.realtime.GetSession"]);
  assert.equal(session.ended, seen.at(-1));
  // once over, a new iteration yields the end only
  const after = [];
  for await (const event of session.events()) after.push(event.name);
  assert.deepEqual(after, ["ended"]);
});

test("events({updates: true}) also yields each raw frame with its SSE id, first", async () => {
  const {session} = await created(frames(), ok({session: SESSION}));
  const names = [];
  for await (const event of session.events({updates: true})) {
    names.push(event.name === "update" ? `update ${event.eventId}` : event.name);
  }
  assert.deepEqual(names, ["update 1", "state", "update 2", "state", "agent", "update 3",
                           "state", "ended"]);
});

test("on hears every event of its name, once only the next one, off none; each returns a stop",
     async () => {
  const {session} = await created(frames(), ok({session: SESSION}));
  const every = [];
  const first = [];
  const none = [];
  const ended = new Promise((resolve) => session.on(Events.ENDED, resolve));
  session.on(Events.STATE, (e) => every.push(e.state));
  session.once(Events.STATE, (e) => first.push(e.state));
  const quiet = (e) => none.push(e.state);
  session.on(Events.STATE, quiet);
  session.off(Events.STATE, quiet);
  const stop = session.on(Events.AGENT, (e) => none.push(e.state));
  stop();
  await ended;
  assert.deepEqual(every, ["joining", "active", "ended"]);
  assert.deepEqual(first, ["joining"]);
  assert.deepEqual(none, []);
});

test("a listener that throws does not stop the others or the stream", async () => {
  const {session} = await created(frames(), ok({session: SESSION}));
  const thrown = [];
  globalThis.reportError = (error) => thrown.push(error.message);  // as browsers have it
  try {
    const heard = [];
    session.on(Events.STATE, () => { throw new Error("app bug"); });
    session.on(Events.STATE, (e) => heard.push(e.state));
    await new Promise((resolve) => session.on(Events.ENDED, resolve));
    assert.deepEqual(heard, ["joining", "active", "ended"]);
    assert.deepEqual(thrown, ["app bug", "app bug", "app bug"]);
  } finally {
    delete globalThis.reportError;
  }
});

test("an unknown event name is refused, naming the known ones", async () => {
  const {session} = await created();
  assert.throws(() => session.on("statechange", () => {}), /no event statechange: one of state/);
  assert.throws(() => session.once(Events.STATE, "not a function"), /not a function/);
  assert.throws(() => session.off("State", () => {}), /no event State/);
});

test("an iterator ends when its signal aborts, and at close()", async () => {
  const {session} = await created(hanging);  // a stream that never sends anything
  const controller = new AbortController();
  const iterating = (async () => {
    const names = [];
    for await (const event of session.events({signal: controller.signal})) names.push(event.name);
    return names;
  })();
  setTimeout(() => controller.abort(), 10);
  assert.deepEqual(await iterating, []);
  const second = (async () => {
    for await (const _ of session.events()) return "an event";
    return "ended by close";
  })();
  setTimeout(() => session.close(), 10);
  assert.equal(await second, "ended by close");
});

test("events() subscribes when it is called: nothing is lost before the first read", async () => {
  const {session} = await created(frames(), ok({session: SESSION}));
  const iterator = session.events();
  await new Promise((resolve) => session.once(Events.ENDED, resolve));  // all of it went by
  const names = [];
  for await (const event of iterator) names.push(event.name);
  assert.deepEqual(names, ["state", "state", "agent", "state", "ended"]);
});

test("a listener added while the end is read hears it once, and opens no second stream",
     async () => {
  const {session, fake} = await created(frames(), ok({session: SESSION}));
  const ends = [];
  session.on(Events.STATE, ({state}) => {
    if (state === "ended") session.on(Events.ENDED, (e) => ends.push(`late ${e.name}`));
  });
  await new Promise((resolve) => session.on(Events.ENDED, () => resolve(ends.push("ended"))));
  await new Promise((resolve) => setTimeout(resolve, 20));
  assert.deepEqual(ends, ["ended", "late ended"]);  // each once
  assert.equal(fake.methods.filter((m) => m === "SubscribeToTask").length, 1);
});

test("an iterator nobody reads ends after 1000 events with an error saying so", async () => {
  const many = Array.from({length: 1100}, (_, i) =>
    ({task: task("TASK_STATE_WORKING", i % 2 ? "active" : "joining", i + 2)}));
  const {session} = await created(stream(...many), hanging);
  const unread = session.events();
  await new Promise((resolve) => {
    let seen = 0;
    session.on(Events.STATE, () => { if (++seen === 1100) resolve(); });
  });
  const names = [];
  for await (const event of unread) names.push(event);
  assert.equal(names.length, 1);
  assert.equal(names[0].name, "error");
  assert.equal(names[0].error.reason, "EVENTS_UNREAD");
  session.close();
});

test("an aborted iterator drops what it held unread", async () => {
  const {session} = await created(frames(), ok({session: SESSION}));
  const controller = new AbortController();
  const iterator = session.events({signal: controller.signal});
  await new Promise((resolve) => session.once(Events.ENDED, resolve));
  controller.abort();
  assert.deepEqual(await iterator.next(), {value: undefined, done: true});
});
