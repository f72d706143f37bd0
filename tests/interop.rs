//! Interoperability with peers we did not write.
//!
//! - Node, npm `json-rpc-2.0` over `ws` (`tests/interop/node/peer.mjs`): a symmetric
//!   peer against our server. It calls our methods, we call its methods back while its
//!   call waits, errors cross both ways, batches both ways.
//! - Python, raw frames over `websockets` (`tests/interop/python/client.py`): every
//!   example of the specification and malformed input, against our server.
//! - Python, a hand-written JSON-RPC server on `websockets`
//!   (`tests/interop/python/server.py`): our client (`connect`) calls it, and it calls us.
//!
//! The foreign programs print every frame they exchange; on failure it is shown here.
//! Their packages are installed by `.ci/install-interop`; when they are missing these
//! tests fail and say so (they never pass silently).

mod common;

use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jsonrpc_peer::{connect, Caller, CloseReason, Context, Error, Peer, Router, RpcError};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The longest a foreign program may run.
const RUN_LIMIT: Duration = Duration::from_secs(60);
/// The longest one call made inside a handler may wait.
const CALL_LIMIT: Duration = Duration::from_secs(5);

const INSTALL_HINT: &str = "run `.ci/install-interop` first (it runs `npm ci` in \
     tests/interop/node and installs tests/interop/python/requirements.txt into the virtual \
     environment tests/interop/python/.venv)";

/// The Python the Python peers run on: the virtual environment `.ci/install-interop`
/// makes (tests/interop/python/.venv), or `python3` from `PATH` when there is none.
fn python() -> String {
    let venv = interop_dir("python").join(".venv/bin/python3");
    if venv.exists() {
        venv.to_string_lossy().into_owned()
    } else {
        "python3".to_owned()
    }
}

fn interop_dir(sub: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop")
        .join(sub)
}

// ---- Shared state of the interop router --------------------------------------------------

/// What the foreign peer did that the test checks afterwards.
struct Seen {
    /// Params of every notification received (`node_says` / `rust.note`), in order.
    notes: watch::Sender<Vec<Value>>,
    /// What went wrong inside a handler's own checks (also reported to the caller).
    failures: Mutex<Vec<String>>,
    /// The connection the foreign peer made, for checking how it ended.
    peer: Mutex<Option<Peer>>,
}

impl Seen {
    fn new() -> Arc<Seen> {
        Arc::new(Seen {
            notes: watch::Sender::new(Vec::new()),
            failures: Mutex::new(Vec::new()),
            peer: Mutex::new(None),
        })
    }

    fn record(&self, note: Value) {
        self.notes.send_modify(|notes| notes.push(note));
    }

    /// Waits (bounded) until at least `count` notifications have arrived.
    async fn notes(&self, count: usize) -> Result<Vec<Value>, RpcError> {
        let mut rx = self.notes.subscribe();
        let arrived = tokio::time::timeout(CALL_LIMIT, rx.wait_for(|n| n.len() >= count))
            .await
            .map(|r| r.map(|notes| notes.clone()));
        match arrived {
            Ok(Ok(notes)) => Ok(notes),
            _ => Err(RpcError::new(1, "notifications did not arrive")
                .with_data(json!({"wanted": count, "have": *self.notes.borrow()}))),
        }
    }

    fn fail(&self, what: String) -> RpcError {
        self.failures.lock().expect("lock").push(what.clone());
        RpcError::new(2, "check failed on the Rust side").with_data(what)
    }

    fn failures(&self) -> Vec<String> {
        self.failures.lock().expect("lock").clone()
    }

    fn remember(&self, peer: &Peer) {
        self.peer
            .lock()
            .expect("lock")
            .get_or_insert_with(|| peer.clone());
    }
}

type Cx = Context<Arc<Seen>>;

/// A failed call made from inside a handler, as the error the handler answers with.
fn relay(seen: &Seen, what: &str, e: Error) -> RpcError {
    seen.fail(format!("{what}: {e}"))
}

// ---- The router our server serves for the foreign clients ----------------------------------

#[derive(Deserialize)]
struct X {
    x: i64,
}

#[derive(Deserialize)]
struct Count {
    count: usize,
}

fn overflow() -> RpcError {
    RpcError::invalid_params("integer overflow")
}

fn interop_router(seen: Arc<Seen>) -> Router<Arc<Seen>> {
    // The specification's methods, then what the foreign peers' scenarios need.
    common::spec_methods::with_spec_methods(Router::with_state(seen))
        // What the foreign peer notifies is recorded; `notes_seen` waits for it.
        .notification("node_says", |cx: Cx, note: Value| async move {
            cx.state().record(note);
        })
        .method("notes_seen", |cx: Cx, p: Count| async move {
            cx.state().notes(p.count).await
        })
        // Calls back the caller while its call waits: `node.double`, then
        // `node.sum_via_rust`, whose handler on the Node side calls our `sum`.
        .method("ask_node", |cx: Cx, p: X| async move {
            let seen = cx.state();
            seen.remember(cx.peer());
            let peer = cx.peer();
            peer.notify("node.notified", json!({"from": "ask_node", "x": p.x}))
                .await
                .map_err(|e| relay(seen, "notify node.notified", e))?;
            let double: i64 = peer
                .call("node.double", [p.x])
                .timeout(CALL_LIMIT)
                .await
                .map_err(|e| relay(seen, "call node.double", e))?;
            let plus_one: i64 = peer
                .call("node.sum_via_rust", [double, 1])
                .timeout(CALL_LIMIT)
                .await
                .map_err(|e| relay(seen, "call node.sum_via_rust", e))?;
            Ok::<_, RpcError>(json!({"double": double, "plus_one": plus_one}))
        })
        // Asks Node to throw `expected`; what arrives must be an RpcError equal to it.
        .method(
            "expect_node_error",
            |cx: Cx, expected: RpcError| async move {
                let seen = cx.state();
                match cx
                    .peer()
                    .call::<Value>("node.fail", &expected)
                    .timeout(CALL_LIMIT)
                    .await
                {
                    Err(Error::Rpc { error: got, .. }) if got == expected => Ok(got),
                    other => Err(seen.fail(format!(
                        "node.fail: expected Err(Rpc({expected:?})), got {other:?}"
                    ))),
                }
            },
        )
        .method("expect_node_missing", |cx: Cx, _p: Value| async move {
            let seen = cx.state();
            let expected = RpcError::method_not_found();
            match cx
                .peer()
                .call::<Value>("node.nope", [1])
                .timeout(CALL_LIMIT)
                .await
            {
                Err(Error::Rpc { error: got, .. }) if got == expected => Ok(got),
                other => Err(seen.fail(format!(
                    "node.nope: expected Err(Rpc({expected:?})), got {other:?}"
                ))),
            }
        })
        // A batch to Node: two calls (positional, named), a notification, a failing call.
        .method("ask_node_batch", |cx: Cx, _p: Value| async move {
            let seen = cx.state();
            let mut batch = cx.peer().batch();
            let built = batch
                .call("node.double", [1])
                .and_then(|b| b.call("node.double", json!({"x": 2})))
                .and_then(|b| b.notify("node.notified", json!({"from": "ask_node_batch"})))
                .and_then(|b| b.call("node.fail", json!({"code": 7, "message": "seven"})));
            built.map_err(|e| relay(seen, "build the batch", e))?;
            batch.timeout(CALL_LIMIT);
            let outcomes = batch
                .send()
                .await
                .map_err(|e| relay(seen, "send the batch", e))?;
            let mut out = Vec::new();
            for outcome in outcomes {
                out.push(match outcome {
                    Ok(reply) => reply
                        .decode::<Value>()
                        .map_err(|e| relay(seen, "read a batch result", e))?,
                    Err(Error::Rpc { error: e, .. }) => {
                        serde_json::to_value(e).map_err(|e| seen.fail(e.to_string()))?
                    }
                    Err(e) => return Err(relay(seen, "a call in the batch", e)),
                });
            }
            Ok(out)
        })
        // A batch of one call: json-rpc-2.0 answers it with a plain object (not an
        // array of one); we route that lone response to the call all the same.
        .method("ask_node_batch_one", |cx: Cx, _p: Value| async move {
            let seen = cx.state();
            let mut batch = cx.peer().batch();
            batch
                .call("node.double", [5])
                .map_err(|e| relay(seen, "build the batch", e))?;
            batch.timeout(CALL_LIMIT);
            let mut outcomes = batch
                .send()
                .await
                .map_err(|e| relay(seen, "send the batch of one", e))?;
            match outcomes.pop() {
                Some(Ok(reply)) if outcomes.is_empty() => reply
                    .decode::<i64>()
                    .map_err(|e| relay(seen, "read the result", e)),
                other => Err(seen.fail(format!("batch of one: got {other:?}"))),
            }
        })
}

// ---- Foreign programs as child processes ----------------------------------------------------

/// A foreign program running as a child process, killed on drop, its output collected.
struct Foreign {
    what: String,
    child: Child,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
    /// Output read before the collectors took over (the Python server's first line).
    head: String,
}

fn collect(r: impl AsyncRead + Unpin + Send + 'static) -> JoinHandle<String> {
    tokio::spawn(async move {
        let mut r = r;
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf).await;
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// Spawns `program args..` with piped output.
fn spawn(program: &str, args: &[&str], cwd: PathBuf) -> Child {
    Command::new(program)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start `{program}` ({e}): {INSTALL_HINT}"))
}

impl Foreign {
    fn start(what: &str, program: &str, args: &[&str], cwd: PathBuf) -> Foreign {
        let mut child = spawn(program, args, cwd);
        let stdout = collect(child.stdout.take().expect("piped stdout"));
        let stderr = collect(child.stderr.take().expect("piped stderr"));
        Foreign {
            what: what.to_owned(),
            child,
            stdout,
            stderr,
            head: String::new(),
        }
    }

    /// Starts a program whose first line of output is `listening on ws://HOST:PORT`,
    /// and returns it with that URL.
    async fn start_listening(
        what: &str,
        program: &str,
        args: &[&str],
        cwd: PathBuf,
    ) -> (Foreign, String) {
        let mut child = spawn(program, args, cwd);
        let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
        let stderr = collect(child.stderr.take().expect("piped stderr"));
        let mut first = String::new();
        let read = tokio::time::timeout(common::STEP, out.read_line(&mut first)).await;
        let mut foreign = Foreign {
            what: what.to_owned(),
            child,
            stdout: collect(out),
            stderr,
            head: first.clone(),
        };
        let url = match read {
            Ok(Ok(_)) => first
                .trim()
                .strip_prefix("listening on ")
                .map(str::to_owned),
            _ => None,
        };
        match url {
            Some(url) if url.starts_with("ws://127.0.0.1:") => (foreign, url),
            _ => {
                let (status, output) = foreign.stop().await;
                panic!(
                    "{what} did not print `listening on ws://127.0.0.1:PORT` first \
                     (status {status:?}):\n{output}"
                )
            }
        }
    }

    /// Kills the program if it still runs; returns its status and its output.
    async fn stop(&mut self) -> (Option<ExitStatus>, String) {
        let status = match self.child.try_wait() {
            Ok(Some(status)) => Some(status),
            _ => {
                let _ = self.child.kill().await;
                None
            }
        };
        (status, self.output().await)
    }

    async fn output(&mut self) -> String {
        let out = tokio::time::timeout(common::STEP, &mut self.stdout).await;
        let err = tokio::time::timeout(common::STEP, &mut self.stderr).await;
        let text = |r: Result<Result<String, _>, _>| match r {
            Ok(Ok(s)) => s,
            _ => "<output not collected>".to_owned(),
        };
        format!(
            "---- {} stdout ----\n{}{}\n---- {} stderr ----\n{}",
            self.what,
            self.head,
            text(out),
            self.what,
            text(err)
        )
    }

    /// Waits (bounded) for the program to exit and asserts it exited 0. Returns its
    /// output.
    async fn expect_success(mut self) -> String {
        let status = match tokio::time::timeout(RUN_LIMIT, self.child.wait()).await {
            Ok(Ok(status)) => Some(status),
            Ok(Err(e)) => panic!("waiting for {} failed: {e}", self.what),
            Err(_) => {
                let _ = self.child.kill().await;
                None
            }
        };
        let output = self.output().await;
        match status {
            Some(s) if s.success() => output,
            Some(s) => panic!("{} failed ({s}):\n{output}", self.what),
            None => panic!(
                "{} did not finish within {RUN_LIMIT:?}; killed:\n{output}",
                self.what
            ),
        }
    }
}

// ---- What must be installed ---------------------------------------------------------------

/// Fails the test, with the install hint, unless `program args..` runs and exits 0.
async fn require(what: &str, program: &str, args: &[&str]) {
    let run = Command::new(program)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(common::STEP, run).await {
        Ok(Ok(out)) if out.status.success() => {}
        Ok(Ok(out)) => panic!(
            "{what} is missing or the wrong version ({}): {INSTALL_HINT}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
        Ok(Err(e)) => panic!("{what} is missing (`{program}`: {e}): {INSTALL_HINT}"),
        Err(_) => panic!("`{program}` did not answer within {:?}", common::STEP),
    }
}

async fn require_node() {
    require(
        "node with json-rpc-2.0 1.8.x and ws 8.x in tests/interop/node/node_modules",
        "node",
        &[
            "--input-type=module",
            "-e",
            "import { createRequire } from 'node:module'; \
             const req = createRequire(process.cwd() + '/tests/interop/node/'); \
             const v = (p) => req(p + '/package.json').version; \
             if (!v('json-rpc-2.0').startsWith('1.8.') || !v('ws').startsWith('8.')) process.exit(1);",
        ],
    )
    .await;
}

async fn require_python() {
    require(
        "python3 with websockets 17.x",
        &python(),
        &[
            "-c",
            "import sys, websockets; sys.exit(0 if websockets.__version__.startswith('17.') else 1)",
        ],
    )
    .await;
}

// ---- The tests ------------------------------------------------------------------------------

/// Node's json-rpc-2.0 as a full peer of our server: calls both ways, call-backs while
/// a call waits, errors and batches both ways, notifications both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_json_rpc_2_peer_against_our_server() {
    require_node().await;
    let seen = Seen::new();
    let (url, _server) = common::serve(interop_router(seen.clone())).await;

    let node = Foreign::start(
        "node peer.mjs",
        "node",
        &["peer.mjs", &url],
        interop_dir("node"),
    );
    let output = node.expect_success().await;
    println!("{output}");

    assert_eq!(
        seen.failures(),
        Vec::<String>::new(),
        "checks inside our handlers failed:\n{output}"
    );
    // The Node side's notifications, in the order it sent them.
    assert_eq!(
        *seen.notes.borrow(),
        vec![
            json!({"text": "hello from node", "n": 1}),
            json!(["positional", 2]),
            json!(["in a batch"]),
        ],
        "{output}"
    );
    // Node closed with 1000 and our side saw the closing handshake.
    let peer = seen.peer.lock().expect("lock").clone();
    let peer = peer.expect("ask_node ran and remembered the connection");
    let reason = common::within(peer.closed()).await;
    assert!(
        matches!(reason, CloseReason::Remote { code: 1000, .. }),
        "expected the Node side to close with 1000, got {reason:?}"
    );
    assert_eq!(peer.pending_calls(), 0);
}

/// Raw text frames from Python's `websockets`: every example of the specification and
/// malformed input, answers compared as JSON values (batches as sets).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_raw_frames_against_our_server() {
    require_python().await;
    let seen = Seen::new();
    let (url, _server) = common::serve(interop_router(seen.clone())).await;
    let client = Foreign::start(
        "python3 client.py",
        &python(),
        &["client.py", &url],
        interop_dir("python"),
    );
    let output = client.expect_success().await;
    println!("{output}");
    assert_eq!(seen.failures(), Vec::<String>::new(), "{output}");
}

/// Our client (`connect`) against a Python JSON-RPC server hand-written on `websockets`:
/// calls, a notification, batches, errors, and the server calling us back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_against_python_server() {
    require_python().await;
    let seen = Seen::new();
    let router = Router::with_state(seen.clone())
        .method("rust.greet", |_cx: Cx, (name,): (String,)| async move {
            Ok::<_, RpcError>(format!("hello, {name}"))
        })
        .method("rust.add", |_cx: Cx, (a, b): (i64, i64)| async move {
            a.checked_add(b).ok_or_else(overflow)
        })
        .method("rust.fail", |_cx: Cx, (): ()| async {
            Err::<(), _>(RpcError::new(777, "rust says no").with_data(json!({"why": ["asked", 1]})))
        })
        .notification("rust.note", |cx: Cx, note: Value| async move {
            cx.state().record(note);
        });

    let (mut python, url) = Foreign::start_listening(
        "python3 server.py",
        &python(),
        &["server.py"],
        interop_dir("python"),
    )
    .await;
    let run = async move {
        let peer = common::within(connect(&url, router))
            .await
            .expect("connect to the Python server");
        exercise_python_server(&peer, &seen).await;
        common::within(peer.close()).await;
        assert_eq!(peer.pending_calls(), 0);
    };
    // A panic in `run` must still show what the Python side printed.
    let outcome = tokio::spawn(run).await;
    if let Err(e) = outcome {
        let (status, output) = python.stop().await;
        panic!("{e} (python exited: {status:?})\n{output}");
    }
    let output = python.expect_success().await;
    println!("{output}");
}

async fn exercise_python_server(peer: &Peer, seen: &Seen) {
    use common::within;

    // Positional and named params.
    let n: i64 = within(peer.call("py.add", [2, 3]))
        .await
        .expect("py.add [2, 3]");
    assert_eq!(n, 5);
    let n: i64 = within(peer.call("py.add", json!({"a": 40, "b": 2})))
        .await
        .expect("py.add {a, b}");
    assert_eq!(n, 42);
    let echo =
        json!({"nested": [1, {"x": null}], "text": "é✓ \"quoted\"", "big": 9007199254740993u64});
    let back: Value = within(peer.call("py.echo", &echo)).await.expect("py.echo");
    assert_eq!(back, echo);
    // No params at all.
    let hi: String = within(peer.call("py.hello", ())).await.expect("py.hello");
    assert_eq!(hi, "hi");

    // The Python side's errors arrive as RpcError, code, message and data intact.
    let err = within(peer.call::<Value>("py.fail", ()))
        .await
        .expect_err("py.fail fails");
    assert_eq!(
        err.rpc(),
        Some(
            &RpcError::new(-32042, "python says no")
                .with_data(json!({"why": "asked to", "list": [1, 2]}))
        ),
        "{err:?}"
    );
    let err = within(peer.call::<Value>("py.nope", [1]))
        .await
        .expect_err("an unknown method fails");
    assert_eq!(err.rpc(), Some(&RpcError::method_not_found()), "{err:?}");

    // Notifications, then a call that waits (bounded, on the Python side) for them.
    within(peer.notify("py.note", ["one"]))
        .await
        .expect("notify");
    within(peer.notify("py.note", json!({"two": 2})))
        .await
        .expect("notify");
    let notes: Value = within(peer.call("py.notes", json!({"count": 2})))
        .await
        .expect("py.notes");
    assert_eq!(notes, json!([["one"], {"two": 2}]));

    // A batch: calls, a notification, a failing call, an unknown method; outcomes in the
    // order the calls were added.
    let mut batch = peer.batch();
    batch
        .call("py.add", [1, 2])
        .and_then(|b| b.notify("py.note", ["three"]))
        .and_then(|b| b.call("py.fail", ()))
        .and_then(|b| b.call("py.nope", ()))
        .and_then(|b| b.call("py.add", json!({"a": 10, "b": 20})))
        .expect("build the batch");
    let outcomes = within(batch.send()).await.expect("send the batch");
    assert_eq!(outcomes.len(), 4, "{outcomes:?}");
    let n: i64 = outcomes[0]
        .as_ref()
        .expect("py.add")
        .decode()
        .expect("an integer");
    assert_eq!(n, 3);
    let code = |i: usize| {
        outcomes[i]
            .as_ref()
            .err()
            .and_then(Error::rpc)
            .map(|e| e.code.get())
    };
    assert_eq!(code(1), Some(-32042), "{outcomes:?}");
    assert_eq!(code(2), Some(-32601), "{outcomes:?}");
    let n: i64 = outcomes[3]
        .as_ref()
        .expect("py.add")
        .decode()
        .expect("an integer");
    assert_eq!(n, 30);

    // A batch of one call: the Python server answers an array of one.
    let mut batch = peer.batch();
    batch.call("py.add", [7, 8]).expect("build");
    let outcomes = within(batch.send()).await.expect("send the batch of one");
    let n: i64 = outcomes[0]
        .as_ref()
        .expect("py.add")
        .decode()
        .expect("an integer");
    assert_eq!((outcomes.len(), n), (1, 15));

    let notes: Value = within(peer.call("py.notes", json!({"count": 3})))
        .await
        .expect("py.notes");
    assert_eq!(notes[2], json!(["three"]));

    // The Python side calls us back while our call waits: a notification, then
    // `rust.greet`, then `rust.fail`, whose error it reports as it saw it.
    let back: Value = within(peer.call("py.call_rust", ["python"]))
        .await
        .expect("py.call_rust");
    assert_eq!(
        back,
        json!({
            "greeting": "hello, python",
            "error": {"code": 777, "message": "rust says no", "data": {"why": ["asked", 1]}},
        })
    );
    let notes = seen.notes(1).await.expect("rust.note arrived");
    assert_eq!(notes, vec![json!({"from": "python"})]);

    // The Python side sends us a batch and reports our answers.
    let back: Value = within(peer.call("py.call_rust_batch", ()))
        .await
        .expect("py.call_rust_batch");
    assert_eq!(
        back,
        json!([
            {"jsonrpc": "2.0", "result": 5, "id": "b1"},
            {"jsonrpc": "2.0", "result": "hello, batch", "id": "b2"},
            {"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "b3"},
        ])
    );
    let notes = seen
        .notes(2)
        .await
        .expect("the batch's notification arrived");
    assert_eq!(notes[1], json!(["in a batch"]));
}
