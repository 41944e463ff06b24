//! Processes by pidfd: signals that cannot hit a recycled pid, and the kill of a
//! postmaster together with every process it started.
//!
//! PostgreSQL puts each child of the postmaster (backends, walsenders, the archiver, …)
//! in a session and process group of its own (`InitPostmasterChild` calls `setsid`),
//! so a signal to the postmaster's group does not reach them. [`kill_tree`] therefore:
//!
//! 1. stops the postmaster (`SIGSTOP`): it forks no new child and reaps none, so the
//!    pids of its children stay theirs (an exited child stays a zombie) while we look;
//! 2. lists its children from `/proc` (their parent is the postmaster);
//! 3. sends `SIGKILL` to each child's process group and to the child itself (a
//!    backend's own children, such as an `archive_command` shell, are in its group);
//! 4. sends `SIGKILL` to the postmaster.
//!
//! # Guarantees
//! - Signals to the postmaster go through a pidfd opened while it was known to be the
//!   postmaster: once it has exited and been reaped, they fail (`ESRCH`) instead of
//!   reaching whichever process got its pid.
//! - [`kill_tree`] leaves no process that the postmaster had started when it was
//!   stopped able to run another instruction of PostgreSQL code.
//! - [`kill_every_other`] reaches every process but PID 1 and the caller in one system
//!   call; callers use it only in a container Lockstep's init runs.
//!
//! # Assumptions
//! - Linux ≥ 5.3 (`pidfd_open`, `pidfd_send_signal`), and `/proc` mounted.
//! - The caller may signal the processes (same user, as in a pod, or root).

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// A signal the instance manager sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `SIGTERM`: PostgreSQL's smart shutdown (waits for clients).
    Term,
    /// `SIGINT`: PostgreSQL's fast shutdown (disconnects clients, checkpoints; the
    /// walsenders send all WAL to connected standbys before the server exits).
    Int,
    /// `SIGQUIT`: PostgreSQL's immediate shutdown (no checkpoint; crash recovery at
    /// the next start).
    Quit,
    /// `SIGKILL`.
    Kill,
    /// `SIGSTOP`.
    Stop,
    /// `SIGCONT`.
    Cont,
}

impl Signal {
    /// The signal's number.
    #[must_use]
    pub fn number(self) -> libc::c_int {
        match self {
            Self::Term => libc::SIGTERM,
            Self::Int => libc::SIGINT,
            Self::Quit => libc::SIGQUIT,
            Self::Kill => libc::SIGKILL,
            Self::Stop => libc::SIGSTOP,
            Self::Cont => libc::SIGCONT,
        }
    }
}

/// A process, held by a pidfd.
#[derive(Debug)]
pub struct Pidfd {
    pid: i32,
    fd: OwnedFd,
}

impl Pidfd {
    /// Opens a pidfd on `pid`.
    ///
    /// # Errors
    /// The OS error: `ESRCH` when no such process exists.
    pub fn open(pid: i32) -> io::Result<Self> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = i32::try_from(fd).map_err(|_| io::Error::other("pidfd out of range"))?;
        // SAFETY: `fd` was just returned by the kernel and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { pid, fd })
    }

    /// The process's pid (as it was when the pidfd was opened).
    #[must_use]
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Sends `signal` to the process.
    ///
    /// # Errors
    /// The OS error: `ESRCH` once the process has exited.
    pub fn signal(&self, signal: Signal) -> io::Result<()> {
        // SAFETY: pidfd_send_signal(fd, sig, info = NULL, flags = 0) on a descriptor we own.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                signal.number(),
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Whether the process is still running (not exited; a zombie has exited).
    #[must_use]
    pub fn is_running(&self) -> bool {
        // Signal 0 checks existence only, but a zombie still "exists": read its state.
        self.signal_zero() && !matches!(state_of(self.pid), Some('Z' | 'X') | None)
    }

    fn signal_zero(&self) -> bool {
        // SAFETY: as in `signal`, with signal 0 (no signal is sent).
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                0,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        rc == 0
    }
}

/// Sends `signal` to every process of group `pgid`; a group that is gone is no error.
fn signal_group(pgid: i32, signal: Signal) {
    if pgid > 1 {
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
        unsafe {
            libc::kill(-pgid, signal.number());
        }
    }
}

/// Sends `signal` to `pid`; a process that is gone is no error.
fn signal_pid(pid: i32, signal: Signal) {
    if pid > 1 {
        // SAFETY: kill(2) on one pid; no memory is touched.
        unsafe {
            libc::kill(pid, signal.number());
        }
    }
}

/// The fields of `/proc/<pid>/stat` after the command name: state, ppid, pgrp.
fn stat_of(pid: i32) -> Option<(char, i32, i32)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself hold spaces or parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// The state letter of a process (`R`, `S`, `T`, `Z`, …), if it exists.
#[must_use]
pub fn state_of(pid: i32) -> Option<char> {
    stat_of(pid).map(|(state, _, _)| state)
}

/// The pids (and process groups) of the processes whose parent is `parent`.
#[must_use]
pub fn children_of(parent: i32) -> Vec<(i32, i32)> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let (_, ppid, pgrp) = stat_of(pid)?;
            (ppid == parent).then_some((pid, pgrp))
        })
        .collect()
}

/// Sends `SIGKILL` to every process this one may signal but itself and PID 1, in one
/// call (`kill(-1)`): in a container whose PID 1 is Lockstep's init, every process of
/// the server at once, so that none runs on while the others are listed and killed one
/// by one (a thawed backend finishing a commit). Only for a process that runs the
/// container (`init::runs_the_container`): anywhere else it would reach the host's.
///
/// # Errors
/// The OS error, other than `ESRCH` (nothing else runs).
pub fn kill_every_other() -> io::Result<()> {
    // SAFETY: kill has no memory preconditions; -1 is "every process but PID 1 and us".
    if unsafe { libc::kill(-1, libc::SIGKILL) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(e)
    }
}

/// Kills `postmaster` and every process it started (see the module doc), whatever
/// they are doing. Returns how many children were killed.
///
/// # Errors
/// The OS error of the final `SIGKILL` to the postmaster, other than `ESRCH` (it had
/// already exited, which is what was wanted).
pub fn kill_tree(postmaster: &Pidfd) -> io::Result<usize> {
    // A stopped postmaster forks nothing and reaps nothing: the list below stays true.
    let stopped = postmaster.signal(Signal::Stop).is_ok();
    let children = if stopped {
        children_of(postmaster.pid())
    } else {
        Vec::new()
    };
    for &(pid, pgrp) in &children {
        // Only a group the child leads (PostgreSQL's children call setsid); never the
        // postmaster's own group, which may be ours.
        if pgrp == pid {
            signal_group(pgrp, Signal::Kill);
        }
        signal_pid(pid, Signal::Kill);
    }
    match postmaster.signal(Signal::Kill) {
        Err(e) if e.raw_os_error() != Some(libc::ESRCH) => Err(e),
        _ => Ok(children.len()),
    }
}

/// The processes a server on `pgdata` left running: every PostgreSQL process (by
/// [`is_postgres`]) whose working directory is `pgdata` (the postmaster changes into its
/// data directory before it forks, and every child inherits it), not exited. Found by
/// their working directory, not their parent: once the postmaster is gone they belong
/// to whichever process reaps orphans, and another server on another data directory
/// (a test's) is not theirs.
#[must_use]
pub fn left_behind(pgdata: &Path) -> Vec<(i32, i32)> {
    let Ok(dir) = fs::canonicalize(pgdata) else {
        return Vec::new();
    };
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| is_postgres(pid))
        .filter(|&pid| fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir))
        .filter_map(|pid| {
            let (state, _, pgrp) = stat_of(pid)?;
            (!matches!(state, 'Z' | 'X')).then_some((pid, pgrp))
        })
        .collect()
}

/// Kills what [`left_behind`] finds for `pgdata`, each with its process group if it
/// leads one (a backend's own children, such as an `archive_command` shell). Call it
/// once the postmaster has exited: a backend whose postmaster died on it keeps running
/// until it notices, and could still finish a commit and acknowledge it. Returns how
/// many it signalled; once `SIGKILL` is sent none of them runs another instruction of
/// PostgreSQL code.
pub fn kill_left_behind(pgdata: &Path) -> usize {
    let left = left_behind(pgdata);
    for &(pid, pgrp) in &left {
        if pgrp == pid {
            signal_group(pgrp, Signal::Kill);
        }
        signal_pid(pid, Signal::Kill);
    }
    left.len()
}

/// The pid written in the first line of `$PGDATA/postmaster.pid`, if the file exists
/// and holds one.
#[must_use]
pub fn recorded_postmaster(pgdata: &Path) -> Option<i32> {
    let text = fs::read_to_string(pgdata.join("postmaster.pid")).ok()?;
    text.lines()
        .next()?
        .trim()
        .parse()
        .ok()
        .filter(|pid: &i32| *pid > 0)
}

/// Whether `pid` runs a PostgreSQL server binary (its `comm` is `postgres` or
/// `postmaster`): a pid recorded in a stale `postmaster.pid` may since have been given
/// to an unrelated process, which must not be killed.
#[must_use]
pub fn is_postgres(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|comm| matches!(comm.trim(), "postgres" | "postmaster"))
}

/// A running postmaster serving `pgdata` that is not `own` (the one this manager
/// started): one started by hand (`pg_ctl start` through `kubectl exec`), or left by a
/// previous run of the manager. Its pid, if there is one.
#[must_use]
pub fn stray_postmaster(pgdata: &Path, own: Option<i32>) -> Option<i32> {
    let pid = recorded_postmaster(pgdata)?;
    if Some(pid) == own || pid == std::process::id().cast_signed() {
        return None;
    }
    let running = !matches!(state_of(pid), Some('Z' | 'X') | None);
    (running && is_postgres(pid)).then_some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn kill_tree_kills_a_parent_and_the_children_in_sessions_of_their_own() {
        let dir = std::env::temp_dir().join(format!("lockstep-kill-tree-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let pidfile = dir.join("child");
        // Like a postmaster: a parent whose child leads a session of its own.
        let mut parent = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "setsid sleep 600 & echo $! > {}.tmp && mv {0}.tmp {0}; wait",
                pidfile.display()
            ))
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        wait_for("the child's pid", || pidfile.exists());
        let child: i32 = fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        wait_for("the child's own session", || {
            stat_of(child).is_some_and(|(_, _, pgrp)| pgrp == child)
        });
        // The `mv` that wrote the pid file may not have been reaped yet (under load):
        // the shell must be down to its one child before the count means anything.
        let shell = parent.id().cast_signed();
        wait_for("the shell's `mv` to be reaped", || {
            children_of(shell) == [(child, child)]
        });

        let pidfd = Pidfd::open(parent.id().cast_signed()).unwrap();
        assert_eq!(kill_tree(&pidfd).unwrap(), 1);

        let status = parent.wait().unwrap();
        assert!(!status.success());
        // The orphaned child was killed too (reaped by init or a subreaper, or a zombie).
        wait_for("the child to die", || {
            matches!(state_of(child), None | Some('Z' | 'X'))
        });
        assert!(
            pidfd.signal(Signal::Cont).is_err(),
            "a reaped process takes no more signals through its pidfd"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn what_a_dead_postmaster_left_behind_is_found_by_its_data_directory_and_killed() {
        let dir = std::env::temp_dir().join(format!("lockstep-left-{}", std::process::id()));
        let (ours, theirs, bin) = (dir.join("ours"), dir.join("theirs"), dir.join("bin"));
        for d in [&ours, &theirs, &bin] {
            fs::create_dir_all(d).unwrap();
        }
        // A program named `postgres` (its `comm`), run in each data directory.
        let sleep = ["/bin/sleep", "/usr/bin/sleep"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .unwrap();
        let postgres = bin.join("postgres");
        std::os::unix::fs::symlink(sleep, &postgres).unwrap();
        let spawn = |cwd: &Path| {
            Command::new(&postgres)
                .arg("600")
                .current_dir(cwd)
                .stdin(Stdio::null())
                .spawn()
                .unwrap()
        };
        let (mut backend, mut other) = (spawn(&ours), spawn(&theirs));
        let backend_pid = backend.id().cast_signed();
        wait_for("the backend to be seen", || {
            left_behind(&ours)
                .iter()
                .any(|&(pid, _)| pid == backend_pid)
        });

        assert_eq!(kill_left_behind(&ours), 1);
        assert!(!backend.wait().unwrap().success());
        assert!(left_behind(&ours).is_empty());
        // Another server's process, in another data directory, is left alone.
        assert!(other.try_wait().unwrap().is_none());
        other.kill().unwrap();
        other.wait().unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_stale_postmaster_pid_naming_another_program_is_no_stray() {
        let dir = std::env::temp_dir().join(format!("lockstep-stray-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let mut sleeper = Command::new("sleep").arg("600").spawn().unwrap();
        let pid = sleeper.id().cast_signed();
        fs::write(
            dir.join("postmaster.pid"),
            format!("{pid}\n{}\n", dir.display()),
        )
        .unwrap();

        assert_eq!(recorded_postmaster(&dir), Some(pid));
        assert_eq!(stray_postmaster(&dir, None), None, "sleep is not postgres");

        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }
}
