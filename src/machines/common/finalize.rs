//! The final-backup sub-machine: what every Lockstep machine does between
//! `deletionTimestamp` and releasing its finalizer.
//!
//! ```text
//!   (any state) ──deleting──► no backup policy ─────────────────────────► Finalized
//!                      │      skip annotation ──────────────────────────► Finalized
//!                      ▼
//!             Finalizing(attempt n) ── Job final-backup-n succeeded ────► Finalized
//!                 │   ▲                skip annotation (any time) ───────► Finalized
//!   Job failed,   │   │ backoff over
//!   Degraded ─────┘   └── Finalizing(attempt n+1)
//! ```
//!
//! # Guarantees
//! - The finalizer is released only after a final backup Job *succeeded*, or when the
//!   user said so (the [`SKIP_FINAL_BACKUP`] annotation, or no `backupPolicy`).
//! - A failure keeps the finalizer, reports Degraded with the Job's reason and retries
//!   with exponential backoff (capped at 5 minutes), for as long as it takes: each
//!   attempt is a new Job and none is rerun. The attempt counter keeps counting, but
//!   only the Jobs of the latest [`ATTEMPT_HISTORY`] attempts are kept ([`stale`]): the
//!   older ones failed, their outcome is history, and their keys are never used again.
//! - The only object created while deleting is the attempt's final-backup Job.
//!
//! # Assumptions
//! - The machine persists the attempt number in its Finalizing state and takes the
//!   [`FINAL_BACKUP_RETRIED`] self-edge to move to the next one.
//!
//! [`SKIP_FINAL_BACKUP`]: super::annotations::SKIP_FINAL_BACKUP

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::actions::{self, JobActions};
use super::annotations::SKIP_FINAL_BACKUP;
use super::backup::BackupKind;
use super::jobs::{self, JobOutcome, JobView, Purpose};
use super::observe::job_by_key;
use super::retry::{Attempts, Backoff, JobStep, job_step, retry_time};
use crate::engine::Decision;

/// Edge reason: the object is being deleted and a final backup will be taken.
pub const DELETION_REQUESTED: &str = "DeletionRequested";
/// Edge reason: the object is being deleted and there is no backup policy.
pub const NO_BACKUP_POLICY: &str = "NoBackupPolicy";
/// Edge reason: the final backup succeeded.
pub const FINAL_BACKUP_SUCCEEDED: &str = "FinalBackupSucceeded";
/// Edge reason: the user asked to skip the final backup.
pub const FINAL_BACKUP_SKIPPED: &str = "FinalBackupSkipped";
/// Edge reason: a failed final backup is tried again.
pub const FINAL_BACKUP_RETRIED: &str = "FinalBackupRetried";
/// Stay reason: the final backup Job is being created or runs.
pub const FINAL_BACKUP_RUNNING: &str = "FinalBackupRunning";
/// Stay reason (Degraded): the final backup failed; waiting to retry.
pub const FINAL_BACKUP_FAILED: &str = "FinalBackupFailed";
/// Stay reason: finalized; the finalizer is released.
pub const FINALIZED: &str = "Finalized";

/// This file, which takes the deletion's edges.
pub const SOURCE: &str = file!();

/// The way out of a final backup that does not finish (named when Degraded): the
/// [`SKIP_FINAL_BACKUP`] annotation.
pub const WAY_OUT: &str =
    "to delete without the final backup, annotate lockstep.dev/skip-final-backup=true";

/// The deletion's rows of a machine's [`edges!`](crate::edges) table, the same in every
/// machine: `finalize_edges!(from: [Creating, Ready], backup: "spec.backup");` declares
/// Finalizing's edges and the three ways into it (or past it) from each state of `from`
/// (`backup` names the spec field that configures backups).
macro_rules! finalize_edges {
    (@edges $kind:ident [$($done:tt)*] [$($rest:tt)*]
        from: [$($from:ident),+ $(,)?], backup: $field:literal $(,)?) => {
        $crate::edges!(@rows $kind [$($done)*]
            Finalizing -> {
                Finalizing: $crate::machines::common::finalize::FINAL_BACKUP_RETRIED,
                    "the final backup failed and its backoff is over",
                    $crate::machines::common::finalize::SOURCE;
                Finalized: $crate::machines::common::finalize::FINAL_BACKUP_SUCCEEDED,
                    "the final backup Job succeeded",
                    $crate::machines::common::finalize::SOURCE;
            }
            [$($from),+] -> {
                Finalizing: $crate::machines::common::finalize::DELETION_REQUESTED,
                    "deleted; a final backup is taken",
                    $crate::machines::common::finalize::SOURCE;
                Finalized: $crate::machines::common::finalize::NO_BACKUP_POLICY,
                    concat!("deleted without ", $field),
                    $crate::machines::common::finalize::SOURCE;
                Finalized: $crate::machines::common::finalize::FINAL_BACKUP_SKIPPED,
                    "deleted with lockstep.dev/skip-final-backup=true",
                    $crate::machines::common::finalize::SOURCE;
            }
            Finalizing -> {
                Finalized: $crate::machines::common::finalize::FINAL_BACKUP_SKIPPED,
                    "lockstep.dev/skip-final-backup=true was set",
                    $crate::machines::common::finalize::SOURCE;
                Finalized: $crate::machines::common::finalize::NO_BACKUP_POLICY,
                    concat!($field, " was removed while finalizing"),
                    $crate::machines::common::finalize::SOURCE;
            }
            $($rest)*)
    };
}
pub(crate) use finalize_edges;

/// How many attempts' final-backup Jobs are kept (the current one included).
pub const ATTEMPT_HISTORY: u32 = 3;

/// The final-backup Jobs of attempts older than the latest [`ATTEMPT_HISTORY`] while at
/// `attempt`: what the Finalizing state deletes. Every one of them failed (a success
/// would have released the finalizer), and attempts only count up, so none is needed
/// again.
pub fn stale(attempt: u32, jobs: &[JobView]) -> Vec<&JobView> {
    jobs.iter()
        .filter(|j| j.purpose == Some(Purpose::FinalBackup))
        .filter(|j| j.outcome != JobOutcome::Running)
        .filter(|j| {
            j.key
                .as_deref()
                .and_then(|k| k.strip_prefix("final-backup-"))
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|n| n.saturating_add(ATTEMPT_HISTORY) <= attempt)
        })
        .collect()
}

/// The key of the final backup Job of `attempt`.
pub fn key(attempt: u32) -> String {
    format!("final-backup-{attempt}")
}

/// Where to go when deletion is first seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// Straight to the finalized state.
    Release {
        /// [`NO_BACKUP_POLICY`] or [`FINAL_BACKUP_SKIPPED`].
        reason: &'static str,
        /// Why.
        message: String,
    },
    /// To Finalizing, attempt 1.
    Backup {
        /// Why.
        message: String,
    },
}

/// What to do when deletion is first seen.
pub fn entry(configured: bool, skip: bool) -> Entry {
    if !configured {
        Entry::Release {
            reason: NO_BACKUP_POLICY,
            message: "deleting; no backupPolicy, so no final backup".to_owned(),
        }
    } else if skip {
        Entry::Release {
            reason: FINAL_BACKUP_SKIPPED,
            message: format!("deleting; final backup skipped ({SKIP_FINAL_BACKUP}=true)"),
        }
    } else {
        Entry::Backup {
            message: "deleting; taking a final backup before releasing the finalizer".to_owned(),
        }
    }
}

/// Turn [`entry`] into the decision taken when deletion is first seen, given the
/// machine's finalized state and its Finalizing state for an attempt.
pub fn begin<S, A>(
    configured: bool,
    skip: bool,
    finalized: impl FnOnce() -> S,
    finalizing: impl FnOnce(u32) -> S,
) -> Decision<S, A> {
    match entry(configured, skip) {
        Entry::Release { reason, message } => Decision::go(finalized(), reason, message),
        Entry::Backup { message } => Decision::go(finalizing(1), DELETION_REQUESTED, message),
    }
}

/// A machine's deletion states: `Finalizing { attempt }` and `Finalized` in every
/// Lockstep machine (the crate's `impl_states!` implements this for such an enum).
pub trait States: Sized {
    /// The finalized state (the finalizer is released).
    fn finalized() -> Self;
    /// The Finalizing state at `attempt`.
    fn finalizing(attempt: u32) -> Self;
    /// The attempt, if this is the Finalizing state.
    fn finalizing_attempt(&self) -> Option<u32>;
    /// Whether this is the finalized state.
    fn is_finalized(&self) -> bool;
}

/// Implements [`States`] for a machine's state enum `$state`, whose deletion variants
/// are `Finalizing { attempt }` and `Finalized`.
macro_rules! impl_states {
    ($state:ident) => {
        impl $crate::machines::common::finalize::States for $state {
            fn finalized() -> Self {
                $state::Finalized
            }

            fn finalizing(attempt: u32) -> Self {
                $state::Finalizing { attempt }
            }

            fn finalizing_attempt(&self) -> Option<u32> {
                match self {
                    $state::Finalizing { attempt } => Some(*attempt),
                    _ => None,
                }
            }

            fn is_finalized(&self) -> bool {
                matches!(self, $state::Finalized)
            }
        }
    };
}
pub(crate) use impl_states;

/// What a machine in `state` decides while its object is being deleted: from any state
/// but the two deletion states it [`begin`]s; Finalizing runs [`finalizing`]; Finalized
/// stays. `configured`: the spec still configures backups; `skip`: the skip annotation
/// is set; `jobs`: the owned Jobs.
pub fn deleting<S: States, A: JobActions>(
    state: &S,
    configured: bool,
    skip: bool,
    jobs: &[JobView],
    now: DateTime<Utc>,
) -> Decision<S, A> {
    if let Some(attempt) = state.finalizing_attempt() {
        return finalizing(configured, skip, attempt, jobs, now);
    }
    if state.is_finalized() {
        // Persisted as finalized: every outcome read is recorded, and nothing reads a Job
        // again. Their outcome finalizers go before the owner's does (the engine removes
        // it after this stay), or they would outlive their owner.
        return Decision::stay(FINALIZED, "finalizer released")
            .with_actions(actions::release_all::<A>(jobs));
    }
    begin(configured, skip, S::finalized, S::finalizing)
}

/// What the Finalizing state sees.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// Whether the spec still has a backup policy.
    pub configured: bool,
    /// Whether the skip annotation is set.
    pub skip: bool,
    /// The current attempt, from 1.
    pub attempt: u32,
    /// The outcome of the attempt's Job, if it exists.
    pub job: Option<&'a JobOutcome>,
    /// The clock.
    pub now: DateTime<Utc>,
}

/// What the Finalizing state does.
pub type Verdict = jobs::Verdict<Failure>;

/// What the Finalizing state does about a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Stay Degraded until the backoff is over.
    Backoff {
        /// The failure and when it is retried.
        message: String,
        /// How long until the retry.
        wait: Duration,
    },
    /// The backoff is over: go to the next attempt.
    Retry {
        /// The next attempt.
        next: u32,
        /// The failure.
        message: String,
    },
}

/// Decide the Finalizing state.
pub fn step(facts: Facts<'_>) -> Verdict {
    step_named(facts, None)
}

/// [`step`], with messages naming the attempt's Job (`job_name`, when it exists) rather
/// than its key.
pub fn step_named(facts: Facts<'_>, job_name: Option<&str>) -> Verdict {
    if facts.skip {
        return Verdict::Leave {
            reason: FINAL_BACKUP_SKIPPED,
            message: format!("final backup skipped ({SKIP_FINAL_BACKUP}=true)"),
        };
    }
    if !facts.configured {
        return Verdict::Leave {
            reason: NO_BACKUP_POLICY,
            message: "backupPolicy was removed; no final backup".to_owned(),
        };
    }
    let attempts = Attempts {
        attempt: facts.attempt,
        round_start: 1,
        retry_limit: None,
    };
    let key = key(facts.attempt);
    let name = job_name.unwrap_or(&key).to_owned();
    match job_step(facts.job, attempts, &Backoff::JOB_STEP, facts.now) {
        JobStep::Start => Verdict::Start {
            message: format!("starting final backup Job {key}"),
            key,
        },
        JobStep::Running => Verdict::Wait {
            message: format!("final backup Job {name} is running"),
            recheck: None,
        },
        JobStep::Succeeded => Verdict::Leave {
            reason: FINAL_BACKUP_SUCCEEDED,
            message: format!("final backup Job {name} succeeded"),
        },
        JobStep::Backoff { failure, at, wait } => Verdict::Failed(Failure::Backoff {
            message: format!(
                "final backup Job {name} {failure}; retrying at {}; set {SKIP_FINAL_BACKUP}=true to delete without it",
                retry_time(at)
            ),
            wait,
        }),
        JobStep::Retry { failure } | JobStep::Exhausted { failure } => {
            Verdict::Failed(Failure::Retry {
                next: facts.attempt.saturating_add(1),
                message: format!("final backup Job {name} {failure}; trying again"),
            })
        }
    }
}

/// Turn a verdict into a decision, given the machine's finalized state, its Finalizing
/// state for an attempt, and its action running a final backup Job.
pub fn decision<S, A>(
    verdict: Verdict,
    finalized: impl FnOnce() -> S,
    finalizing: impl FnOnce(u32) -> S,
    run: impl FnOnce(String) -> A,
) -> Decision<S, A> {
    verdict.decision(
        finalized,
        FINAL_BACKUP_RUNNING,
        Vec::new(),
        run,
        |failure| match failure {
            Failure::Backoff { message, wait } => Decision::stay(FINAL_BACKUP_FAILED, message)
                .degraded()
                .requeue(wait),
            Failure::Retry { next, message } => {
                Decision::go(finalizing(next), FINAL_BACKUP_RETRIED, message)
            }
        },
    )
}

/// A machine's whole Finalizing state at `attempt`, among its owned `jobs`: the
/// attempt's Job is read ([`step_named`]: messages name it), the verdict turned into a
/// decision ([`decision`]), and the stale attempts' Jobs deleted ([`stale`]).
pub fn finalizing<S: States, A: JobActions>(
    configured: bool,
    skip: bool,
    attempt: u32,
    jobs: &[JobView],
    now: DateTime<Utc>,
) -> Decision<S, A> {
    let job = job_by_key(jobs, &key(attempt));
    let facts = Facts {
        configured,
        skip,
        attempt,
        job: job.map(|j| &j.outcome),
        now,
    };
    decision(
        step_named(facts, job.map(|j| j.name.as_str())),
        S::finalized,
        S::finalizing,
        |key| A::run_backup(key, BackupKind::Final),
    )
    .with_actions(stale(attempt, jobs).into_iter().map(A::delete_job))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machines::common::actions::JobAction;
    use crate::machines::common::testing;

    /// A machine's deletion states, and a state before deletion.
    #[derive(Debug, Clone, PartialEq)]
    enum State {
        Serving,
        Finalizing { attempt: u32 },
        Finalized,
    }
    impl_states!(State);

    /// A machine's actions: its Job actions alone.
    type Action = JobAction;

    /// Final-backup retries keep counting attempts but keep only the
    /// latest few Jobs.
    #[test]
    fn final_backup_retries_keep_only_the_latest_jobs() {
        let jobs: Vec<JobView> = (1..=4)
            .map(|n| testing::job("db", &key(n), Purpose::FinalBackup, testing::failed(900)))
            .collect();
        let d: Decision<State, Action> = deleting(
            &State::Finalizing { attempt: 5 },
            true,
            false,
            &jobs,
            testing::t(1000),
        );
        let mut pruned: Vec<&str> = d
            .actions()
            .iter()
            .filter_map(|a| match a {
                Action::DeleteJob { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        pruned.sort_unstable();
        assert_eq!(pruned, ["db-final-backup-1", "db-final-backup-2"]);
        assert!(d.actions().contains(&Action::RunBackup {
            key: "final-backup-5".to_owned(),
            kind: BackupKind::Final
        }));
    }

    #[test]
    fn deletion_begins_from_any_state_and_stays_once_finalized() {
        let d: Decision<State, Action> = deleting(&State::Serving, true, false, &[], testing::t(0));
        assert_eq!(d.reason(), DELETION_REQUESTED);
        let d: Decision<State, Action> =
            deleting(&State::Finalized, true, false, &[], testing::t(0));
        assert_eq!(d.reason(), FINALIZED);
    }

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1000, 0).unwrap_or_default()
    }

    fn facts(job: Option<&JobOutcome>) -> Facts<'_> {
        Facts {
            configured: true,
            skip: false,
            attempt: 1,
            job,
            now: now(),
        }
    }

    #[test]
    fn without_a_policy_or_with_skip_deletion_releases_at_once() {
        assert!(matches!(
            entry(false, false),
            Entry::Release {
                reason: NO_BACKUP_POLICY,
                ..
            }
        ));
        assert!(matches!(
            entry(true, true),
            Entry::Release {
                reason: FINAL_BACKUP_SKIPPED,
                ..
            }
        ));
        assert!(matches!(entry(true, false), Entry::Backup { .. }));
    }

    #[test]
    fn the_finalizer_waits_for_the_final_backup_to_succeed() {
        assert!(matches!(step(facts(None)), Verdict::Start { key, .. } if key == "final-backup-1"));
        assert!(matches!(
            step(facts(Some(&JobOutcome::Running))),
            Verdict::Wait { .. }
        ));
        let done = JobOutcome::Succeeded { at: now() };
        assert!(matches!(
            step(facts(Some(&done))),
            Verdict::Leave {
                reason: FINAL_BACKUP_SUCCEEDED,
                ..
            }
        ));
    }

    #[test]
    fn a_failed_final_backup_is_degraded_then_retried() {
        let failed = JobOutcome::Failed {
            at: now(),
            reason: "BackoffLimitExceeded".to_owned(),
            message: String::new(),
        };
        let v = step(facts(Some(&failed)));
        assert!(
            matches!(&v, Verdict::Failed(Failure::Backoff { message, .. }) if message.contains("BackoffLimitExceeded")),
            "{v:?}"
        );
        let later = Facts {
            now: now() + chrono::Duration::seconds(10),
            ..facts(Some(&failed))
        };
        assert!(matches!(
            step(later),
            Verdict::Failed(Failure::Retry { next: 2, .. })
        ));
    }

    #[test]
    fn skipping_releases_even_while_a_backup_fails() {
        let failed = JobOutcome::Failed {
            at: now(),
            reason: "DeadlineExceeded".to_owned(),
            message: String::new(),
        };
        let skip = Facts {
            skip: true,
            ..facts(Some(&failed))
        };
        assert!(matches!(
            step(skip),
            Verdict::Leave {
                reason: FINAL_BACKUP_SKIPPED,
                ..
            }
        ));
    }
}
