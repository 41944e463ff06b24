//! The archive's repository, asked off the round whether it answers: a store cut off
//! under a primary is reported within a minute, whether or not a WAL file is due to be
//! archived (`archive_command` fails only when one is, which on a quiet primary is up
//! to `archive_timeout` away, and PostgreSQL waits a minute between failed rounds).
//!
//! Every [`PROBE_EVERY`], a writable primary whose stanza exists runs
//! `pgbackrest repo-ls` (one list request to the store, with the container's
//! `PGBACKREST_*` options) as a child on its own task; the round only looks at whether
//! it finished. `repo-ls` is chosen over `pgbackrest check`, which forces a WAL switch
//! (a new 16 MB file archived at every check), and over `info`, which exits 0 when the
//! repository cannot be read.
//!
//! # Guarantees
//! - **Nothing here delays a round**: the probe runs on its own task, bounded by
//!   [`PROBE_BOUND`] (killed past it), and one runs at a time.
//! - An outage is reported at most `PROBE_EVERY + PROBE_BOUND` (35 s) after it begins,
//!   plus the manager's round; a store back is reported as soon as a probe succeeds.
//! - The reported error is the first line pgBackRest marks `ERROR:` (or its last line),
//!   so a store that keeps failing the same way is not rewritten on the pod every probe.
//!
//! # Assumptions
//! - The image has `pgbackrest` on `PATH`, and the container's environment holds the
//!   repository's options (as for `archive-push`).
//!
//! # Errors
//! Nothing here fails the manager: a probe that cannot run, fails, or passes its bound
//! is the error it reports.

use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio::task::JoinHandle;

use super::archive::{PGBACKREST, pgbackrest};

/// How often a primary asks the repository whether it answers.
pub const PROBE_EVERY: Duration = Duration::from_secs(20);
/// How long one probe may run before it counts as failed (and its child is killed).
pub const PROBE_BOUND: Duration = Duration::from_secs(15);

/// The repository's probe: the one that runs, when the last began, and what the last
/// that finished said.
#[derive(Debug)]
pub struct Probe {
    /// The program and arguments run (pgBackRest's `repo-ls`).
    command: (String, Vec<String>),
    /// How long one run may take.
    bound: Duration,
    /// The run in flight.
    running: Option<JoinHandle<Result<String, String>>>,
    /// When the last run began.
    began: Option<Instant>,
    /// The error of the last run that finished; none when it succeeded (or none ran).
    failed: Option<String>,
}

impl Default for Probe {
    fn default() -> Self {
        Probe::new(PGBACKREST, &["repo-ls"], PROBE_BOUND)
    }
}

impl Probe {
    /// A probe that runs `program` with `args`, bounded by `bound`.
    #[must_use]
    pub fn new(program: &str, args: &[&str], bound: Duration) -> Self {
        Probe {
            command: (
                program.to_owned(),
                args.iter().map(|a| (*a).to_owned()).collect(),
            ),
            bound,
            running: None,
            began: None,
            failed: None,
        }
    }

    /// One round at `now`: takes the result of a run that finished, starts the next
    /// once [`PROBE_EVERY`] passed since the last began (the first at once), and says
    /// the last finished run's error (none while the first runs, or after a success).
    pub fn round(&mut self, now: Instant) -> Option<&str> {
        if let Some(task) = self.running.as_mut()
            && let Some(joined) = task.now_or_never()
        {
            self.running = None;
            self.took(joined);
        }
        let due = self
            .began
            .is_none_or(|at| now.saturating_duration_since(at) >= PROBE_EVERY);
        if self.running.is_none() && due {
            let (program, args) = self.command.clone();
            let bound = self.bound;
            self.began = Some(now);
            self.running = Some(tokio::spawn(async move {
                pgbackrest(&program, &args, bound).await
            }));
        }
        self.failed.as_deref()
    }

    /// Records what the run that finished said.
    fn took(&mut self, joined: Result<Result<String, String>, tokio::task::JoinError>) {
        self.failed = joined
            .unwrap_or_else(|e| Err(format!("the repository probe failed: {e}")))
            .err();
        if let Some(error) = &self.failed {
            tracing::warn!(%error, "pgbackrest repo-ls: the archive's repository does not answer");
        }
    }

    /// Waits (within 10 s) for the run in flight to finish and records it, as a round
    /// would once it had.
    #[cfg(test)]
    pub(super) async fn finish(&mut self) {
        if let Some(task) = self.running.take() {
            let joined = tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("the probe finished within 10 s");
            self.took(joined);
        }
    }

    /// Forget the runs so far (the server is no longer a writable primary): the next
    /// primary term starts with a fresh probe, and reports nothing until it finishes.
    pub fn reset(&mut self) {
        if let Some(task) = self.running.take() {
            task.abort();
        }
        self.began = None;
        self.failed = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `probe` says at `now` once its run in flight finished.
    async fn finished(probe: &mut Probe, now: Instant) -> Option<String> {
        probe.finish().await;
        probe.round(now).map(str::to_owned)
    }

    #[tokio::test]
    async fn a_repository_that_refuses_is_reported_with_the_first_error_line_and_cleared_once_it_answers()
     {
        let t0 = Instant::now();
        let mut probe = Probe::new(
            "sh",
            &[
                "-c",
                "echo 'ERROR: [049]: unable to connect to store:443' >&2; echo '*** headers ***' >&2; exit 49",
            ],
            Duration::from_secs(5),
        );
        assert_eq!(
            probe.round(t0),
            None,
            "nothing is said before a run finished"
        );
        assert_eq!(
            finished(&mut probe, t0).await.as_deref(),
            Some("ERROR: [049]: unable to connect to store:443")
        );
        // Not due again within PROBE_EVERY: what was said stays.
        probe.command = ("true".to_owned(), vec![]);
        assert!(probe.round(t0 + PROBE_EVERY / 2).is_some());
        assert!(probe.running.is_none());
        let later = t0 + PROBE_EVERY;
        assert!(probe.round(later).is_some(), "said until the next run ends");
        assert_eq!(finished(&mut probe, later).await, None);
    }

    #[tokio::test]
    async fn a_probe_that_passes_its_bound_is_killed_and_reported() {
        let t0 = Instant::now();
        let mut probe = Probe::new("sleep", &["30"], Duration::from_millis(200));
        probe.round(t0);
        let error = finished(&mut probe, t0).await.expect("a failure");
        assert!(error.contains("did not finish within"), "{error}");
    }

    #[tokio::test]
    async fn a_reset_probe_says_nothing_until_its_next_run_ends() {
        let t0 = Instant::now();
        let mut probe = Probe::new("false", &[], Duration::from_secs(5));
        probe.round(t0);
        assert!(finished(&mut probe, t0).await.is_some());
        probe.reset();
        assert_eq!(probe.round(t0), None);
        assert!(probe.running.is_some(), "a reset probe runs again at once");
    }
}
