/**
 * A text/event-stream reader: the frames of a fetch body, as the SSE specification parses
 * them, and the service's `: reconnect` comment.
 * @module
 */

/** The service's last line of a stream it cut on purpose (lifetime, a reader that fell behind). */
export const RECONNECT = ": reconnect";

/**
 * @typedef {{id: string, data: string, event: string}} Frame one SSE event
 * @typedef {{reconnect: true}} Cut the service said `: reconnect`
 */

/**
 * The frames {id, data, event} of a text/event-stream body, and {reconnect: true} for the
 * service's `: reconnect`; `onChunk` is told of every chunk (a sign of life).
 * @param {ReadableStream<Uint8Array>} body
 * @param {() => void} onChunk
 * @returns {AsyncGenerator<Frame | Cut>}
 */
export async function* sse(body, onChunk) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  /** @type {string | null} */
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
