// A foreign peer for the interop test: npm `json-rpc-2.0` (1.8.x) over `ws` (8.x),
// wired as TESTING.md says. `cargo test --test interop` starts our Rust server and runs
//
//     node peer.mjs ws://127.0.0.1:PORT
//
// This peer calls the Rust server's methods (positional and named params, batches, a
// notification), serves methods of its own that the Rust side calls back while this
// side's call is still waiting, and checks every frame the Rust side sends is strict
// JSON-RPC 2.0. It prints every frame it exchanges (`-->` sent, `<--` received) and
// exits 0 only when every check passed.
//
// json-rpc-2.0 1.8.1 bends the specification in a few places; the checks here are strict
// about what Rust sends and liberal about what this package does. Its deviations (seen
// by feeding `receiveAndSend` directly; only the first is on the wire in this run, see
// the DEVIATION comment below):
//   - a batch whose answer has one element is answered with a plain object, not an
//     array of one (the Rust side must route it to its one-call batch);
//   - `[]` gets no answer (the spec: one -32600 error), since `[].every(isResponse)`
//     takes it for an empty batch of responses;
//   - `[1,2]`, `"x"` get no answer and `receiveAndSend` rejects (spec: -32600 errors);
//     `null` makes it throw a TypeError;
//   - `"method": 1` is answered -32601 Method not found (spec: -32600 Invalid Request);
//     `"params": "bar"` and `"id": {"a":1}` are accepted and answered as valid calls;
//   - an error thrown with `data: null` loses its `data` member, and a plain `Error`
//     thrown by a method is answered with code 0.
// The Rust side never sends any of that malformed input, so only the first matters.

import jsonrpc from "json-rpc-2.0";
import WebSocket from "ws";

const { JSONRPCServer, JSONRPCClient, JSONRPCServerAndClient, JSONRPCErrorException } = jsonrpc;

const url = process.argv[2];
if (!url) {
  console.error("usage: node peer.mjs ws://HOST:PORT");
  process.exit(2);
}

const STEP_MS = 5000; // the longest any one exchange may take
const failures = [];
let passed = 0;

function log(line) {
  process.stdout.write(line + "\n");
}

function check(ok, what, detail) {
  if (ok) {
    passed += 1;
    log(`ok   ${what}`);
  } else {
    failures.push(what);
    log(`FAIL ${what}${detail === undefined ? "" : ": " + detail}`);
  }
}

function withTimeout(promise, label, ms = STEP_MS) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${label}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// Structural JSON equality (object member order does not matter).
function same(a, b) {
  if (a === b) return true;
  if (typeof a !== typeof b || a === null || b === null || typeof a !== "object") return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) return a.length === b.length && a.every((x, i) => same(x, b[i]));
  const ka = Object.keys(a).sort();
  const kb = Object.keys(b).sort();
  return same(ka, kb) && ka.every((k) => same(a[k], b[k]));
}

const show = (v) => JSON.stringify(v);

// ---- Strictness of what the Rust side sends ------------------------------------------

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

// Returns a list of problems with one message object sent by the Rust side.
function strictProblems(m) {
  const problems = [];
  if (!isObject(m)) return [`not an object: ${show(m)}`];
  if (m.jsonrpc !== "2.0") problems.push(`jsonrpc is ${show(m.jsonrpc)}`);
  if ("method" in m) {
    for (const k of Object.keys(m)) {
      if (!["jsonrpc", "method", "params", "id"].includes(k)) problems.push(`request member ${k}`);
    }
    if (typeof m.method !== "string") problems.push("method is not a string");
    if ("params" in m && !(Array.isArray(m.params) || isObject(m.params))) {
      problems.push("params neither array nor object");
    }
    // Our ids are numbers from a per-connection counter (DESIGN.md).
    if ("id" in m && !Number.isSafeInteger(m.id)) problems.push(`request id ${show(m.id)}`);
  } else {
    for (const k of Object.keys(m)) {
      if (!["jsonrpc", "result", "error", "id"].includes(k)) problems.push(`response member ${k}`);
    }
    if (!("id" in m)) problems.push("response without id");
    if (("result" in m) === ("error" in m)) problems.push("not exactly one of result and error");
    if ("error" in m) {
      const e = m.error;
      if (!isObject(e)) problems.push("error is not an object");
      else {
        if (!Number.isInteger(e.code)) problems.push("error.code is not an integer");
        if (typeof e.message !== "string") problems.push("error.message is not a string");
        for (const k of Object.keys(e)) {
          if (!["code", "message", "data"].includes(k)) problems.push(`error member ${k}`);
        }
      }
    }
  }
  return problems;
}

function checkStrict(text, isBinary) {
  if (isBinary) {
    check(false, "the Rust side sends text frames only", "got a binary frame");
    return undefined;
  }
  let msg;
  try {
    msg = JSON.parse(text);
  } catch (e) {
    check(false, "the Rust side sends valid JSON", `${e}: ${text}`);
    return undefined;
  }
  const items = Array.isArray(msg) ? msg : [msg];
  if (Array.isArray(msg) && msg.length === 0) {
    check(false, "the Rust side never sends an empty array");
  }
  for (const item of items) {
    const problems = strictProblems(item);
    if (problems.length) {
      check(false, "the Rust side sends strict JSON-RPC 2.0", `${problems.join("; ")} in ${text}`);
    }
  }
  return msg;
}

// ---- Wiring (TESTING.md) ---------------------------------------------------------------

const ws = new WebSocket(url);

function sendFrame(payload) {
  const text = JSON.stringify(payload);
  log(`--> ${text}`);
  ws.send(text);
}

const peer = new JSONRPCServerAndClient(
  // Its server reports every exception a method throws, the intended ones too.
  new JSONRPCServer({ errorListener: (message, e) => log(`(json-rpc-2.0) ${message} ${e}`) }),
  new JSONRPCClient((payload) => sendFrame(payload)),
);

// ---- Methods the Rust side calls on this side ------------------------------------------

const state = {
  askNodeWaiting: false, // true while this side's `ask_node` call waits for its answer
  doubledWhileWaiting: [], // the `node.double` calls that arrived while it waited
  notified: [], // params of the `node.notified` notifications the Rust side sent
  notifiedWaiters: [],
};

peer.addMethod("node.double", (params) => {
  // Positional `[x]` or named `{x}`.
  const x = Array.isArray(params) ? params[0] : params.x;
  if (state.askNodeWaiting) state.doubledWhileWaiting.push(x);
  return x * 2;
});

// Calls the Rust side back from inside this handler: Rust -> Node -> Rust, re-entrant.
peer.addMethod("node.sum_via_rust", async (params) => {
  return withTimeout(peer.request("sum", params), "node.sum_via_rust -> sum");
});

// Throws the error the Rust side asks for, so the Rust side can compare what arrives.
peer.addMethod("node.fail", (params) => {
  throw new JSONRPCErrorException(params.message, params.code, params.data);
});

peer.addMethod("node.notified", (params) => {
  state.notified.push(params);
  for (const w of state.notifiedWaiters.splice(0)) w();
});

function notifiedCount(n) {
  return withTimeout(
    new Promise((resolve) => {
      const poll = () => (state.notified.length >= n ? resolve(state.notified) : state.notifiedWaiters.push(poll));
      poll();
    }),
    `${n} node.notified notifications`,
  );
}

// ---- Frames in ---------------------------------------------------------------------------

ws.on("message", (data, isBinary) => {
  const text = data.toString("utf8");
  log(`<-- ${text}`);
  const msg = checkStrict(text, isBinary);
  if (msg === undefined) return;
  peer.receiveAndSend(msg).catch((e) => check(false, "json-rpc-2.0 accepts what the Rust side sends", `${e}: ${text}`));
});

ws.on("close", (code, reason) => {
  log(`connection closed: ${code} ${reason}`);
  peer.rejectAllPendingRequests(`connection closed: ${code}`);
});

// ---- The calls this side makes ------------------------------------------------------------

const request = (method, params) => withTimeout(peer.request(method, params), method);

// Calls `method` and resolves with the JSONRPCErrorException it fails with.
async function requestError(method, params) {
  try {
    const r = await request(method, params);
    return { unexpectedResult: r };
  } catch (e) {
    return e;
  }
}

async function run() {
  await withTimeout(new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
  }), "connect");
  log(`connected to ${url}`);

  // Positional and named params reach the same handler.
  check((await request("subtract", [42, 23])) === 19, "subtract [42, 23] = 19");
  check((await request("subtract", [23, 42])) === -19, "subtract [23, 42] = -19");
  check((await request("subtract", { subtrahend: 23, minuend: 42 })) === 19, "subtract {subtrahend, minuend} = 19");
  check((await request("sum", [1, 2, 4])) === 7, "sum [1, 2, 4] = 7");
  const data = await request("get_data");
  check(same(data, ["hello", 5]), "get_data without params", show(data));

  // Errors arrive as JSONRPCErrorException with the code the specification gives.
  let e = await requestError("foobar", [1]);
  check(e instanceof JSONRPCErrorException && e.code === -32601 && e.message === "Method not found",
    "unknown method -> -32601 Method not found", show(e));
  e = await requestError("subtract", ["a", "b"]);
  check(e instanceof JSONRPCErrorException && e.code === -32602 && e.message === "Invalid params" && typeof e.data === "string",
    "params of the wrong type -> -32602 with serde's reason in data", show({ code: e.code, message: e.message, data: e.data }));

  // A notification: the Rust side records it; `notes_seen` waits until it has `count`.
  peer.notify("node_says", { text: "hello from node", n: 1 });
  peer.notify("node_says", ["positional", 2]);
  const seen = await request("notes_seen", { count: 2 });
  check(same(seen, [{ text: "hello from node", n: 1 }, ["positional", 2]]), "the Rust side received both notifications in order", show(seen));

  // A batch through the client's batch support: an array of requests (string ids, which
  // the Rust side must echo as they are) and a notification.
  const batch = [
    { jsonrpc: "2.0", method: "subtract", params: [42, 23], id: "b1" },
    { jsonrpc: "2.0", method: "node_says", params: ["in a batch"] },
    { jsonrpc: "2.0", method: "sum", params: [1, 2, 3], id: "b2" },
    { jsonrpc: "2.0", method: "nope", id: "b3" },
  ];
  const answers = await withTimeout(peer.requestAdvanced(batch), "batch");
  const byId = Object.fromEntries(answers.map((a) => [a.id, a]));
  check(Array.isArray(answers) && answers.length === 3, "a batch of 3 calls and a notification -> 3 answers", show(answers));
  check(byId.b1?.result === 19 && byId.b2?.result === 6 && byId.b3?.error?.code === -32601,
    "batch answers matched by id", show(answers));

  // A batch of one call: the Rust side answers with an array of one, as the spec says
  // (json-rpc-2.0's own server would answer a plain object, see ask_node_batch_one).
  const one = await withTimeout(peer.requestAdvanced([{ jsonrpc: "2.0", method: "sum", params: [5, 5], id: "one" }]), "batch of one");
  check(Array.isArray(one) && one.length === 1 && one[0].result === 10, "a batch of one call -> an array of one answer", show(one));

  // A call back from inside a Rust handler while this side's call is still waiting:
  // `ask_node` calls `node.double` here, then `node.sum_via_rust`, which calls the Rust
  // side's `sum` from inside this side's handler, and returns both.
  state.askNodeWaiting = true;
  const asked = await request("ask_node", { x: 21 });
  state.askNodeWaiting = false;
  check(same(asked, { double: 42, plus_one: 43 }), "ask_node: Rust called node.double and node.sum_via_rust while we waited", show(asked));
  check(same(state.doubledWhileWaiting, [21]), "node.double ran while ask_node was still waiting", show(state.doubledWhileWaiting));
  // `ask_node` also notified this side before answering: frames on one connection keep
  // their order, but wait (bounded) rather than rely on it.
  const notified = await notifiedCount(1);
  check(same(notified[0], { from: "ask_node", x: 21 }), "the Rust side's notification arrived", show(notified));

  // A Node method throws JSONRPCErrorException: the Rust handler receives it as RpcError
  // with the same code, message and data, checks it, and answers with what it saw.
  const expected = { code: 4242, message: "node says no", data: { reason: "by design", list: [1, null, "é✓"] } };
  const sawError = await request("expect_node_error", expected);
  check(same(sawError, expected), "Rust received node.fail's error as RpcError with code, message and data", show(sawError));

  // A call to a method this side lacks: json-rpc-2.0 answers -32601 and Rust sees it.
  const sawMissing = await request("expect_node_missing", {});
  check(same(sawMissing, { code: -32601, message: "Method not found" }), "Rust received json-rpc-2.0's -32601", show(sawMissing));

  // The Rust side sends this side a batch: two calls, a notification and a failing call.
  const batchOut = await request("ask_node_batch", {});
  check(same(batchOut, [2, 4, { code: 7, message: "seven" }]), "a batch from Rust answered by json-rpc-2.0", show(batchOut));
  await notifiedCount(2);
  check(same(state.notified[1], { from: "ask_node_batch" }), "the notification in Rust's batch arrived", show(state.notified));

  // DEVIATION (json-rpc-2.0): a batch whose answer has one element is answered with a
  // plain object, not an array of one. The Rust side must route that lone response to
  // the call of its one-call batch (liberal in what it accepts).
  const batchOne = await request("ask_node_batch_one", {});
  check(batchOne === 10, "Rust routed json-rpc-2.0's lone answer to its one-call batch", show(batchOne));

  // Everything the Rust side recorded of this side's notifications, in order.
  const all = await request("notes_seen", { count: 3 });
  check(all.length === 3 && same(all[2], ["in a batch"]), "the notification inside our batch reached Rust", show(all));
}

const watchdog = setTimeout(() => {
  log("FAIL the whole run took longer than 30 s");
  process.exit(3);
}, 30000);

try {
  await run();
} catch (e) {
  check(false, "the run completed", e && e.stack ? e.stack : String(e));
}

// Close with 1000 and wait for the closing handshake to finish.
if (ws.readyState === WebSocket.OPEN) {
  const closed = new Promise((resolve) => ws.once("close", resolve));
  ws.close(1000, "done");
  await withTimeout(closed, "closing handshake").catch((e) => check(false, "closing handshake", String(e)));
}
clearTimeout(watchdog);
log(`checks ok: ${passed}; checks failed: ${failures.length}`);
process.exit(failures.length ? 1 : 0);
