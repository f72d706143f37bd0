//! Process setup (threads, pinning to one CPU, file descriptors), and the child server
//! process of (e) and (f), with a way to read its CPU time.

use jsonrpc_peer::Server;
use std::io::{BufRead, BufReader, Write as _};
use std::process::{Command, Stdio};
use tokio::runtime::Handle;

use crate::jsonrpsee::JsonrpseeServer;
use crate::raw::RawServer;
use crate::servers::ours_router;
use crate::{Contender, CPU_ENV, PINNED_ENV, TICK};

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
    if soft >= 40_000 || soft >= hard {
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
    pub(crate) fn spawn(kind: Contender) -> ChildServer {
        let mut child = Command::new(std::env::current_exe().expect("own path"))
            .arg("--child-server")
            .arg(kind.name())
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
        self.ask_line(command).parse().expect("a number")
    }

    /// Sends one command line; returns the line it answers.
    pub(crate) fn ask_line(&mut self, command: &str) -> String {
        let stdin = self.child.stdin.as_mut().expect("piped");
        writeln!(stdin, "{command}").expect("child alive");
        stdin.flush().expect("child alive");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("child answers");
        line.trim().to_owned()
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn quit(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// What the child server's stdin loop can ask of its server.
struct ChildControl {
    port: u16,
    count: Box<dyn Fn() -> usize + Send>,
    broadcast: Box<dyn Fn(u64) -> usize + Send>,
}

/// `--child-server ours|raw|jsonrpsee`: serves on 127.0.0.1:0 with the default
/// configuration (jsonrpsee: `max_connections` raised), prints the port, then answers
/// lines on stdin until it closes: `rss` (bytes), `count` (connections; for jsonrpsee,
/// connections that made their call or subscription), `broadcast SEQ` (broadcasts
/// `tick [SEQ]`; answers how many took it and when it started, in nanoseconds since
/// the Unix epoch, to compare with the bench's clock).
pub(crate) fn child_server(kind: &str) {
    let (tx, rx) = std::sync::mpsc::channel::<ChildControl>();
    let kind = Contender::parse(kind).unwrap_or(Contender::Ours);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            match kind {
                Contender::Raw => {
                    let (server, addr) = RawServer::start().await;
                    let (counted, broadcasting) = (server.clone(), server);
                    let _ = tx.send(ChildControl {
                        port: addr.port(),
                        count: Box::new(move || counted.live()),
                        broadcast: Box::new(move |seq| broadcasting.broadcast(seq)),
                    });
                }
                Contender::Jsonrpsee => {
                    let (server, addr) = JsonrpseeServer::start().await;
                    let (counted, broadcasting) = (server.clone(), server);
                    let _ = tx.send(ChildControl {
                        port: addr.port(),
                        count: Box::new(move || counted.count()),
                        broadcast: Box::new(move |seq| broadcasting.broadcast(seq)),
                    });
                }
                Contender::Ours => {
                    let server = Server::bind("127.0.0.1:0").await.expect("bind");
                    let port = server.local_addr().expect("address").port();
                    let (counted, broadcasting) = (server.handle(), server.handle());
                    let _ = tx.send(ChildControl {
                        port,
                        count: Box::new(move || counted.connection_count()),
                        broadcast: Box::new(move |seq| {
                            broadcasting.broadcast(TICK, &[seq]).expect("broadcast")
                        }),
                    });
                    let _ = server.serve(ours_router()).await;
                }
            }
            std::future::pending::<()>().await;
        });
    });
    let control = rx.recv().expect("child server started");
    println!("{}", control.port);
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("rss"), None) => println!("{}", rss_bytes()),
            (Some("count"), None) => println!("{}", (control.count)()),
            (Some("broadcast"), Some(seq)) => {
                let seq = seq.parse().expect("a sequence number");
                let start = unix_nanos(std::time::SystemTime::now());
                let queued = (control.broadcast)(seq);
                println!("{queued} {start}");
            }
            _ => break,
        }
        let _ = std::io::stdout().flush();
    }
}

pub(crate) fn unix_nanos(t: std::time::SystemTime) -> u128 {
    t.duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos()
}

/// CPU time (user + system, all threads) of process `pid` so far, in nanoseconds: the
/// first field of each thread's `/proc/PID/task/TID/schedstat` (time on the CPU, in
/// ns, unlike `/proc/PID/stat`'s 10 ms ticks). `None` when the kernel has no schedstat.
pub(crate) fn process_cpu_ns(pid: u32) -> Option<u64> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let path = task.ok()?.path().join("schedstat");
        // A thread may end between the listing and the read.
        let Ok(stat) = std::fs::read_to_string(path) else {
            continue;
        };
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
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
