//! A real `redis-server` for a test: on a unix socket in a temp dir of its own (no port
//! to race for), killed when dropped. Needs the Debian `redis-server` (`.ci/install`).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running Redis; stops (SIGKILL) on drop and removes its directory.
pub struct RedisServer {
    dir: PathBuf,
    child: Option<Child>,
    /// Listening on 127.0.0.1 at this port instead of the unix socket.
    port: Option<u16>,
}

impl RedisServer {
    /// Starts one in a fresh temp dir and waits (at most 10 s) until it answers PING.
    pub fn start() -> RedisServer {
        let dir = std::env::temp_dir().join(format!(
            "jp-redis-{}-{:016x}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).expect("create the redis temp dir");
        let mut server = RedisServer {
            dir,
            child: None,
            port: None,
        };
        server.restart();
        server
    }

    /// One on a free loopback TCP port instead (as a Redis on another machine is
    /// reached): `redis://127.0.0.1:PORT`.
    pub fn start_tcp() -> RedisServer {
        for _ in 0..20 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let mut server = RedisServer::start();
            server.kill();
            server.port = Some(port);
            server.launch();
            if server.child.is_some() {
                return server;
            }
        }
        panic!("no free port for redis-server in 20 tries");
    }

    /// The socket path.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("r.sock")
    }

    /// `redis+unix:///…/r.sock` (or `redis://127.0.0.1:PORT`), as the redis crate
    /// dials it.
    pub fn url(&self) -> String {
        match self.port {
            Some(port) => format!("redis://127.0.0.1:{port}"),
            None => format!("redis+unix://{}", self.socket().display()),
        }
    }

    /// The server's process id (to freeze it with SIGSTOP, say).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server (SIGKILL, no goodbye to clients) and waits until it is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(self.socket());
    }

    /// Starts the server (again) on the same socket; waits until it answers PING.
    pub fn restart(&mut self) {
        self.kill();
        assert!(self.launch(), "redis-server did not start");
    }

    /// Starts the server; false when it exits at once (its port taken).
    fn launch(&mut self) -> bool {
        let mut command = Command::new("redis-server");
        match self.port {
            Some(port) => command.args(["--bind", "127.0.0.1", "--port", &port.to_string()]),
            None => command
                .args(["--port", "0", "--unixsocket"])
                .arg(self.socket()),
        };
        let child = command
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run redis-server (apt-get install redis-server; .ci/install does)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        let answers = |s: &Self| match s.port {
            Some(_) => s.cli(&["PING"]) == "PONG",
            None => ping(&s.socket()),
        };
        while !answers(self) {
            let exited = self
                .child
                .as_mut()
                .is_some_and(|c| c.try_wait().ok().flatten().is_some());
            if exited {
                self.child = None;
                return false;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not answer PING in 10 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// Sends SIGSTOP (`freeze`) or SIGCONT to the server.
    pub fn signal(&self, name: &str) {
        let pid = self.pid().expect("redis-server is running");
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} {pid} failed");
    }

    /// Runs one command through `redis-cli` on the socket and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let mut command = Command::new("redis-cli");
        match self.port {
            Some(port) => command.args(["-h", "127.0.0.1", "-p", &port.to_string()]),
            None => command.arg("-s").arg(self.socket()),
        };
        let out = command.args(args).output().expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // SIGKILL ends a stopped (SIGSTOP'd) server too.
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether a Redis answers PING on `socket` within 500 ms.
fn ping(socket: &Path) -> bool {
    let Ok(mut stream) = UnixStream::connect(socket) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = stream.set_write_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    stream.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}
