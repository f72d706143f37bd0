//! Run with `cargo run --example pair`. Two Rust peers in one process, on 127.0.0.1
//! port 0, calling each other (one call made from inside a handler, back to the side
//! that called) and notifying each other. Prints the exchange and exits 0.

use jsonrpc_peer::{connect, Context, Router, RpcError, Server};
use tokio::sync::mpsc;

type Log = mpsc::UnboundedSender<String>;

/// Both sides serve the same methods; `name` tells them apart in the output.
fn router(name: &'static str, log: Log) -> Router<(&'static str, Log)> {
    Router::with_state((name, log))
        .method(
            "greet",
            |cx: Context<(&'static str, Log)>, (who,): (String,)| async move {
                Ok::<_, RpcError>(format!("hello {who}, this is {}", cx.state().0))
            },
        )
        // Answering needs the caller's help: call it back before answering.
        .method(
            "describe_yourself",
            |cx: Context<(&'static str, Log)>, (): ()| async move {
                let (name, log) = cx.state();
                let _ = log.send(format!(
                    "{name}: asked to describe myself; first asking who is calling"
                ));
                let caller: String = cx
                    .peer()
                    .call("greet", (*name,))
                    .await
                    .map_err(|e| RpcError::internal_error().with_data(e.to_string()))?;
                Ok::<_, RpcError>(format!("I am {name}; you told me \"{caller}\""))
            },
        )
        .notification(
            "news",
            |cx: Context<(&'static str, Log)>, (text,): (String,)| async move {
                let (name, log) = cx.state();
                let _ = log.send(format!("{name}: got news \"{text}\""));
            },
        )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (log, mut lines) = mpsc::unbounded_channel();

    let server = Server::bind("127.0.0.1:0").await?;
    let url = format!("ws://{}", server.local_addr()?);
    let handle = server.handle();
    let serving = tokio::spawn(server.serve(router("alice", log.clone())));
    println!("alice listens on {url}");

    let bob = connect(&url, router("bob", log.clone())).await?;
    let answer: String = bob.call("greet", ("bob",)).await?;
    println!("bob -> alice greet: {answer}");

    // Alice's handler calls bob back before it answers bob's call.
    let answer: String = bob.call("describe_yourself", ()).await?;
    println!("bob -> alice describe_yourself: {answer}");

    // Now alice calls bob: the sides are equal.
    let alice = handle.peers().pop().ok_or("alice has no connection")?;
    let answer: String = alice.call("describe_yourself", ()).await?;
    println!("alice -> bob describe_yourself: {answer}");

    bob.notify("news", ("bob says hi",)).await?;
    alice.notify("news", ("alice says hi",)).await?;
    // Each side's notification is handled before it answers this call... on its own
    // queue, so wait for both log lines instead.
    let mut news = 0;
    while news < 2 {
        let line = lines.recv().await.ok_or("log closed")?;
        news += usize::from(line.contains("got news"));
        println!("{line}");
    }

    bob.close().await;
    handle.shutdown().await;
    serving.await??;
    println!("closed");
    Ok(())
}
