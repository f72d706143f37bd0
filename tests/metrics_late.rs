//! Metrics turned on while connections run: what was not counted going up is not
//! counted coming down, so no gauge ends below zero. A test binary of its own: the
//! switch is process-wide, and here it must come on after the connection starts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jsonrpc_peer::metrics::{names, Metrics};
use jsonrpc_peer::transport::pair_with_capacity;
use jsonrpc_peer::{Caller, Peer, PeerConfig, Router};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};

/// Keeps the gauges by name; counters and histograms are not looked at here.
#[derive(Default)]
struct Gauges(Mutex<HashMap<String, Arc<AtomicU64>>>);

impl metrics::Recorder for Gauges {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let mut gauges = self.0.lock().unwrap();
        Gauge::from_arc(gauges.entry(key.name().to_owned()).or_default().clone())
    }
}

impl Gauges {
    fn get(&self, name: &str) -> f64 {
        let gauges = self.0.lock().unwrap();
        gauges
            .get(name)
            .map_or(0.0, |g| f64::from_bits(g.load(Ordering::SeqCst)))
    }
}

#[tokio::test(start_paused = true)]
async fn gauges_stay_true_when_metrics_come_on_while_a_connection_runs() {
    let gauges: &'static Gauges = Box::leak(Box::default());
    metrics::set_global_recorder(gauges).expect("the only recorder");

    // A connection whose other end reads nothing: one frame in the link, the rest
    // in the outgoing queue. All before metrics are on.
    let (ours, _theirs) = pair_with_capacity(1);
    let peer = Peer::start(ours, Router::new(), &PeerConfig::default());
    for i in 0..4 {
        peer.notify("n", [i]).await.unwrap();
    }
    let _metrics = Metrics::new();
    assert_eq!(gauges.get(names::CONNECTIONS_OPEN), 0.0);
    assert_eq!(gauges.get(names::OUTGOING_QUEUE_BYTES), 0.0);

    // It ends: the close handshake times out (nothing reads it), what is queued is
    // dropped, the task ends. Paused time runs all of it.
    peer.close().await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    eprintln!(
        "GAUGES {:?}",
        gauges
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), f64::from_bits(v.load(Ordering::SeqCst))))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        gauges.get(names::CONNECTIONS_OPEN),
        0.0,
        "counted down, never up"
    );
    assert_eq!(gauges.get(names::OUTGOING_QUEUE_BYTES), 0.0, "likewise");
}
