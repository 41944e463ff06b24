//! PID 1's duties in a PostgreSQL container: reap every orphan, forward signals.
//!
//! `lockstep instance` is the container's first process, so every process whose parent
//! dies is handed to it: the backends of a postmaster the fence killed, a stray server's
//! children, anything a tool left behind. The kernel then expects PID 1 to reap them, or
//! they stay zombies until the container restarts. The manager itself must not reap
//! with `waitpid(-1)`: that would take the exit status of its own children (the
//! postmaster, `psql`, `pg_ctl`) from under the code that waits for them.
//!
//! So [`become_init`], called first thing (before any thread exists), forks as tini and
//! CloudNativePG's instance manager do: the parent stays PID 1 and only reaps and
//! forwards; the child returns and runs the manager, whose own children stay its own.
//!
//! # Guarantees
//! - Every process reparented to PID 1 is reaped once it exits: no zombie outlives its
//!   exit by more than the `SIGCHLD` that announces it.
//! - `SIGTERM`, `SIGINT`, `SIGQUIT`, `SIGHUP`, `SIGUSR1` and `SIGUSR2` sent to the
//!   container reach the manager unchanged (the kubelet's `SIGTERM` on pod deletion
//!   included). The manager stops on the first three and ignores the others
//!   ([`super::signals`]).
//! - The container exits with the manager's status: its exit code, or 128 + the signal
//!   that killed it. PID 1's exit ends every process left in the container.
//!
//! # Assumptions
//! - No other thread exists when it is called (a `fork` copies only the caller's), which
//!   `main` ensures by calling it before the async runtime starts.
//! - Not PID 1 (a test, the liveness probe run by `exec`): it does nothing.
//!
//! # Errors
//! [`InitError::Fork`] if the process cannot fork; the caller then runs the manager as
//! PID 1 itself, as before (orphans are not reaped, everything else holds).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set in the manager forked by [`become_init`]: its parent is the container's PID 1.
static UNDER_OWN_INIT: AtomicBool = AtomicBool::new(false);

/// Whether this process runs the container: it is PID 1 of its PID namespace, or the
/// manager [`become_init`] forked under it. Only then may it signal every other process
/// it sees ([`super::process::kill_every_other`]): they are all the container's.
#[must_use]
pub fn runs_the_container() -> bool {
    // SAFETY: getpid has no preconditions.
    UNDER_OWN_INIT.load(Ordering::SeqCst) || unsafe { libc::getpid() } == 1
}

/// The signals PID 1 passes on to the manager.
const FORWARDED: [libc::c_int; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGHUP,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Why PID 1 could not split into reaper and manager.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// `fork(2)` failed (out of memory, a pids cgroup limit).
    #[error("PID 1 could not fork the instance manager: {0}")]
    Fork(#[source] io::Error),
}

/// If this process is PID 1: fork; the parent reaps and forwards until the manager
/// exits, then exits with its status (it never returns); the child returns `Ok` and
/// runs the manager. Not PID 1: returns `Ok` at once.
///
/// # Errors
/// [`InitError::Fork`]; see the module's contract.
pub fn become_init() -> Result<(), InitError> {
    // SAFETY: getpid has no preconditions.
    if unsafe { libc::getpid() } != 1 {
        return Ok(());
    }
    let watched = signal_set(FORWARDED.iter().copied().chain([libc::SIGCHLD]));
    // Block them before the fork, so that none that arrives in between is lost: the
    // parent takes them with sigwait, the child restores what it inherited.
    // SAFETY: zeroed is a valid sigset_t to be written by pthread_sigmask.
    let mut inherited: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to initialised sets; no other thread exists (Assumptions).
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &watched, &mut inherited) };
    // SAFETY: single-threaded here (Assumptions), so the child may run arbitrary code.
    match unsafe { libc::fork() } {
        -1 => {
            let error = io::Error::last_os_error();
            // SAFETY: as above, restoring the mask read there.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &inherited, std::ptr::null_mut()) };
            Err(InitError::Fork(error))
        }
        0 => {
            // SAFETY: as above.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &inherited, std::ptr::null_mut()) };
            UNDER_OWN_INIT.store(true, Ordering::SeqCst);
            Ok(())
        }
        manager => std::process::exit(reap_and_forward(manager, &watched)),
    }
}

/// PID 1's loop: wait for a watched signal; reap every exited child on `SIGCHLD`,
/// forward anything else to `manager`. Returns the container's exit code once the
/// manager was reaped.
fn reap_and_forward(manager: libc::pid_t, watched: &libc::sigset_t) -> i32 {
    loop {
        let mut signal: libc::c_int = 0;
        // SAFETY: `watched` is initialised and blocked in this thread; `signal` is valid.
        if unsafe { libc::sigwait(watched, &mut signal) } != 0 {
            continue;
        }
        if signal != libc::SIGCHLD {
            // SAFETY: kill with a pid this process forked and a valid signal.
            unsafe { libc::kill(manager, signal) };
            continue;
        }
        // One SIGCHLD may stand for many exits: reap until none is left.
        loop {
            let mut status: libc::c_int = 0;
            // SAFETY: waitpid with a valid status pointer.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                break;
            }
            if pid == manager {
                return exit_code(status);
            }
        }
    }
}

/// A shell's exit code for a `waitpid` status: the code, or 128 + the signal.
fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

fn signal_set(signals: impl IntoIterator<Item = libc::c_int>) -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the zeroed set; sigaddset takes valid signals.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in signals {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_pid_1_it_does_nothing() {
        assert!(become_init().is_ok());
    }

    #[test]
    fn the_container_exits_with_the_managers_code_or_128_plus_its_signal() {
        // Statuses as waitpid encodes them on Linux: code << 8; a signal in the low bits.
        assert_eq!(exit_code(0), 0);
        assert_eq!(exit_code(5 << 8), 5);
        assert_eq!(exit_code(libc::SIGKILL), 137);
        assert_eq!(exit_code(libc::SIGTERM), 143);
    }
}
