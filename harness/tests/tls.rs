//! `wss://` for client and server (feature `rustls`), with a certificate made here.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::within;
use jsonrpc_peer::{
    connect, connect_with_tls, Caller, Context, Error, HandshakePolicy, PeerConfig, Router,
    RpcError, Server,
};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Error as WsError;

/// A self-signed certificate for 127.0.0.1, as a server config and a client config
/// that trusts it.
fn tls_pair() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let cert = certified.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(server), Arc::new(client))
}

#[tokio::test]
async fn calls_and_callbacks_over_wss() {
    let (server_tls, client_tls) = tls_pair();
    let router =
        common::spec_methods::spec_router().method("ask_back", |cx: Context, (): ()| async move {
            cx.peer()
                .call::<String>("whoami", ())
                .await
                .map_err(RpcError::internal_error)
        });
    let server = Server::bind("127.0.0.1:0").await.unwrap().tls(server_tls);
    let port = server.local_addr().unwrap().port();
    tokio::spawn(server.serve(router));

    let client_router = Router::new().method("whoami", |_cx: Context, (): ()| async {
        Ok::<_, RpcError>("a TLS client")
    });
    let url = format!("wss://127.0.0.1:{port}");
    let peer = within(connect_with_tls(
        &url,
        client_router,
        &PeerConfig::default(),
        client_tls,
    ))
    .await
    .unwrap();
    let diff: i64 = within(peer.call("subtract", [42, 23])).await.unwrap();
    assert_eq!(diff, 19);
    let back: String = within(peer.call("ask_back", ())).await.unwrap();
    assert_eq!(back, "a TLS client");
    assert_eq!(peer.remote_addr().map(|a| a.port()), Some(port));
    within(peer.close()).await;

    // Without the certificate in its roots, a client refuses the server: rustls finds
    // no trusted issuer.
    let untrusted = within(connect(&url, Router::new())).await;
    let unknown_issuer = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
    assert!(
        matches!(&untrusted, Err(Error::Transport(_)))
            && causes(untrusted.as_ref().err())
                .any(|e| e.downcast_ref::<rustls::Error>() == Some(&unknown_issuer)),
        "a self-signed certificate must not be trusted by default: {:?}",
        untrusted.err()
    );
    // Plain ws:// to a TLS server fails too, rather than hang: what comes back (a TLS
    // alert, or nothing) is not an HTTP answer.
    let plain = within(connect(&format!("ws://127.0.0.1:{port}"), Router::new())).await;
    let not_http = |e: &(dyn std::error::Error + 'static)| {
        matches!(
            e.downcast_ref::<WsError>(),
            Some(WsError::Protocol(_) | WsError::Http(_) | WsError::HttpFormat(_))
        ) || e
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset)
    };
    assert!(
        matches!(&plain, Err(Error::Transport(_))) && causes(plain.as_ref().err()).any(not_http),
        "ws:// to a wss:// server: {:?}",
        plain.err()
    );
}

/// `error` and its sources, looking inside I/O errors (rustls' errors travel in one).
fn causes<'a>(
    error: Option<&'a Error>,
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    let mut next = error.map(|e| e as &(dyn std::error::Error + 'static));
    std::iter::from_fn(move || {
        let current = next?;
        next = match current.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => current.source(),
        };
        Some(current)
    })
    .take(16)
}

/// What an attacker tries (from tests/hardening.rs): a client that is slow through TLS
/// and then sends no WebSocket request meets one deadline for both steps.
#[tokio::test]
async fn one_deadline_covers_tls_and_the_websocket_handshake() {
    let (server_tls, client_tls) = tls_pair();
    let timeout = Duration::from_secs(2);
    let server = Server::bind("127.0.0.1:0")
        .await
        .unwrap()
        .tls(server_tls)
        .handshake_policy(HandshakePolicy::default().handshake_timeout(timeout));
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.serve(Router::new()));

    // A slow client: it waits 1.4 s before its TLS hello (within the timeout), then
    // sends no WebSocket request. With a deadline per step it would be dropped at
    // 1.4 + 2 = 3.4 s; with one deadline, at 2 s.
    let started = Instant::now();
    let tcp = within(TcpStream::connect(addr)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1400)).await;
    let connector = tokio_rustls::TlsConnector::from(client_tls);
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = within(connector.connect(name, tcp))
        .await
        .expect("the TLS handshake completes within the deadline");
    let tls_done = started.elapsed();
    let mut byte = [0u8; 1];
    let end = within(tls.read(&mut byte)).await;
    let closed_at = started.elapsed();
    assert!(
        matches!(end, Ok(0) | Err(_)),
        "the server sent something: {end:?}"
    );
    // A deadline per step starts its second one when TLS is done, and cannot close
    // before `tls_done + timeout`, however fast or slow the machine; one deadline
    // closes at `timeout`, which leaves the 1.4 s wait as room for a busy machine.
    assert!(
        closed_at >= Duration::from_millis(1900) && closed_at < tls_done + timeout,
        "closed {closed_at:?} after connecting, TLS done at {tls_done:?}; the deadline is \
         {timeout:?} for both steps"
    );
}
