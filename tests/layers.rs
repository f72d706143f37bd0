//! Call layers: a layer sees calls and notifications in both directions with their
//! method, params, id and outcome; it can answer instead (deny, cache); it sees
//! timeouts, cancels, panics and the connection's end; several run in the documented
//! order.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{serve_with, within};
use jsonrpc_peer::layer::{CallInfo, CallOutcome, Decision, Layer, Wants};
use jsonrpc_peer::{
    connect_with_config, Caller, Context, Error, Peer, PeerConfig, Router, RpcError,
};
use serde_json::value::RawValue;
use tokio::sync::mpsc;

/// What a layer saw, in one line: `NAME call|end DIRECTION METHOD ...`.
type Events = mpsc::UnboundedReceiver<String>;

/// A layer that writes down everything it sees, and answers `deny` (with -32001) or
/// `cache` (with a result) instead of letting the call through.
struct Recorder {
    name: &'static str,
    tx: mpsc::UnboundedSender<String>,
    deny: &'static str,
    cache: &'static str,
}

fn recorder(name: &'static str) -> (Recorder, Events) {
    let (tx, rx) = mpsc::unbounded_channel();
    let layer = Recorder {
        name,
        tx,
        deny: "",
        cache: "",
    };
    (layer, rx)
}

fn direction(call: &CallInfo<'_>) -> &'static str {
    if call.is_served() {
        "served"
    } else {
        "made"
    }
}

impl Layer for Recorder {
    fn on_call(&self, call: &CallInfo<'_>) -> Decision {
        let _ = self.tx.send(format!(
            "{} call {} {} params={} id={} known={}",
            self.name,
            direction(call),
            call.method(),
            call.params().unwrap_or("-"),
            call.id().unwrap_or("-"),
            call.is_known(),
        ));
        if call.method() == self.deny {
            return Decision::Error(RpcError::new(-32001, "Forbidden"));
        }
        if call.method() == self.cache {
            return Decision::Result(RawValue::from_string("\"cached\"".into()).unwrap());
        }
        Decision::Continue
    }

    fn on_outcome(&self, call: &CallInfo<'_>, outcome: &CallOutcome<'_>, _took: Duration) {
        let outcome = match outcome {
            CallOutcome::Result(raw) => format!("result {raw}"),
            CallOutcome::Error(e) => format!("error {}", e.code.get()),
            CallOutcome::Notified => "notified".into(),
            CallOutcome::Timeout => "timeout".into(),
            CallOutcome::Cancelled => "cancelled".into(),
            CallOutcome::Closed => "closed".into(),
            CallOutcome::Panicked => "panicked".into(),
            CallOutcome::Failed(e) => format!("failed {e}"),
            other => format!("{other:?}"),
        };
        let _ = self.tx.send(format!(
            "{} end {} {} {outcome}",
            self.name,
            direction(call),
            call.method()
        ));
    }
}

/// The next `n` events, each within the test's step.
async fn next(events: &mut Events, n: usize) -> Vec<String> {
    let mut seen = Vec::new();
    for _ in 0..n {
        seen.push(within(events.recv()).await.expect("an event"));
    }
    seen
}

fn server_router(ran: Arc<AtomicUsize>) -> Router<Arc<AtomicUsize>> {
    Router::with_state(ran)
        .method(
            "add",
            |cx: Context<Arc<AtomicUsize>>, [a, b]: [i64; 2]| async move {
                cx.state().fetch_add(1, Ordering::SeqCst);
                Ok::<_, RpcError>(a + b)
            },
        )
        .method(
            "secret",
            |cx: Context<Arc<AtomicUsize>>, (): ()| async move {
                cx.state().fetch_add(1, Ordering::SeqCst);
                Ok::<_, RpcError>("the secret")
            },
        )
        .method(
            "ask_back",
            |cx: Context<Arc<AtomicUsize>>, (): ()| async move {
                let name: String = cx.peer().call("whoami", ()).await?;
                Ok::<_, RpcError>(format!("you are {name}"))
            },
        )
        .notification(
            "note",
            |_cx: Context<Arc<AtomicUsize>>, _: [i64; 1]| async {},
        )
}

fn client_router() -> Router {
    Router::new().method("whoami", |_cx: Context, (): ()| async {
        Ok::<_, RpcError>("client")
    })
}

/// Calls and notifications each way over a real socket: each side's layer sees what it
/// serves and what it makes, with the method, the params and id as written on the
/// wire, and the outcome.
#[tokio::test]
async fn a_layer_sees_both_directions() {
    let (server_layer, mut server) = recorder("s");
    let ran = Arc::new(AtomicUsize::new(0));
    let config = PeerConfig::default().layer(server_layer);
    let (url, _handle) = serve_with(server_router(ran.clone()), config).await;
    let (client_layer, mut client) = recorder("c");
    let config = PeerConfig::default().layer(client_layer);
    let peer = within(connect_with_config(&url, client_router(), &config))
        .await
        .unwrap();

    let sum: i64 = within(peer.call("add", [1, 2])).await.unwrap();
    assert_eq!(sum, 3);
    assert_eq!(
        next(&mut client, 2).await,
        [
            "c call made add params=[1,2] id=1 known=true",
            "c end made add result 3",
        ]
    );
    assert_eq!(
        next(&mut server, 2).await,
        [
            "s call served add params=[1,2] id=1 known=true",
            "s end served add result 3",
        ]
    );

    // A call that calls back: the server makes a call while it serves one.
    let answer: String = within(peer.call("ask_back", ())).await.unwrap();
    assert_eq!(answer, "you are client");
    assert_eq!(
        next(&mut server, 4).await,
        [
            "s call served ask_back params=- id=2 known=true",
            "s call made whoami params=- id=1 known=true",
            "s end made whoami result \"client\"",
            "s end served ask_back result \"you are client\"",
        ]
    );
    assert_eq!(
        next(&mut client, 4).await,
        [
            "c call made ask_back params=- id=2 known=true",
            "c call served whoami params=- id=1 known=true",
            "c end served whoami result \"client\"",
            "c end made ask_back result \"you are client\"",
        ]
    );

    // Notifications, and a name the server does not know.
    within(peer.notify("note", [7])).await.unwrap();
    assert_eq!(
        next(&mut client, 2).await,
        [
            "c call made note params=[7] id=- known=true",
            "c end made note notified",
        ]
    );
    assert_eq!(
        next(&mut server, 2).await,
        [
            "s call served note params=[7] id=- known=true",
            "s end served note notified",
        ]
    );
    let missing = within(peer.call::<i64>("nope", [1])).await.unwrap_err();
    assert_eq!(missing.rpc().map(|e| e.code.get()), Some(-32601));
    assert_eq!(
        next(&mut server, 2).await,
        [
            "s call served nope params=[1] id=3 known=false",
            "s end served nope error -32601",
        ]
    );
    assert_eq!(
        next(&mut client, 2).await[1],
        "c end made nope error -32601"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    peer.close().await;
}

/// A layer that refuses a call served: the caller gets its error, the handler never
/// runs. A layer that refuses (or answers) a call made: nothing is sent.
#[tokio::test]
async fn a_layer_can_deny_and_answer_instead() {
    let (mut server_layer, mut server) = recorder("s");
    server_layer.deny = "secret";
    let ran = Arc::new(AtomicUsize::new(0));
    let config = PeerConfig::default().layer(server_layer);
    let (url, _handle) = serve_with(server_router(ran.clone()), config).await;
    let (mut client_layer, mut client) = recorder("c");
    client_layer.deny = "never.sent";
    client_layer.cache = "add";
    let config = PeerConfig::default().layer(client_layer);
    let peer = within(connect_with_config(&url, client_router(), &config))
        .await
        .unwrap();

    let denied = within(peer.call::<String>("secret", ())).await.unwrap_err();
    assert_eq!(denied.rpc().map(|e| e.code.get()), Some(-32001));
    assert_eq!(
        next(&mut server, 2).await,
        [
            "s call served secret params=- id=1 known=true",
            "s end served secret error -32001",
        ]
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the handler did not run");
    next(&mut client, 2).await;

    // Refused and answered here: neither reaches the server.
    let refused = within(peer.call::<String>("never.sent", ()))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, Error::Rpc { method, error } if &**method == "never.sent" && error.code.get() == -32001),
        "{refused:?}"
    );
    let cached: String = within(peer.call("add", [1, 2])).await.unwrap();
    assert_eq!(cached, "cached");
    assert_eq!(
        next(&mut client, 4).await,
        [
            "c call made never.sent params=- id=2 known=true",
            "c end made never.sent error -32001",
            "c call made add params=[1,2] id=3 known=true",
            "c end made add result \"cached\"",
        ]
    );
    let refused = within(peer.notify("never.sent", ())).await.unwrap_err();
    assert_eq!(refused.rpc().map(|e| e.code.get()), Some(-32001));
    // The next thing the server sees is the call after them.
    let sum: Result<i64, _> = within(peer.call("ask_back", ())).await;
    assert!(sum.is_err(), "a string is not an i64");
    assert_eq!(
        next(&mut server, 1).await,
        ["s call served ask_back params=- id=4 known=true"]
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    peer.close().await;
}

/// Two peers over an in-memory pair under paused time: `a` calls, `b` serves.
fn pair(a_config: PeerConfig, b_config: PeerConfig) -> (Peer, Peer) {
    let (a_end, b_end) = jsonrpc_peer::transport::pair();
    let b_router = Router::new()
        .method("slow", |_cx: Context, (): ()| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, RpcError>(0)
        })
        .method("boom", |_cx: Context, (): ()| async {
            if true {
                panic!("the handler fails");
            }
            Ok::<_, RpcError>(0)
        });
    let a = Peer::start(a_end, Router::new(), &a_config);
    let b = Peer::start(b_end, b_router, &b_config);
    (a, b)
}

/// A call made that times out is a timeout here and a cancel there (the cancel
/// notification stops the handler); a call given up by its caller is a cancel on both
/// sides; a panic is seen as one; a connection that ends under a call is `closed`.
#[tokio::test(start_paused = true)]
async fn a_layer_sees_timeouts_cancels_panics_and_the_end() {
    let (a_layer, mut a) = recorder("a");
    let (b_layer, mut b) = recorder("b");
    let (caller, server) = pair(
        PeerConfig::default().layer(a_layer),
        PeerConfig::default().layer(b_layer),
    );

    let timeout = Duration::from_secs(5);
    let outcome = caller.call::<i64>("slow", ()).timeout(timeout).await;
    assert!(matches!(outcome, Err(Error::Timeout { .. })), "{outcome:?}");
    assert_eq!(next(&mut a, 2).await[1], "a end made slow timeout");
    assert_eq!(
        next(&mut b, 2).await,
        [
            "b call served slow params=- id=1 known=true",
            "b end served slow cancelled",
        ]
    );

    // Given up: the caller's future is dropped.
    let call = tokio::spawn({
        let caller = caller.clone();
        async move { caller.call::<i64>("slow", ()).await }
    });
    assert_eq!(
        next(&mut b, 1).await[0],
        "b call served slow params=- id=2 known=true"
    );
    call.abort();
    assert_eq!(next(&mut a, 2).await[1], "a end made slow cancelled");
    assert_eq!(next(&mut b, 1).await, ["b end served slow cancelled"]);

    let panicked = caller.call::<i64>("boom", ()).await.unwrap_err();
    assert_eq!(panicked.rpc().map(|e| e.code.get()), Some(-32603));
    assert_eq!(next(&mut b, 2).await[1], "b end served boom panicked");
    assert_eq!(next(&mut a, 2).await[1], "a end made boom error -32603");

    // The connection ends while a call runs.
    let call = tokio::spawn({
        let caller = caller.clone();
        async move { caller.call::<i64>("slow", ()).await }
    });
    assert_eq!(
        next(&mut b, 1).await[0],
        "b call served slow params=- id=4 known=true"
    );
    server.close().await;
    let outcome = call.await.unwrap();
    assert!(matches!(outcome, Err(Error::Closed(_))), "{outcome:?}");
    assert_eq!(next(&mut a, 2).await[1], "a end made slow closed");
    assert_eq!(next(&mut b, 1).await, ["b end served slow closed"]);
}

/// The first layer added is the outermost: `on_call` runs first to last, `on_outcome`
/// last to first, and a layer that answers hides the call from the layers after it.
#[tokio::test(start_paused = true)]
async fn layers_run_in_the_documented_order() {
    let (tx, mut events) = mpsc::unbounded_channel();
    let outer = Recorder {
        name: "outer",
        tx: tx.clone(),
        deny: "z",
        cache: "",
    };
    let inner = Recorder {
        name: "inner",
        tx,
        deny: "x",
        cache: "",
    };
    let config = PeerConfig::default().layer(outer).layer(inner);
    let (caller, _server) = pair(config, PeerConfig::default());

    let _ = caller.call::<i64>("x", ()).await;
    assert_eq!(
        next(&mut events, 4).await,
        [
            "outer call made x params=- id=1 known=true",
            "inner call made x params=- id=1 known=true",
            "inner end made x error -32001",
            "outer end made x error -32001",
        ]
    );
    let _ = caller.call::<i64>("z", ()).await;
    assert_eq!(
        next(&mut events, 2).await,
        [
            "outer call made z params=- id=2 known=true",
            "outer end made z error -32001",
        ]
    );
    let _ = caller.call::<i64>("y", ()).await;
    assert_eq!(
        next(&mut events, 4).await,
        [
            "outer call made y params=- id=3 known=true",
            "inner call made y params=- id=3 known=true",
            "inner end made y error -32601",
            "outer end made y error -32601",
        ]
    );
}

/// A layer that writes down, at each outcome, the duration and the params and id it
/// is given, and wants `wants`.
struct Timer {
    wants: Wants,
    tx: mpsc::UnboundedSender<String>,
}

impl Layer for Timer {
    fn wants(&self) -> Wants {
        self.wants
    }

    fn on_outcome(&self, call: &CallInfo<'_>, _outcome: &CallOutcome<'_>, took: Duration) {
        let _ = self.tx.send(format!(
            "{} {} took={}s id={} params={}",
            direction(call),
            call.method(),
            took.as_secs(),
            call.id().unwrap_or("-"),
            call.params().unwrap_or("-"),
        ));
    }
}

/// A call made by `a` that `b` answers after 2 s, and a notification `b` handles in
/// 3 s, both sides with a [`Timer`] wanting `wants`: what each side's layer saw.
async fn timed(wants: Wants) -> (Vec<String>, Vec<String>) {
    let (a_tx, mut a_events) = mpsc::unbounded_channel();
    let (b_tx, mut b_events) = mpsc::unbounded_channel();
    let (a_end, b_end) = jsonrpc_peer::transport::pair();
    let b_router = Router::new()
        .method("wait", |_cx: Context, [_]: [i64; 1]| async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            Ok::<_, RpcError>(0)
        })
        .notification("nap", |_cx: Context, [_]: [i64; 1]| async {
            tokio::time::sleep(Duration::from_secs(3)).await;
        });
    let config = |tx| PeerConfig::default().layer(Timer { wants, tx });
    let a = Peer::start(a_end, Router::new(), &config(a_tx));
    let _b = Peer::start(b_end, b_router, &config(b_tx));
    within(a.call::<i64>("wait", [1])).await.unwrap();
    within(a.notify("nap", [2])).await.unwrap();
    let a_seen = next(&mut a_events, 2).await;
    let b_seen = next(&mut b_events, 2).await;
    (a_seen, b_seen)
}

/// What no layer wants is not measured (a zero duration) or kept (no params or id of
/// a call made at its outcome); the `Metrics` layer wants only calls' durations.
#[tokio::test(start_paused = true)]
async fn a_layer_is_given_what_it_wants() {
    let (a, b) = timed(Wants::ALL).await;
    assert_eq!(
        a,
        [
            "made wait took=2s id=1 params=[1]",
            "made nap took=0s id=- params=[2]",
        ]
    );
    assert_eq!(
        b,
        [
            "served wait took=2s id=1 params=[1]",
            "served nap took=3s id=- params=[2]",
        ]
    );

    let (a, b) = timed(Wants::NOTHING.call_durations()).await;
    assert_eq!(
        a,
        [
            "made wait took=2s id=- params=-",
            "made nap took=0s id=- params=-"
        ]
    );
    // What a call served has arrived with is kept anyway.
    assert_eq!(
        b,
        [
            "served wait took=2s id=1 params=[1]",
            "served nap took=0s id=- params=[2]",
        ]
    );

    let (a, b) = timed(Wants::NOTHING.notification_durations().outcome_parts()).await;
    assert_eq!(
        a,
        [
            "made wait took=0s id=1 params=[1]",
            "made nap took=0s id=- params=[2]",
        ]
    );
    assert_eq!(
        b,
        [
            "served wait took=0s id=1 params=[1]",
            "served nap took=3s id=- params=[2]",
        ]
    );
}

/// A layer that writes down the id of each call made, when it starts and at its end.
struct Ids(mpsc::UnboundedSender<String>);

impl Layer for Ids {
    fn on_call(&self, call: &CallInfo<'_>) -> Decision {
        if !call.is_served() {
            let _ = self.0.send(format!("call id={}", call.id().unwrap_or("-")));
        }
        Decision::Continue
    }

    fn on_outcome(&self, call: &CallInfo<'_>, _outcome: &CallOutcome<'_>, _took: Duration) {
        if !call.is_served() {
            let _ = self.0.send(format!("end id={}", call.id().unwrap_or("-")));
        }
    }
}

/// A call made with progress carries a progress token after its id: a layer still
/// sees the id alone, as it went out, when the call starts and at its outcome.
#[tokio::test]
async fn a_layer_sees_the_id_of_a_call_made_with_progress() {
    let ran = Arc::new(AtomicUsize::new(0));
    let (url, _handle) = serve_with(server_router(ran), PeerConfig::default()).await;
    let (tx, mut events) = mpsc::unbounded_channel();
    let config = PeerConfig::default().layer(Ids(tx));
    let peer = within(connect_with_config(&url, client_router(), &config))
        .await
        .unwrap();

    let sum: i64 = within(peer.call("add", [1, 2])).await.unwrap();
    assert_eq!(sum, 3);
    assert_eq!(next(&mut events, 2).await, ["call id=1", "end id=1"]);
    // Params that are not an array or an object fail before any layer sees the call
    // (`CallOutcome::Failed` says so): nothing is written down for it, no id is taken.
    let refused = within(peer.call::<i64>("add", 5)).await.unwrap_err();
    assert!(matches!(refused, Error::InvalidParams(_)), "{refused:?}");
    let (_progress, call) = peer.call::<i64>("add", [3, 4]).with_progress();
    assert_eq!(within(call).await.unwrap(), 7);
    assert_eq!(next(&mut events, 2).await, ["call id=2", "end id=2"]);
    peer.close().await;
}

/// Counts the calls and notifications between their `on_call` and their outcome, in
/// both directions: a gauge of what is in flight.
struct InFlight(Arc<std::sync::atomic::AtomicI64>);

impl Layer for InFlight {
    fn on_call(&self, _call: &CallInfo<'_>) -> Decision {
        self.0.fetch_add(1, Ordering::SeqCst);
        Decision::Continue
    }

    fn on_outcome(&self, _call: &CallInfo<'_>, _outcome: &CallOutcome<'_>, _took: Duration) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Panics in `on_call` for the method `bad`.
struct Faulty;

impl Layer for Faulty {
    fn on_call(&self, call: &CallInfo<'_>) -> Decision {
        if call.method() == "bad" {
            panic!("a layer's bug");
        }
        Decision::Continue
    }
}

/// A layer whose `on_call` panics: the caller is answered -32603 (served), the caller's
/// task sees the panic (made), and the layers before it, whose `on_call` ran, are told
/// the outcome: a gauge they keep of the calls in flight comes back to zero.
#[tokio::test]
async fn the_layers_before_a_panicking_one_see_the_outcome() {
    let served = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let config = PeerConfig::default()
        .layer(InFlight(served.clone()))
        .layer(Faulty);
    let ran = Arc::new(AtomicUsize::new(0));
    let router = server_router(ran).method("bad", |_cx: Context<Arc<AtomicUsize>>, (): ()| async {
        Ok::<_, RpcError>(0)
    });
    let (url, _handle) = serve_with(router, config).await;
    let made = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let config = PeerConfig::default()
        .layer(InFlight(made.clone()))
        .layer(Faulty);
    let peer = within(connect_with_config(&url, client_router(), &config))
        .await
        .unwrap();

    // Served: a raw call, so that the client's own layers do not stop it first.
    let mut raw = common::RawClient::connect(&url).await;
    let answer = raw.ask(r#"{"jsonrpc":"2.0","method":"bad","id":1}"#).await;
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    let answer = raw
        .ask(r#"{"jsonrpc":"2.0","method":"add","params":[1,2],"id":2}"#)
        .await;
    assert_eq!(answer["result"], 3, "{answer}");
    assert_eq!(served.load(Ordering::SeqCst), 0, "calls served in flight");

    // Made: the panic reaches the caller's task.
    let call = tokio::spawn({
        let peer = peer.clone();
        async move { peer.call::<i64>("bad", ()).await }
    });
    assert!(within(call).await.unwrap_err().is_panic());
    let sum: i64 = within(peer.call("add", [1, 2])).await.unwrap();
    assert_eq!(sum, 3);
    assert_eq!(made.load(Ordering::SeqCst), 0, "calls made in flight");
    peer.close().await;
}

/// Panics in `on_outcome`, for every call.
struct FaultyEnd;

impl Layer for FaultyEnd {
    fn on_outcome(&self, _call: &CallInfo<'_>, _outcome: &CallOutcome<'_>, _took: Duration) {
        panic!("a layer's bug at the outcome");
    }
}

/// A layer whose `on_outcome` panics, for a call that succeeds and for one whose
/// handler panics: the process goes on (no panic while one unwinds), the caller gets
/// the handler's answer or -32603, and the layers before it are still told.
#[tokio::test]
async fn a_layer_that_panics_at_the_outcome_stops_neither_the_others_nor_the_process() {
    let counted = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let config = PeerConfig::default()
        .layer(InFlight(counted.clone()))
        .layer(FaultyEnd);
    let router = Router::new()
        .method("add", |_cx: Context, [a, b]: [i64; 2]| async move {
            Ok::<_, RpcError>(a + b)
        })
        .method("boom", |_cx: Context, (): ()| async {
            if true {
                panic!("the handler fails");
            }
            Ok::<_, RpcError>(0)
        });
    let (url, _handle) = serve_with(router, config).await;
    let mut raw = common::RawClient::connect(&url).await;

    let answer = raw
        .ask(r#"{"jsonrpc":"2.0","method":"add","params":[1,2],"id":1}"#)
        .await;
    assert_eq!(answer["result"], 3, "{answer}");
    assert_eq!(counted.load(Ordering::SeqCst), 0, "calls in flight");

    let answer = raw.ask(r#"{"jsonrpc":"2.0","method":"boom","id":2}"#).await;
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert_eq!(counted.load(Ordering::SeqCst), 0, "calls in flight");
}

/// Keeps the message of every warning and error logged on the thread it is set for.
struct Warnings(Arc<std::sync::Mutex<Vec<String>>>);

impl tracing::Subscriber for Warnings {
    fn register_callsite(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }

    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::WARN
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        self.0.lock().unwrap().push(message.0);
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// A notification whose params do not fit its handler is dropped with a warning, with
/// a layer as without one: a layer (the `Metrics` one) does not silence it.
#[tokio::test]
async fn a_layer_does_not_silence_the_warning_of_a_notification_dropped() {
    let warnings = Arc::new(std::sync::Mutex::new(Vec::new()));
    let _logged = tracing::subscriber::set_default(Warnings(warnings.clone()));
    for layered in [false, true] {
        let config = match layered {
            true => PeerConfig::default().layer(Ids(mpsc::unbounded_channel().0)),
            false => PeerConfig::default(),
        };
        let ran = Arc::new(AtomicUsize::new(0));
        let (url, _handle) = serve_with(server_router(ran), config).await;
        let mut raw = common::RawClient::connect(&url).await;
        warnings.lock().unwrap().clear();
        // `note` takes one number; `add` two. Each run as a notification.
        raw.send(r#"{"jsonrpc":"2.0","method":"note","params":["x"]}"#)
            .await;
        raw.send(r#"{"jsonrpc":"2.0","method":"add","params":["x"]}"#)
            .await;
        // Handled in order: once this is answered, both were.
        let answer = raw
            .ask(r#"{"jsonrpc":"2.0","method":"add","params":[1,2],"id":1}"#)
            .await;
        assert_eq!(answer["result"], 3, "{answer}");
        assert_eq!(
            *warnings.lock().unwrap(),
            [
                "notification params do not fit; dropped",
                "notification params do not fit the method; dropped",
            ],
            "layered: {layered}"
        );
    }
}
