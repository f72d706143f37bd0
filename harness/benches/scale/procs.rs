//! The child processes the bench starts (each killed and reaped on drop, whatever path
//! the bench leaves by), the lines they print, and what `/proc` says about them.

use std::io::{BufRead, BufReader, Write as _};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The processes this bench runs now, killed by [`kill_children_on_signals`]: a drop
/// kills them on every path the bench leaves by itself, this on SIGINT, SIGTERM and
/// SIGHUP. (SIGKILL cannot be caught: fleets and servers then exit as their stdin
/// closes, cluster nodes and Redis stay.)
static CHILDREN: Mutex<Vec<(u32, Option<PathBuf>)>> = Mutex::new(Vec::new());

/// Keeps `pid` on the list of processes killed on a signal while it lives (and the
/// directory removed after it, if one is given).
pub(crate) struct Registered(u32);

impl Registered {
    pub(crate) fn new(pid: u32, dir: Option<PathBuf>) -> Registered {
        CHILDREN
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((pid, dir));
        Registered(pid)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        CHILDREN
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(p, _)| *p != self.0);
    }
}

/// On SIGINT, SIGTERM or SIGHUP: SIGKILL every registered child, then exit (130).
pub(crate) fn kill_children_on_signals() {
    std::thread::spawn(|| {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        let caught = runtime.block_on(async {
            use tokio::signal::unix::{signal, SignalKind};
            let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
                signal(SignalKind::hangup()),
            ) else {
                return false;
            };
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
                _ = hup.recv() => {}
            }
            true
        });
        if !caught {
            return;
        }
        let children = CHILDREN.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for (pid, dir) in children {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            if let Some(dir) = dir {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        eprintln!("scale: stopped by a signal; its processes are killed");
        std::process::exit(130);
    });
}

/// A child process whose stdout lines arrive on a channel (read by a thread of its
/// own), so that every wait for a line has a deadline.
pub(crate) struct Proc {
    name: String,
    child: Child,
    registered: Option<Registered>,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    /// Starts `command` with piped stdin and stdout (stderr inherited, so its errors
    /// show). Children of this binary exit when their stdin closes: even a bench that
    /// is killed leaves none of them behind.
    pub(crate) fn spawn(name: impl Into<String>, command: &mut Command) -> Proc {
        let name = name.into();
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = mpsc::channel();
        std::thread::Builder::new()
            .name(format!("{name} stdout"))
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })
            .expect("a reader thread");
        Proc {
            name,
            stdin: child.stdin.take(),
            registered: Some(Registered::new(child.id(), None)),
            child,
            lines,
        }
    }

    /// This bench's own binary with `args` (the fleet and server modes).
    pub(crate) fn own(args: &[&str]) -> Command {
        let mut command = Command::new(std::env::current_exe().expect("own path"));
        command.args(args);
        command
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line, or `None` if none comes within `timeout` or the child ended.
    pub(crate) fn try_line(&mut self, timeout: Duration) -> Option<String> {
        self.lines.recv_timeout(timeout).ok()
    }

    /// The words after `prefix` of the next line; panics (which kills every child on
    /// the way out) when it does not come within `timeout` or says something else.
    pub(crate) fn expect(&mut self, prefix: &str, timeout: Duration) -> Vec<String> {
        let line = self.try_line(timeout).unwrap_or_else(|| {
            let state = match self.child.try_wait() {
                Ok(Some(status)) => format!("it exited: {status}"),
                _ => "it is still running".to_owned(),
            };
            panic!(
                "{}: no `{prefix}` line within {:.0} s ({state})",
                self.name,
                timeout.as_secs_f64()
            )
        });
        let rest = line
            .strip_prefix(prefix)
            .unwrap_or_else(|| panic!("{}: expected `{prefix} ...`, got `{line}`", self.name));
        rest.split_whitespace().map(str::to_owned).collect()
    }

    /// Sends one line to the child's stdin.
    pub(crate) fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is piped");
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("{}: write `{line}`: {e}", self.name));
    }

    /// SIGKILL, and waits until it is gone.
    pub(crate) fn kill(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Reaped: its pid may be another process's from now on.
        self.registered = None;
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// CPU time (user + system, every thread) of process `pid` so far, in nanoseconds: the
/// first field of each thread's `/proc/PID/task/TID/schedstat`. 0 when unreadable.
pub(crate) fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// CPU time of several processes together, in nanoseconds.
pub(crate) fn cpu_ns_of(pids: &[u32]) -> u64 {
    pids.iter().map(|&pid| cpu_ns(pid)).sum()
}

/// Resident set size of process `pid`, in KiB (`VmRSS` of `/proc/PID/status`).
pub(crate) fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

/// Nanoseconds since the Unix epoch: one clock for every process on the machine.
pub(crate) fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
}

/// `/proc/loadavg`'s first three fields, for the report.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".to_owned())
}

/// The soft and hard limits on open files of this process.
pub(crate) fn nofile_limit() -> (u64, u64) {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let mut numbers = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .unwrap_or("")
        .split_whitespace()
        .map(|v| v.parse::<u64>().unwrap_or(u64::MAX));
    let soft = numbers.next().unwrap_or(1024);
    (soft, numbers.next().unwrap_or(soft))
}

/// Raises the soft open-files limit to the hard one (`prlimit`) when it is lower;
/// children inherit it.
pub(crate) fn raise_nofile_limit() {
    let (soft, hard) = nofile_limit();
    if soft >= hard {
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

/// The kernel's count of connections dropped because a listen queue was full
/// (`TcpExt: ListenOverflows` of `/proc/net/netstat`, the whole network namespace: other
/// programs on the machine count too); 0 where it cannot be read. A dropped SYN is
/// sent again by the client's kernel after a second (then 3 s, 7 s): a wait no
/// redial counter sees.
pub(crate) fn listen_overflows() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/net/netstat") else {
        return 0;
    };
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "ListenOverflows")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0)
}
