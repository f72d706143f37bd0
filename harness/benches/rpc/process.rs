//! Process setup (threads, pinning to one CPU, file descriptors) and (f)'s child server
//! process.

use jsonrpc_peer::Server;
use std::io::{BufRead, BufReader, Write as _};
use std::process::{Command, Stdio};
use tokio::runtime::Handle;

use crate::raw::RawServer;
use crate::servers::ours_router;
use crate::{CPU_ENV, PINNED_ENV};

/// The server's current-thread runtime, on its own OS thread.
pub(crate) struct ServerThread {
    pub(crate) handle: Handle,
    pub(crate) stop: tokio::sync::oneshot::Sender<()>,
    pub(crate) thread: std::thread::JoinHandle<()>,
}

impl ServerThread {
    pub(crate) fn start() -> ServerThread {
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("bench-server".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("server runtime");
                handle_tx.send(rt.handle().clone()).expect("main waits");
                rt.block_on(async {
                    let _ = stopped.await;
                });
            })
            .expect("server thread");
        ServerThread {
            handle: handle_rx.recv().expect("server runtime handle"),
            stop,
            thread,
        }
    }

    pub(crate) fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// Re-executes this binary under `taskset -c N` unless that is already done (or
/// `RPC_BENCH_CPU=none`). Returns only in the process that runs the bench.
pub(crate) fn pin_to_one_cpu(args: &[String]) {
    if std::env::var_os(PINNED_ENV).is_some() {
        return;
    }
    let cpu = match std::env::var(CPU_ENV) {
        Ok(cpu) if cpu == "none" => return,
        Ok(cpu) => cpu,
        Err(_) => {
            let allowed = allowed_cpus();
            let last = allowed.rsplit([',', '-']).next().unwrap_or("0");
            last.trim().to_owned()
        }
    };
    // taskset may be missing, or not allowed to pin here: then run unpinned.
    let usable = Command::new("taskset")
        .args(["-c", &cpu, "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !usable {
        eprintln!("taskset -c {cpu} does not work here; running unpinned");
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    let status = Command::new("taskset")
        .arg("-c")
        .arg(&cpu)
        .arg(exe)
        .args(args)
        .env(PINNED_ENV, &cpu)
        .status();
    match status {
        Ok(status) => std::process::exit(status.code().unwrap_or(1)),
        Err(e) => eprintln!("taskset unavailable ({e}); running unpinned"),
    }
}

/// The CPUs this process may run on, as the kernel lists them (`1`, `0-1`).
pub(crate) fn allowed_cpus() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_owned())
        })
        .unwrap_or_else(|| "?".to_owned())
}

/// The soft and hard limits on open files.
pub(crate) fn nofile_limit() -> Option<(u64, u64)> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut numbers = line["Max open files".len()..]
        .split_whitespace()
        .map(|v| v.parse::<u64>().unwrap_or(u64::MAX));
    Some((numbers.next()?, numbers.next()?))
}

/// Raises the soft open-files limit to the hard one with `prlimit`, when the soft
/// one is too low for (f); children (the pinned re-execution, the child servers)
/// inherit it.
pub(crate) fn raise_nofile_limit() {
    let Some((soft, hard)) = nofile_limit() else {
        return;
    };
    if soft >= 12_000 || soft >= hard {
        return;
    }
    let hard = if hard == u64::MAX {
        "unlimited".to_owned()
    } else {
        hard.to_string()
    };
    let _ = Command::new("prlimit")
        .arg("--pid")
        .arg(std::process::id().to_string())
        .arg(format!("--nofile={hard}:{hard}"))
        .status();
}

/// A server in a child process, asked questions over its stdin.
pub(crate) struct ChildServer {
    pub(crate) child: std::process::Child,
    pub(crate) stdout: BufReader<std::process::ChildStdout>,
    pub(crate) port: u16,
}

impl ChildServer {
    pub(crate) fn spawn(kind: &str) -> ChildServer {
        let mut child = Command::new(std::env::current_exe().expect("own path"))
            .arg("--child-server")
            .arg(kind)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("child server");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("child's port");
        let port = line.trim().parse().expect("a port number");
        ChildServer {
            child,
            stdout,
            port,
        }
    }

    /// Sends one command line; reads the number it answers.
    pub(crate) fn ask(&mut self, command: &str) -> u64 {
        let stdin = self.child.stdin.as_mut().expect("piped");
        writeln!(stdin, "{command}").expect("child alive");
        stdin.flush().expect("child alive");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("child answers");
        line.trim().parse().expect("a number")
    }

    pub(crate) fn quit(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// `--child-server ours|raw`: serves on 127.0.0.1:0 with the default configuration,
/// prints the port, then answers `rss` (bytes) and `count` (connections) lines on
/// stdin until it closes.
pub(crate) fn child_server(kind: &str) {
    let (tx, rx) = std::sync::mpsc::channel::<(u16, Box<dyn Fn() -> usize + Send>)>();
    let kind = kind.to_owned();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            if kind == "raw" {
                let (server, addr) = RawServer::start().await;
                let _ = tx.send((addr.port(), Box::new(move || server.live())));
            } else {
                let server = Server::bind("127.0.0.1:0").await.expect("bind");
                let port = server.local_addr().expect("address").port();
                let handle = server.handle();
                let _ = tx.send((port, Box::new(move || handle.connection_count())));
                let _ = server.serve(ours_router()).await;
            }
            std::future::pending::<()>().await;
        });
    });
    let (port, count) = rx.recv().expect("child server started");
    println!("{port}");
    for line in std::io::stdin().lock().lines() {
        match line.as_deref().map(str::trim) {
            Ok("rss") => println!("{}", rss_bytes()),
            Ok("count") => println!("{}", count()),
            _ => break,
        }
        let _ = std::io::stdout().flush();
    }
}

/// Resident set size of this process, in bytes, from `/proc/self/status`.
pub(crate) fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}
