//! `wss://` for client and server (feature `rustls`), with a certificate made here.

mod common;

use std::sync::Arc;

use common::within;
use jsonrpc_peer::{connect, connect_with_tls, Context, PeerConfig, Router, RpcError, Server};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

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
                .map_err(|e| RpcError::internal_error().with_data(e.to_string()))
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

    // Without the certificate in its roots, a client refuses the server.
    let untrusted = within(connect(&url, Router::new())).await;
    assert!(
        untrusted.is_err(),
        "a self-signed certificate must not be trusted by default"
    );
    // Plain ws:// to a TLS server fails too, rather than hang.
    let plain = within(connect(&format!("ws://127.0.0.1:{port}"), Router::new())).await;
    assert!(plain.is_err());
}
