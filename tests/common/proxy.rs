//! A TCP proxy on 127.0.0.1:0 that a test can cut: its connections drop at once, both
//! sides seeing the TCP connection end without a WebSocket close handshake.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

#[derive(Default)]
struct State {
    target: Option<SocketAddr>,
    /// While true, connections are dropped as soon as they are accepted.
    refusing: bool,
    links: Vec<JoinHandle<()>>,
}

/// Forwards every connection to a target; see [`Proxy::cut`].
pub struct Proxy {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// A proxy to `target`.
    pub async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(Mutex::new(State {
            target: Some(target),
            ..State::default()
        }));
        let accept = tokio::spawn({
            let state = state.clone();
            async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    let (target, refusing) = {
                        let s = state.lock().unwrap();
                        (s.target, s.refusing)
                    };
                    let Some(target) = target.filter(|_| !refusing) else {
                        continue; // dropped: the client sees the connection end
                    };
                    let link = tokio::spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(target).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                    let mut s = state.lock().unwrap();
                    s.links.retain(|l| !l.is_finished());
                    s.links.push(link);
                }
            }
        });
        Proxy {
            addr,
            state,
            accept,
        }
    }

    /// `ws://` and the proxy's address.
    pub fn url(&self) -> String {
        format!("ws://{}", self.addr)
    }

    /// Drops every connection now: both sockets close without a close frame.
    pub fn cut(&self) {
        for link in self.state.lock().unwrap().links.drain(..) {
            link.abort();
        }
    }

    /// While `refusing`, new connections are dropped as soon as they are accepted.
    pub fn refuse(&self, refusing: bool) {
        self.state.lock().unwrap().refusing = refusing;
    }

    /// Forwards new connections to `target` from now on.
    pub fn retarget(&self, target: SocketAddr) {
        self.state.lock().unwrap().target = Some(target);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
