//! Run with `cargo run --example interop_server -- --listen 127.0.0.1:9100` (the default
//! address; port 0 picks a free one). A server for foreign clients such as the plain
//! browser page `tests/interop/browser/plain.html`: the specification's `subtract`,
//! `sum` and `get_data`, plus `ask_page`, which calls the caller back. The first line
//! on stdout is `listening on ws://HOST:PORT`.

#[path = "common/cli.rs"]
mod cli;
#[path = "common/spec_methods.rs"]
mod spec_methods;

use std::io::Write;
use std::time::Duration;

use jsonrpc_peer::{Caller, Context, Error, Router, RpcError};
use serde_json::{json, Value};

/// The longest `ask_page` waits for the caller to answer its call back.
const CALL_BACK_LIMIT: Duration = Duration::from_secs(5);

/// `ask_page`'s params: the text to send, and which of the caller's methods to call
/// with it (`page.echo` unless said).
#[derive(serde::Deserialize)]
struct Ask {
    text: Value,
    #[serde(default)]
    method: Option<String>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = cli::Args::parse("127.0.0.1:9100", &[])?;
    let router = spec_methods::with_spec_methods(Router::new())
        // While the caller's call waits, call the caller back (`page.echo` with the
        // text) and answer with what it said, result or error object: a call from the
        // server to the client, answered by the client.
        .method("ask_page", |cx: Context, p: Ask| async move {
            let method = p.method.unwrap_or_else(|| "page.echo".to_owned());
            let outcome = cx
                .peer()
                .call::<Value>(&method, json!({"text": p.text}))
                .timeout(CALL_BACK_LIMIT)
                .await;
            match outcome {
                Ok(answer) => Ok(json!({"asked": method, "answer": answer})),
                Err(Error::Rpc { error, .. }) => Ok(json!({"asked": method, "error": error})),
                Err(e) => Err(RpcError::new(1, "the call back failed")
                    .with_data(json!({"asked": method, "error": e.to_string()}))),
            }
        });
    let server = jsonrpc_peer::Server::bind(args.listen.as_str()).await?;
    println!("listening on ws://{}", server.local_addr()?);
    // Tools start this example and read the line above: make sure it leaves now.
    std::io::stdout().flush()?;
    server.serve(router).await?;
    Ok(())
}
