//! The WebSocket opening handshake (RFC 6455 section 4.2) on a raw stream: read the
//! HTTP request head within a size bound, check it, and answer with `101` or with an
//! HTTP error. Every request the server will not upgrade gets an answer: a client (or
//! curl) sees why, not an empty reply.
//!
//! The checks are shared with the axum endpoint, where hyper has read the request.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::http::{
    header, HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Version,
};

/// Headers a request may have; more is `431`. Browsers send about 15.
const MAX_HEADERS: usize = 64;

/// An HTTP answer other than `101`: status, extra headers, a short text body.
#[derive(Debug)]
pub(crate) struct Rejection {
    pub(crate) status: StatusCode,
    pub(crate) headers: Vec<(HeaderName, &'static str)>,
    pub(crate) body: String,
}

impl Rejection {
    pub(crate) fn new(status: StatusCode, body: impl Into<String>) -> Self {
        Rejection {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    fn with(mut self, name: HeaderName, value: &'static str) -> Self {
        self.headers.push((name, value));
        self
    }

    /// The whole response as bytes: the connection closes after it.
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            self.body.len()
        );
        for (name, value) in &self.headers {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        out.push_str("\r\n");
        out.push_str(&self.body);
        out.into_bytes()
    }
}

/// Checks an opening handshake (RFC 6455 4.2.1); returns the `Sec-WebSocket-Accept`
/// value, or the HTTP error to answer with.
pub(crate) fn check(
    method: &Method,
    version: Version,
    headers: &HeaderMap,
) -> Result<HeaderValue, Rejection> {
    let has_token = |name: header::HeaderName, token: &str| {
        headers.get_all(name).iter().any(|v| {
            v.to_str()
                .map(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
                .unwrap_or(false)
        })
    };
    if method != Method::GET {
        return Err(Rejection::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "a WebSocket handshake is a GET",
        )
        .with(header::ALLOW, "GET"));
    }
    if version < Version::HTTP_11 {
        return Err(Rejection::new(
            StatusCode::BAD_REQUEST,
            "a WebSocket handshake needs HTTP/1.1",
        ));
    }
    if !has_token(header::CONNECTION, "upgrade") || !has_token(header::UPGRADE, "websocket") {
        // RFC 9110 15.5.22: a 426 names the protocol to upgrade to.
        return Err(Rejection::new(
            StatusCode::UPGRADE_REQUIRED,
            "this endpoint speaks JSON-RPC over WebSocket",
        )
        .with(header::UPGRADE, "websocket"));
    }
    match headers.get(header::SEC_WEBSOCKET_VERSION) {
        Some(v) if v.as_bytes() == b"13" => {}
        // RFC 6455 4.4: name the versions this server speaks.
        Some(_) => {
            return Err(Rejection::new(
                StatusCode::UPGRADE_REQUIRED,
                "unsupported WebSocket version",
            )
            .with(header::SEC_WEBSOCKET_VERSION, "13"))
        }
        None => {
            return Err(
                Rejection::new(StatusCode::BAD_REQUEST, "missing Sec-WebSocket-Version")
                    .with(header::SEC_WEBSOCKET_VERSION, "13"),
            )
        }
    }
    let mut keys = headers.get_all(header::SEC_WEBSOCKET_KEY).iter();
    let key = match (keys.next(), keys.next()) {
        (Some(key), None) if is_valid_key(key.as_bytes()) => key,
        (None, _) => {
            return Err(Rejection::new(
                StatusCode::BAD_REQUEST,
                "missing Sec-WebSocket-Key",
            ))
        }
        _ => {
            return Err(Rejection::new(
                StatusCode::BAD_REQUEST,
                "malformed Sec-WebSocket-Key",
            ))
        }
    };
    HeaderValue::from_str(&derive_accept_key(key.as_bytes()))
        .map_err(|_| Rejection::new(StatusCode::INTERNAL_SERVER_ERROR, "accept key"))
}

/// RFC 6455 4.1: the key is 16 random bytes in base64, which is always 22 symbols and
/// `==`; the last symbol carries 2 bits, so the 4 unused ones must be zero.
fn is_valid_key(key: &[u8]) -> bool {
    let symbol = |c: &u8| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/';
    key.len() == 24
        && key[..22].iter().all(symbol)
        && &key[22..] == b"=="
        && matches!(key[21], b'A' | b'Q' | b'g' | b'w')
}

/// What reading a request head gave.
pub(crate) enum Head {
    /// A parsed request, and the bytes that came after its head (frames a client
    /// sent without waiting for the answer).
    Request(Request<()>, Vec<u8>),
    /// The client closed before the head was complete: nobody to answer.
    Gone,
    /// Not a request this server can read: answer this.
    Bad(Rejection),
}

/// Reads one HTTP request head of at most `max_bytes`.
pub(crate) async fn read_head<IO: AsyncRead + Unpin>(io: &mut IO, max_bytes: usize) -> Head {
    let mut buf = Vec::with_capacity(1024.min(max_bytes));
    let mut chunk = [0u8; 1024];
    loop {
        let n = match io.read(&mut chunk).await {
            Ok(0) | Err(_) => return Head::Gone,
            Ok(n) => n,
        };
        let searched = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        // Parse only once the blank line is in: a client that sends one byte at a time
        // costs one scan of the new bytes, not a parse of the whole head each time.
        let end = buf[searched..]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|at| searched + at + 4);
        match end {
            Some(end) if end <= max_bytes => {
                let tail = buf.split_off(end);
                return match parse(&buf) {
                    Ok(request) => Head::Request(request, tail),
                    Err(rejection) => Head::Bad(rejection),
                };
            }
            _ if buf.len() >= max_bytes => {
                return Head::Bad(Rejection::new(
                    StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                    "request head too large",
                ))
            }
            _ => {}
        }
    }
}

fn parse(head: &[u8]) -> Result<Request<()>, Rejection> {
    let bad = || Rejection::new(StatusCode::BAD_REQUEST, "malformed HTTP request");
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut slots);
    match parsed.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(bad()),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Rejection::new(
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "too many headers",
            ))
        }
        Err(_) => return Err(bad()),
    }
    let method =
        Method::from_bytes(parsed.method.unwrap_or_default().as_bytes()).map_err(|_| bad())?;
    let version = match parsed.version {
        Some(1) => Version::HTTP_11,
        _ => Version::HTTP_10,
    };
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.version_mut() = version;
    *request.uri_mut() = parsed.path.unwrap_or_default().parse().map_err(|_| bad())?;
    let headers = request.headers_mut();
    for h in parsed.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| bad())?;
        let value = HeaderValue::from_bytes(h.value).map_err(|_| bad())?;
        headers.append(name, value);
    }
    Ok(request)
}

/// Answers with `rejection` and closes: the write side first, then whatever the client
/// still sends is read and dropped (briefly), so the answer is not lost to a reset.
pub(crate) async fn reject<IO: AsyncRead + AsyncWrite + Unpin>(io: &mut IO, rejection: &Rejection) {
    if io.write_all(&rejection.to_bytes()).await.is_err() {
        return;
    }
    let _ = io.flush().await;
    let _ = io.shutdown().await;
    let drain = async {
        let mut sink = [0u8; 1024];
        for _ in 0..64 {
            match io.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), drain).await;
}

/// Writes the `101 Switching Protocols` answer.
pub(crate) async fn switch<IO: AsyncWrite + Unpin>(
    io: &mut IO,
    accept: &HeaderValue,
) -> std::io::Result<()> {
    let mut out = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ".to_vec();
    out.extend_from_slice(accept.as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
    io.write_all(&out).await?;
    io.flush().await
}

/// The connections still in their handshake, at most `max` at once. When a new one
/// would exceed the bound, the oldest is dropped once it is `grace` old: a client
/// that completes its handshake takes milliseconds, so connections that send nothing
/// (a slowloris) make room for real clients instead of locking them out. A younger
/// oldest is not dropped: in a herd (every client of a restarted server at once) the
/// handshakes under way are real clients the server has not served yet, and dropping
/// them only makes them dial again. The newcomer waits for one to end instead (and
/// the server accepts no more meanwhile: the rest wait in the listen queue).
#[derive(Debug)]
pub(crate) struct Handshakes {
    max: usize,
    grace: Duration,
    table: Mutex<Table>,
    /// Notified when a handshake ends, for a newcomer waiting for room.
    ended: Notify,
}

#[derive(Debug, Default)]
struct Table {
    next: u64,
    /// Oldest first, with when each began; dropping a sender tells that handshake to
    /// give up.
    live: BTreeMap<u64, (Instant, oneshot::Sender<()>)>,
}

impl Table {
    /// A new handshake, begun at `now`: its id and its end of the eviction channel.
    fn insert(&mut self, now: Instant) -> (u64, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let id = self.next;
        self.next += 1;
        self.live.insert(id, (now, tx));
        (id, rx)
    }
}

impl Handshakes {
    pub(crate) fn new(max: usize, grace: Duration) -> Arc<Self> {
        Arc::new(Handshakes {
            max: max.max(1),
            grace,
            table: Mutex::new(Table::default()),
            ended: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        crate::sync::lock(&self.table)
    }

    /// Registers a new handshake. At the bound, the oldest makes room once it is
    /// `grace` old; until then this waits for a handshake to end.
    pub(crate) async fn enter(self: &Arc<Self>) -> Ticket {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            // Registered before looking, so a handshake ending in between is seen.
            ended.as_mut().enable();
            let oldest = match self.try_enter() {
                Ok(ticket) => return ticket,
                Err(oldest) => oldest,
            };
            tokio::select! {
                () = &mut ended => {}
                // A grace of `Duration::MAX` (never evict) waits far away, not a panic.
                () = tokio::time::sleep_until(crate::deadline::from(oldest, self.grace)) => {}
            }
        }
    }

    /// A ticket if there is room, made by dropping handshakes at least `grace` old if
    /// needed; else when the oldest began.
    pub(crate) fn try_enter(self: &Arc<Self>) -> Result<Ticket, Instant> {
        let now = Instant::now();
        let mut table = self.lock();
        while table.live.len() >= self.max {
            match table.live.first_key_value() {
                Some((_, &(began, _))) if now.saturating_duration_since(began) < self.grace => {
                    return Err(began);
                }
                Some(_) => {
                    table.live.pop_first();
                }
                None => break,
            }
        }
        let (id, evicted) = table.insert(now);
        Ok(Ticket {
            id,
            evicted,
            owner: self.clone(),
        })
    }

    /// How many handshakes are in progress.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().live.len()
    }
}

/// One connection's place among those in handshake; dropping it frees the place.
#[derive(Debug)]
pub(crate) struct Ticket {
    id: u64,
    evicted: oneshot::Receiver<()>,
    owner: Arc<Handshakes>,
}

impl Ticket {
    /// Runs `fut` until it ends, or until this handshake is evicted (`None`).
    pub(crate) async fn run<F: std::future::Future>(&mut self, fut: F) -> Option<F::Output> {
        tokio::select! {
            out = fut => Some(out),
            _ = &mut self.evicted => None,
        }
    }

    /// This place, for a handshake that starts now: it stays taken (no newcomer slips
    /// in between) and its age starts again. `None` if it was evicted meanwhile (a
    /// newer handshake has it).
    pub(crate) fn pass(mut self) -> Option<Ticket> {
        let owner = self.owner.clone();
        let mut table = owner.lock();
        // Dropped (below, or on return) with its place already taken out: no notice.
        table.live.remove(&self.id)?;
        (self.id, self.evicted) = table.insert(Instant::now());
        drop(table);
        Some(self)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let ended = self.owner.lock().live.remove(&self.id).is_some();
        if ended {
            self.owner.ended.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_16_bytes_of_base64() {
        assert!(is_valid_key(b"dGhlIHNhbXBsZSBub25jZQ=="));
        assert!(!is_valid_key(b""));
        assert!(!is_valid_key(b"dGhlIHNhbXBsZSBub25jZQ"));
        assert!(
            !is_valid_key(b"dGhlIHNhbXBsZSBub25jZR=="),
            "unused bits set"
        );
        assert!(!is_valid_key(b"dGhlIHNhbXBsZSBub25j!Q=="));
        assert!(!is_valid_key(b"AAAAAAAAAAAAAAAAAAAAAAAA"), "18 bytes");
    }

    /// At the bound, the oldest handshake is dropped for a newcomer once it is
    /// `grace` old, not before.
    #[tokio::test(start_paused = true)]
    async fn the_oldest_handshake_makes_room_once_past_its_grace() {
        let grace = Duration::from_secs(2);
        let handshakes = Handshakes::new(2, grace);
        let start = Instant::now();
        let mut first = handshakes.enter().await;
        let _second = handshakes.enter().await;
        let _third = handshakes.enter().await;
        assert_eq!(
            Instant::now(),
            start + grace,
            "the newcomer waited the grace"
        );
        assert_eq!(handshakes.len(), 2);
        assert_eq!(first.run(std::future::pending::<()>()).await, None);
        drop(first);
        assert_eq!(handshakes.len(), 2, "an evicted ticket frees nothing twice");
    }

    /// A handshake that ends lets a waiting newcomer in at once, and nobody is dropped.
    #[tokio::test(start_paused = true)]
    async fn a_handshake_that_ends_lets_the_newcomer_in() {
        let handshakes = Handshakes::new(2, Duration::from_secs(2));
        let start = Instant::now();
        let mut first = handshakes.enter().await;
        let second = handshakes.enter().await;
        let waiting = tokio::spawn({
            let handshakes = handshakes.clone();
            async move { handshakes.enter().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(second);
        let _third = tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("let in")
            .expect("not panicked");
        assert_eq!(Instant::now(), start);
        assert_eq!(handshakes.len(), 2);
        let still_running = tokio::time::timeout(
            Duration::from_millis(10),
            first.run(std::future::pending::<()>()),
        )
        .await;
        assert!(still_running.is_err(), "the first was not evicted");
    }

    /// A place passed to the next handshake stays taken, with no room for a newcomer
    /// in between, and its age starts again; an evicted ticket has no place to pass.
    #[tokio::test(start_paused = true)]
    async fn a_passed_place_stays_taken_and_starts_young() {
        let grace = Duration::from_secs(2);
        let handshakes = Handshakes::new(1, grace);
        let first = handshakes.enter().await;
        tokio::time::advance(grace).await;
        let passed = first.pass().expect("not evicted");
        assert_eq!(handshakes.len(), 1);
        assert!(
            handshakes.try_enter().is_err(),
            "no newcomer takes a passed place that is not grace old"
        );
        // Past the grace, a newcomer evicts it after all: it has nothing to pass.
        tokio::time::advance(grace).await;
        let _newcomer = handshakes.try_enter().expect("the passed place made room");
        assert!(passed.pass().is_none());
        assert_eq!(handshakes.len(), 1);
    }
}
