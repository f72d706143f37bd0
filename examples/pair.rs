//! Run with `cargo run --example pair`. Two Rust peers in one process, on 127.0.0.1
//! port 0, calling each other (one call made from inside a handler, back to the side
//! that called) and notifying each other. Prints the exchange and exits 0.
//!
//! Both sides serve and call the same contract types (`Greet`, `DescribeYourself`,
//! `News`), so every call and handler is typed by one definition.

use jsonrpc_peer::{connect, Caller, Router, RpcError, Server};
use tokio::sync::mpsc;

type Log = mpsc::UnboundedSender<String>;

jsonrpc_peer::method!(
    /// A greeting for the one named.
    Greet = "greet", (String,) => String
);
jsonrpc_peer::method!(
    /// Who the side is, after asking the caller who it is.
    DescribeYourself = "describe_yourself", () => String
);
jsonrpc_peer::notification!(
    /// A line of news; never answered.
    News = "news", (String,)
);

/// Both sides serve the same methods; `name` tells them apart in the output.
fn router(name: &'static str, log: Log) -> Router<(&'static str, Log)> {
    Router::with_state((name, log))
        .handle(Greet, |cx, (who,)| async move {
            Ok(format!("hello {who}, this is {}", cx.state().0))
        })
        // Answering needs the caller's help: call it back before answering.
        .handle(DescribeYourself, |cx, ()| async move {
            let (name, log) = cx.state();
            let _ = log.send(format!(
                "{name}: asked to describe myself; first asking who is calling"
            ));
            let caller = cx
                .peer()
                .request(Greet, &(name.to_string(),))
                .await
                .map_err(RpcError::internal_error)?;
            Ok(format!("I am {name}; you told me \"{caller}\""))
        })
        .on(News, |cx, (text,)| async move {
            let (name, log) = cx.state();
            let _ = log.send(format!("{name}: got news \"{text}\""));
        })
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
    let answer = bob.request(Greet, &("bob".into(),)).await?;
    println!("bob -> alice greet: {answer}");

    // Alice's handler calls bob back before it answers bob's call.
    let answer = bob.request(DescribeYourself, &()).await?;
    println!("bob -> alice describe_yourself: {answer}");

    // Now alice calls bob: the sides are equal.
    let alice = handle.peers().pop().ok_or("alice has no connection")?;
    let answer = alice.request(DescribeYourself, &()).await?;
    println!("alice -> bob describe_yourself: {answer}");

    bob.send(News, &("bob says hi".into(),)).await?;
    alice.send(News, &("alice says hi".into(),)).await?;
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
