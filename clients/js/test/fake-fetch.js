/**
 * A fetch that answers from a script, in order, and records every request: each step is a
 * Response, an Error (no answer) or a function of the request giving one of them.
 */
export class FakeFetch {
  /** @type {Array<{url: string, body: string, headers: Record<string, string>}>} */
  requests = [];

  /** @param {Array<unknown>} steps */
  constructor(steps) {
    this.steps = steps;
    this.fetch = async (url, init) => {
      this.requests.push({url, body: init.body, headers: init.headers});
      if (init.signal?.aborted) throw init.signal.reason;
      let step = this.steps.shift();
      if (typeof step === "function") step = await step(init);
      if (step === undefined) throw new Error("the script ran out");
      if (step instanceof Error) throw step;
      return step;
    };
  }

  /** The JSON-RPC methods asked for, in order. */
  get methods() {
    return this.requests.map((r) => JSON.parse(r.body).method);
  }
}

/**
 * A JSON-RPC answer.
 * @param {unknown} result
 * @param {number} [status]
 * @param {Record<string, string>} [headers]
 */
export function ok(result, status = 200, headers = {}) {
  return new Response(JSON.stringify({jsonrpc: "2.0", id: 1, result}),
                      {status, headers: {"content-type": "application/json", ...headers}});
}

/**
 * A JSON-RPC error answer.
 * @param {number} code
 * @param {Record<string, string>} [metadata]
 * @param {number} [status]
 * @param {Record<string, string>} [headers]
 */
export function failed(code, metadata = {}, status = 200, headers = {}) {
  const data = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", reason: "R", metadata}];
  return new Response(JSON.stringify({jsonrpc: "2.0", id: 1, error: {code, message: "no", data}}),
                      {status, headers: {"content-type": "application/json", ...headers}});
}

/** A fetch that never answers until its signal aborts (a hung connection). */
export function hanging(init) {
  return new Promise((_, reject) => {
    init.signal.addEventListener("abort", () => reject(init.signal.reason), {once: true});
  });
}
