//! The child processes the bench starts (each killed and reaped on drop, whatever path
//! the bench leaves by), the lines they print, and what `/proc` says about them.

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A child process whose stdout lines arrive on a channel (read by a thread of its
/// own), so that every wait for a line has a deadline.
pub(crate) struct Proc {
    name: String,
    child: Child,
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
