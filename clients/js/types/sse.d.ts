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
export function sse(body: ReadableStream<Uint8Array>, onChunk: () => void): AsyncGenerator<Frame | Cut>;
/**
 * A text/event-stream reader: the frames of a fetch body, as the SSE specification parses
 * them, and the service's `: reconnect` comment.
 * @module
 */
/** The service's last line of a stream it cut on purpose (lifetime, a reader that fell behind). */
export const RECONNECT: ": reconnect";
/**
 * one SSE event
 */
export type Frame = {
    id: string;
    data: string;
    event: string;
};
/**
 * the service said `: reconnect`
 */
export type Cut = {
    reconnect: true;
};
