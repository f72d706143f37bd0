//! The publishing connection: redis-rs's `ConnectionManager`, dialed anew when it is
//! stuck.
//!
//! The manager redials in the background after an I/O error, with a retry or two. A
//! redial that Redis answers with an error instead (`NOAUTH` while a password is being
//! changed, `ERR max number of clients reached`) is kept as its connection for good: it
//! dials again only after I/O errors, so every command fails from then on, though
//! Redis serves again (redis-rs 0.32, `aio/connection_manager.rs`,
//! `reconnect_if_io_error!`). Here a command that fails with a reply error is followed
//! by a `PING` on the same manager; when that fails too, the manager is stuck and a new
//! one is dialed (at most once per [`REDIAL_EVERY`]), and the command is sent again on
//! it: it never reached Redis.
//!
//! The manager's own `Reconnecting failed: ...` (an I/O error of its redial, kept
//! until the next command starts another) also says that the command was not sent:
//! it is sent once more, on the connection that command's failure started.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};

use crate::sync::lock;

/// The least time between two redials of a stuck manager.
pub(super) const REDIAL_EVERY: Duration = Duration::from_secs(1);

/// A `ConnectionManager` that is replaced when it is stuck; cheap to clone (all clones
/// share the current manager).
#[derive(Clone)]
pub(super) struct Publisher(Arc<Inner>);

struct Inner {
    client: Client,
    config: ConnectionManagerConfig,
    /// The manager, with a generation that counts its replacements.
    current: Mutex<(u64, ConnectionManager)>,
    /// One redial at a time; when the last began.
    redial: tokio::sync::Mutex<Option<Instant>>,
}

impl Publisher {
    /// Dials the first manager.
    pub(super) async fn connect(
        client: Client,
        config: ConnectionManagerConfig,
    ) -> RedisResult<Self> {
        let manager = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
        Ok(Publisher(Arc::new(Inner {
            client,
            config,
            current: Mutex::new((0, manager)),
            redial: tokio::sync::Mutex::new(None),
        })))
    }

    fn current(&self) -> (u64, ConnectionManager) {
        let current = lock(&self.0.current);
        (current.0, current.1.clone())
    }

    /// After a command failed with `e` on the manager of generation `generation`:
    /// whether it was not sent and may be sent again (on the manager now current).
    async fn recover(
        &self,
        generation: u64,
        manager: &mut ConnectionManager,
        e: &RedisError,
    ) -> bool {
        if e.is_io_error() {
            // The manager's kept redial failure: the command never left. Any other
            // I/O error may have come after Redis ran it.
            return e.to_string().starts_with("Reconnecting failed");
        }
        if e.is_unrecoverable_error() || e.is_timeout() {
            return false; // the manager dials again by itself; the caller decides
        }
        // A reply error: the command's own (WRONGTYPE, NOPERM...), or a failed redial
        // the manager kept. A PING tells them apart.
        match manager.send_packed_command(&redis::cmd("PING")).await {
            Ok(_) => false,
            Err(ping) if ping.is_io_error() || ping.is_unrecoverable_error() => false,
            Err(_) => self.redial(generation).await,
        }
    }

    /// Replaces the manager of `generation` with a new one; whether the manager is
    /// now another (dialed here, or by a command that found it stuck first).
    async fn redial(&self, generation: u64) -> bool {
        let mut last = self.0.redial.lock().await;
        if self.current().0 != generation {
            return true;
        }
        if last.is_some_and(|at| at.elapsed() < REDIAL_EVERY) {
            return false;
        }
        *last = Some(Instant::now());
        match ConnectionManager::new_with_config(self.0.client.clone(), self.0.config.clone()).await
        {
            Ok(manager) => {
                tracing::info!("redis backplane: the publishing connection was stuck; dialed anew");
                *lock(&self.0.current) = (generation + 1, manager);
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "redis backplane: dialing the publishing connection failed");
                false
            }
        }
    }
}

impl ConnectionLike for Publisher {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (generation, mut manager) = self.current();
            match manager.send_packed_command(cmd).await {
                Err(e) if self.recover(generation, &mut manager, &e).await => {
                    self.current().1.send_packed_command(cmd).await
                }
                result => result,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (generation, mut manager) = self.current();
            match manager.send_packed_commands(cmd, offset, count).await {
                Err(e) if self.recover(generation, &mut manager, &e).await => {
                    self.current()
                        .1
                        .send_packed_commands(cmd, offset, count)
                        .await
                }
                result => result,
            }
        })
    }

    fn get_db(&self) -> i64 {
        self.current().1.get_db()
    }
}
