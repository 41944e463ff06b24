//! The fence: a dedicated OS thread that owns the writable server's deadline.
//!
//! While the server may write (it was started as a primary, or asked to promote), the
//! fence holds its postmaster by pidfd and a deadline: the start of the last successful
//! Lease renewal plus `T`. When the deadline passes, the thread kills the postmaster and
//! every process it started ([`super::process::kill_tree`]), whatever the rest of the
//! manager is doing: blocked in a query, waiting on the API server, stopping the server
//! cleanly, or handling `SIGTERM`. In a container (Lockstep's init is PID 1), it first
//! kills every other process of the container in one call
//! ([`super::process::kill_every_other`]).
//!
//! # Guarantees
//! - A guarded server is killed no later than its deadline plus the thread's wake-up
//!   latency (the thread wakes at the deadline; it also re-reads the clock at least
//!   every [`POLL`], so a coarse condition-variable timeout cannot delay it longer).
//! - The deadline moves only forward, and only through [`Fence::renewed`] with the
//!   moment a successful renewal *started*: a slow request cannot extend the deadline
//!   by its own duration.
//! - A server guarded without any renewal recorded is killed at once (it is writable
//!   and nobody renewed for it).
//! - Only the fence thread kills on the deadline; nothing in the async runtime has to
//!   run for it to happen. Signals do not stop it: the thread ends only when the
//!   [`Fence`] is dropped, which the manager does only after the postmaster exited.
//!
//! # Assumptions
//! - The manager's process keeps getting CPU time. A pause of the whole pod (a frozen
//!   cgroup, a stopped VM) pauses the fence as well; the operator's wait of
//!   `renewTime + L + S` before any hand-over, with `T` < `L`, is what covers it (see
//!   `docs/instance-manager.md`).

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::clock::Moment;
use super::process::{Pidfd, kill_every_other, kill_tree};

/// The longest the fence thread sleeps without reading the clock again.
pub const POLL: Duration = Duration::from_millis(100);

/// Why and when the fence killed the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    /// The postmaster's pid.
    pub pid: i32,
    /// The deadline that passed.
    pub deadline: Moment,
    /// When the kill began.
    pub at: Moment,
    /// Why: the deadline passed, or the manager asked ([`Fence::fence_now`]).
    pub reason: String,
}

/// The guarded server.
#[derive(Debug)]
struct Guarded {
    postmaster: Arc<Pidfd>,
    /// `None`: fence at once.
    deadline: Option<Moment>,
    /// Set by [`Fence::fence_now`].
    ordered: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    guarded: Option<Guarded>,
    last_renewal: Option<Moment>,
    fired: Option<Fired>,
    /// The kill of the last [`State::fired`] is done (its processes were signalled).
    killed: bool,
    shutdown: bool,
}

#[derive(Debug)]
struct Shared {
    fence_after: Duration,
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind: keep fencing.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The fence (see the module doc). Dropping it stops its thread.
#[derive(Debug)]
pub struct Fence {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Fence {
    /// Starts the fence thread with `T` = `fence_after`; nothing is guarded yet.
    ///
    /// # Errors
    /// The OS error if the thread cannot be started.
    pub fn start(fence_after: Duration) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            fence_after,
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        });
        let thread = std::thread::Builder::new()
            .name("lockstep-fence".to_owned())
            .spawn({
                let shared = Arc::clone(&shared);
                move || run(&shared)
            })?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// `T`.
    #[must_use]
    pub fn fence_after(&self) -> Duration {
        self.shared.fence_after
    }

    /// Records a successful renewal that started at `started`: the deadline becomes
    /// `started + T` unless it is already later.
    pub fn renewed(&self, started: Moment) {
        let mut state = self.shared.lock();
        if state.last_renewal.is_none_or(|last| last < started) {
            state.last_renewal = Some(started);
        }
        let deadline = state
            .last_renewal
            .map(|last| last + self.shared.fence_after);
        if let Some(guarded) = &mut state.guarded
            && guarded.ordered.is_none()
        {
            guarded.deadline = deadline;
        }
        drop(state);
        self.shared.wake.notify_all();
    }

    /// The start of the last successful renewal, if any.
    #[must_use]
    pub fn last_renewal(&self) -> Option<Moment> {
        self.shared.lock().last_renewal
    }

    /// Guards `postmaster` from now on: killed at the last renewal plus `T`, at once if
    /// there was none.
    pub fn guard(&self, postmaster: Arc<Pidfd>) {
        let mut state = self.shared.lock();
        let deadline = state
            .last_renewal
            .map(|last| last + self.shared.fence_after);
        state.guarded = Some(Guarded {
            postmaster,
            deadline,
            ordered: None,
        });
        drop(state);
        self.shared.wake.notify_all();
    }

    /// Whether a server is guarded.
    #[must_use]
    pub fn is_guarding(&self) -> bool {
        self.shared.lock().guarded.is_some()
    }

    /// Stops guarding. Only for a postmaster that has exited: a server that may write
    /// stays guarded until then.
    pub fn release(&self) {
        self.shared.lock().guarded = None;
        self.shared.wake.notify_all();
    }

    /// Kills the guarded server now (the agent decided to fence), on the fence thread.
    pub fn fence_now(&self, reason: impl Into<String>) {
        let mut state = self.shared.lock();
        if let Some(guarded) = &mut state.guarded {
            guarded.ordered = Some(reason.into());
        }
        drop(state);
        self.shared.wake.notify_all();
    }

    /// When and why the fence killed the server, if it did.
    #[must_use]
    pub fn fired(&self) -> Option<Fired> {
        self.shared.lock().fired.clone()
    }

    /// A handle that waits for the fence's kill from another thread
    /// ([`FenceWaiter::fenced`]; `tokio::task::spawn_blocking` in async code).
    #[must_use]
    pub fn waiter(&self) -> FenceWaiter {
        FenceWaiter(Arc::clone(&self.shared))
    }

    /// The deadline of the guarded server: `None` if nothing is guarded, `Some(None)` if
    /// it is to be killed at once.
    #[must_use]
    pub fn deadline(&self) -> Option<Option<Moment>> {
        self.shared.lock().guarded.as_ref().map(|g| {
            if g.ordered.is_some() {
                None
            } else {
                g.deadline
            }
        })
    }
}

impl Drop for Fence {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Waits on the fence from another thread ([`Fence::waiter`]).
#[derive(Debug, Clone)]
pub struct FenceWaiter(Arc<Shared>);

impl FenceWaiter {
    /// Blocks until the fence has fired and its kill is done (the guarded server and its
    /// children signalled), for at most `within`: what it recorded, or `None` if it
    /// had not by then. Woken by the fence thread, not by polling.
    #[must_use]
    pub fn fenced(&self, within: Duration) -> Option<Fired> {
        let until = Moment::now() + within;
        let mut state = self.0.lock();
        loop {
            if state.killed
                && let Some(fired) = &state.fired
            {
                return Some(fired.clone());
            }
            let now = Moment::now();
            if now >= until {
                return None;
            }
            state = self
                .0
                .wake
                .wait_timeout(state, until.since(now))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// The fence thread.
fn run(shared: &Shared) {
    let mut state = shared.lock();
    loop {
        if state.shutdown {
            return;
        }
        let now = Moment::now();
        let due = state.guarded.as_ref().and_then(|g| {
            let reason = match (&g.ordered, g.deadline) {
                (Some(reason), _) => reason.clone(),
                (None, None) => "writable without a Lease renewal by this manager".to_owned(),
                (None, Some(deadline)) if deadline <= now => format!(
                    "no Lease renewal succeeded for {} ms (T)",
                    shared.fence_after.as_millis()
                ),
                (None, Some(_)) => return None,
            };
            Some((Arc::clone(&g.postmaster), g.deadline.unwrap_or(now), reason))
        });
        if let Some((postmaster, deadline, reason)) = due {
            state.guarded = None;
            state.killed = false;
            // Recorded before the kill, so that whoever sees the server die sees why.
            state.fired = Some(Fired {
                pid: postmaster.pid(),
                deadline,
                at: Moment::now(),
                reason: reason.clone(),
            });
            drop(state);
            // Not under the lock: renewals may be recorded meanwhile (too late now).
            // In a container, every other process at once first (a thawed backend must
            // not finish a commit while the others are listed).
            if super::init::runs_the_container() {
                match kill_every_other() {
                    Ok(()) => tracing::error!(
                        "FENCED: killed every other process of the container at once"
                    ),
                    Err(error) => {
                        tracing::warn!(%error, "killing every other process of the container failed")
                    }
                }
            }
            let killed = kill_tree(&postmaster);
            tracing::error!(pid = postmaster.pid(), %reason, ?killed, "FENCED: killed the postmaster and its children");
            state = shared.lock();
            state.killed = true;
            shared.wake.notify_all();
            continue;
        }
        let wait = state
            .guarded
            .as_ref()
            .and_then(|g| g.deadline)
            .map_or(POLL, |deadline| deadline.since(now).min(POLL));
        state = shared
            .wake
            .wait_timeout(state, wait)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command, ExitStatus, Stdio};
    use std::time::Instant;

    fn server() -> (Child, Arc<Pidfd>) {
        let child = Command::new("sleep")
            .arg("600")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let pidfd = Arc::new(Pidfd::open(child.id().cast_signed()).unwrap());
        (child, pidfd)
    }

    /// Waits for the child without blocking forever if the fence never fires.
    fn exit_within(child: &mut Child, bound: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    #[test]
    fn the_fence_kills_the_server_when_no_renewal_succeeded_for_t_while_the_main_thread_is_blocked()
    {
        let fence = Fence::start(Duration::from_millis(300)).unwrap();
        let (mut child, pidfd) = server();
        let renewed = Moment::now();
        fence.renewed(renewed);
        fence.guard(pidfd);

        // The main thread is blocked (in a wait that only the kill ends), as it may be in
        // a hung query or a slow clean stop. A watchdog ends the test if the fence fails.
        let pid = child.id().cast_signed();
        let watchdog = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(20));
            // SAFETY: kill(2) on the test's own child; no memory is touched.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        });
        let status = child.wait().unwrap();
        drop(watchdog);

        let fired = fence.fired().expect("the fence fired, not the watchdog");
        assert!(!status.success());
        assert_eq!(fired.deadline, renewed + Duration::from_millis(300));
        assert!(fired.at >= fired.deadline);
        assert!(
            fired.at.since(fired.deadline) < Duration::from_secs(1),
            "killed {:?} after the deadline",
            fired.at.since(fired.deadline)
        );
        assert!(!fence.is_guarding());
    }

    #[test]
    fn renewals_keep_the_server_alive_past_t_and_the_fence_fires_when_they_stop() {
        let fence = Fence::start(Duration::from_millis(400)).unwrap();
        let (mut child, pidfd) = server();
        fence.renewed(Moment::now());
        fence.guard(pidfd);
        for _ in 0..6 {
            std::thread::sleep(Duration::from_millis(150));
            fence.renewed(Moment::now());
        }
        assert_eq!(child.try_wait().unwrap(), None, "alive after 900 ms > T");
        assert!(fence.fired().is_none());

        let status = exit_within(&mut child, Duration::from_secs(10)).expect("fenced");
        assert!(!status.success());
        assert!(fence.fired().is_some());
    }

    #[test]
    fn a_renewal_that_started_before_the_last_one_does_not_move_the_deadline_back() {
        let fence = Fence::start(Duration::from_secs(60)).unwrap();
        let (mut child, pidfd) = server();
        let later = Moment::now();
        fence.renewed(later);
        fence.renewed(later - Duration::from_secs(5));
        fence.guard(pidfd);
        assert_eq!(
            fence.deadline(),
            Some(Some(later + Duration::from_secs(60)))
        );
        fence.release();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_server_guarded_without_any_renewal_is_killed_at_once() {
        let fence = Fence::start(Duration::from_secs(60)).unwrap();
        let (mut child, pidfd) = server();
        fence.guard(pidfd);
        let status = exit_within(&mut child, Duration::from_secs(10)).expect("fenced");
        assert!(!status.success());
        assert!(
            fence
                .fired()
                .unwrap()
                .reason
                .contains("without a Lease renewal")
        );
    }

    #[test]
    fn fence_now_kills_at_once_whatever_the_deadline() {
        let fence = Fence::start(Duration::from_secs(60)).unwrap();
        let (mut child, pidfd) = server();
        fence.renewed(Moment::now());
        fence.guard(pidfd);
        fence.fence_now("the Lease names another holder");
        let status = exit_within(&mut child, Duration::from_secs(10)).expect("fenced");
        assert!(!status.success());
        assert_eq!(
            fence.fired().unwrap().reason,
            "the Lease names another holder"
        );
    }

    #[test]
    fn sigterm_to_the_process_does_not_stop_the_fence() {
        // The manager handles SIGTERM (forwarding it to postgres); the fence thread does
        // not look at signals. Here: a SIGTERM handler is installed, SIGTERM arrives, and
        // the fence still kills the server on time.
        let fence = Fence::start(Duration::from_millis(300)).unwrap();
        let (mut child, pidfd) = server();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut sigterm = rt
            .block_on(async {
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            })
            .unwrap();
        fence.renewed(Moment::now());
        fence.guard(pidfd);
        // SAFETY: raise(3) on this process, whose SIGTERM is handled by tokio.
        unsafe { libc::raise(libc::SIGTERM) };
        rt.block_on(sigterm.recv());
        let status = exit_within(&mut child, Duration::from_secs(10)).expect("fenced");
        assert!(!status.success());
        assert!(fence.fired().is_some());
    }

    #[test]
    fn a_waiter_returns_once_the_ordered_kill_is_done_and_not_before() {
        let fence = Fence::start(Duration::from_secs(600)).unwrap();
        let (mut child, pidfd) = server();
        fence.renewed(Moment::now());
        fence.guard(pidfd);
        let waiter = fence.waiter();
        // Nothing ordered: the wait runs out.
        assert!(waiter.fenced(Duration::from_millis(50)).is_none());
        fence.fence_now("the local promotion failed");
        let fired = waiter
            .fenced(Duration::from_secs(10))
            .expect("the fence reports its kill");
        assert_eq!(fired.reason, "the local promotion failed");
        // Signalled before the waiter returned: the child exits by a signal.
        let status = exit_within(&mut child, Duration::from_secs(10)).expect("killed");
        assert!(!status.success());
    }
}
