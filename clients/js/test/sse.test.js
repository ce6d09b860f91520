import "./setup.js";
import assert from "node:assert/strict";
import {test} from "node:test";

import {sse} from "../src/sse.js";

/** A body that hands out `chunks` as they are: the parser must join what they split. */
function body(...chunks) {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(encoder.encode(chunk));
      controller.close();
    },
  });
}

async function frames(...chunks) {
  const seen = [];
  let ticks = 0;
  for await (const frame of sse(body(...chunks), () => { ticks += 1; })) seen.push(frame);
  return {seen, ticks};
}

test("frames split anywhere, CRLF halves included, come out whole", async () => {
  const {seen, ticks} = await frames("id: 1\r", "\ndata: {\"a\"", ":1}\r\n\r\nevent: x\ndata: b\n",
                                     "data: c\n\n");
  assert.deepEqual(seen, [{id: "1", data: "{\"a\":1}", event: "message"},
                          {id: "1", data: "b\nc", event: "x"}]);  // the id carries over
  assert.equal(ticks, 4);
});

test("comments are skipped but `: reconnect`, and a frame cut off at the end is dropped",
     async () => {
  const {seen} = await frames(": keepalive\n\ndata: 1\n\n: reconnect\n", "data: cut");
  assert.deepEqual(seen, [{id: "", data: "1", event: "message"}, {reconnect: true}]);
});

test("an id with a NUL is ignored, a field without a colon is empty", async () => {
  const {seen} = await frames("id: a\0b\ndata\n\n");
  assert.deepEqual(seen, [{id: "", data: "", event: "message"}]);
});
