//! The on-demand backup sub-machine: what every Lockstep machine does with a token in
//! [`BACKUP_NOW`].
//!
//! ```text
//!   Ready ── new token, backups configured: create its Job ──► BackingUp(token)
//!     │                    BackingUp ── Job succeeded ──────────────────────► Ready
//!     │                              ── Job failed ─────────────────────────► Ready
//!     │                              ── Job gone before its outcome was read ► Ready
//!     └── new token, backups not configured: stays (the machine says why)
//! ```
//!
//! # Guarantees
//! - A token is served by at most one Job. The Job is created by the transition that
//!   persists `BackingUp(token)`, and that same write records the token in the record's
//!   `acks` ([`crate::engine::Machine::acks`], under [`BACKUP_NOW`]). From then on the
//!   token is *served*: a served token is never acted on again, whether its Job still
//!   exists or was pruned (by [`prune`], a TTL controller or a person). A Job that
//!   disappears before its outcome was read is reported ([`BACKUP_LOST`]) and not run
//!   again. A failed backup is not retried; a new token asks for a new one.
//! - If the write after creating the Job is lost, the next reconcile finds the Job of a
//!   token not yet served and follows it ([`Request::Start`] without creating).
//! - Every request has a Job of its own, a token set again after another was served
//!   included: a Job's key chains the token to the key of the Job that served the token
//!   before it ([`key`]), recorded in the same write under [`BACKUP_JOB`]. The old Job
//!   of the same token (finished, or pruned and gone) is never taken for the new
//!   request's, and its name is never used twice (found by the model check).
//! - The Job is created only while backups are configured; a Job that exists is followed
//!   to its end even if the configuration is removed meanwhile.
//! - Finished on-demand Jobs are bounded like a CronJob's history: at rest, beyond the
//!   newest [`HISTORY_LIMIT`] of each outcome, the oldest are deleted ([`prune`]).
//!   Their tokens are served already, and the status keeps the last backup's outcome.
//!
//! # Assumptions
//! - The machine persists the token in its backing-up state, declares it in
//!   [`crate::engine::Machine::acks`] under [`BACKUP_NOW`], and goes back to its ready
//!   state on every [`Verdict::Leave`](super::jobs::Verdict::Leave).
//! - A Job is not deleted between its creation and the status write that follows it
//!   (that window is one request long unless the operator crashes in it).
//!
//! [`BACKUP_NOW`]: super::annotations::BACKUP_NOW

use super::annotations::BACKUP_NOW;
use super::backup::BackupKind;
use crate::engine::World;
use std::convert::Infallible;

use super::actions::JobActions;
use super::jobs::{self, JobOutcome, JobView, Purpose};
use super::meta::{OUTCOME_FINALIZER, short_hash};
use super::observe::{Observed, job_by_key};
use crate::engine::Decision;

/// Edge reason: an on-demand backup was requested.
pub const BACKUP_REQUESTED: &str = "BackupRequested";
/// Edge reason: the on-demand backup succeeded.
pub const BACKUP_SUCCEEDED: &str = "BackupSucceeded";
/// Edge reason: the on-demand backup failed.
pub const BACKUP_FAILED: &str = "BackupFailed";
/// Edge reason: the backup Job was deleted before its outcome was read; it is not run
/// again for the same token.
pub const BACKUP_LOST: &str = "BackupLost";
/// Stay reason: the on-demand backup Job is being created or runs.
pub const BACKUP_RUNNING: &str = "BackupRunning";
/// Stay reason: a backup was requested while backups are not configured.
pub const BACKUP_NOT_CONFIGURED: &str = "BackupNotConfigured";
/// Stay reason (Degraded, at rest): the backup the current token asked for was lost
/// before its outcome was recorded ([`BACKUP_LOST`]); a new token or removing the
/// annotation clears it.
pub const BACKUP_OUTCOME_UNKNOWN: &str = "BackupOutcomeUnknown";

/// This file, which takes the on-demand backup's edges.
pub const SOURCE: &str = file!();

/// The way out of an on-demand backup that does not finish (named when its deadline has
/// passed): its Job's pod says why it does not run; the Job's `activeDeadlineSeconds`
/// ends it, and a new [`BACKUP_NOW`] token asks for another backup once it has.
pub const WAY_OUT: &str = "see why the backup Job's pod does not finish (kubectl describe job); its activeDeadlineSeconds ends it, and a new lockstep.dev/backup-now token then asks for another backup";

/// The on-demand backup's rows of a machine's [`edges!`](crate::edges) table, the same in
/// every machine: `on_demand_edges!(backup: "spec.backup");` declares Ready -> BackingUp
/// and BackingUp's three ways back to Ready (`backup` names the spec field that
/// configures backups).
macro_rules! on_demand_edges {
    (@edges $kind:ident [$($done:tt)*] [$($rest:tt)*] backup: $field:literal $(,)?) => {
        $crate::edges!(@rows $kind [$($done)*]
            Ready -> BackingUp: $crate::machines::common::on_demand::BACKUP_REQUESTED,
                "lockstep.dev/backup-now has a token not yet served (its Job is created with the transition)",
                $crate::machines::common::on_demand::SOURCE;
            BackingUp -> {
                Ready: $crate::machines::common::on_demand::BACKUP_SUCCEEDED,
                    "the on-demand backup Job succeeded",
                    $crate::machines::common::on_demand::SOURCE;
                Ready: $crate::machines::common::on_demand::BACKUP_FAILED,
                    "the on-demand backup Job failed",
                    $crate::machines::common::on_demand::SOURCE;
                Ready: $crate::machines::common::on_demand::BACKUP_LOST,
                    concat!("the backup Job is gone before its outcome was read (or ", $field,
                        " was removed before a pre-acks record created it); the token is not served again"),
                    $crate::machines::common::on_demand::SOURCE;
            }
            $($rest)*)
    };
}
pub(crate) use on_demand_edges;

/// How many finished on-demand backup Jobs of each outcome (succeeded, failed) are kept,
/// as a CronJob's `successfulJobsHistoryLimit` and `failedJobsHistoryLimit` do.
pub const HISTORY_LIMIT: usize = 3;

/// The [`crate::engine::Machine::acks`] kind under which the record keeps the key of
/// the Job serving the last token served: the link the next request's key chains to.
pub const BACKUP_JOB: &str = "lockstep.dev/backup-job";

/// The key of the on-demand backup Job for a `backup-now` token, chained to the key of
/// the Job that served the token before it (`previous`, the record's [`BACKUP_JOB`]):
/// the same token asked again after another one gets a key of its own. With nothing
/// before it (or a record from before keys were chained), the token's alone.
pub fn key(token: &str, previous: Option<&str>) -> String {
    match previous {
        None => format!("backup-{}", short_hash(&[token])),
        Some(previous) => format!("backup-{}", short_hash(&[token, previous])),
    }
}

/// The key of the Job a backing-up state serves: the one it recorded (`job`), or, for a
/// record from before keys were chained, the token's own.
pub fn serving(token: &str, job: Option<&str>) -> String {
    job.map_or_else(|| key(token, None), ToOwned::to_owned)
}

/// The `(kind, value)` pairs a backing-up state serving `token` with the Job of key
/// `job` declares in [`crate::engine::Machine::acks`].
pub fn acks(token: &str, job: Option<&str>) -> Vec<(&'static str, String)> {
    vec![
        (BACKUP_NOW, token.to_owned()),
        (BACKUP_JOB, serving(token, job)),
    ]
}

/// What the ready state does with the [`BACKUP_NOW`] annotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// No token, or it was served already: nothing to do.
    Idle,
    /// Go to the backing-up state for `token` ([`BACKUP_REQUESTED`]), creating its Job
    /// (`create`) in the same transition.
    Start {
        /// The token to persist.
        token: String,
        /// The key of the token's Job, persisted with it.
        key: String,
        /// Whether to create the Job (false: it exists already, from a transition whose
        /// write was lost).
        create: bool,
        /// Why.
        message: String,
    },
    /// A new token, but backups are not configured: the machine says so its own way
    /// ([`BACKUP_NOT_CONFIGURED`]).
    NotConfigured {
        /// The ignored token.
        token: String,
    },
}

/// What to do with the annotation's `token`, given the token last served and its Job's
/// key (`served`, from [`crate::engine::World::acked`] of [`BACKUP_NOW`] and
/// [`BACKUP_JOB`]), whether the Job of a key exists and whether backups are
/// `configured`.
pub fn request(
    token: Option<&str>,
    served: Served<'_>,
    job_exists: impl FnOnce(&str) -> bool,
    configured: bool,
) -> Request {
    let Some(token) = token else {
        return Request::Idle;
    };
    if served.token == Some(token) {
        return Request::Idle;
    }
    let key = key(token, served.job);
    let exists = job_exists(&key);
    if configured || exists {
        Request::Start {
            token: token.to_owned(),
            key,
            create: !exists,
            message: format!("on-demand backup requested ({BACKUP_NOW}={token})"),
        }
    } else {
        Request::NotConfigured {
            token: token.to_owned(),
        }
    }
}

/// The last request served, as the record's acks keep it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Served<'a> {
    /// Its token ([`BACKUP_NOW`]).
    pub token: Option<&'a str>,
    /// Its Job's key ([`BACKUP_JOB`]); absent in a record from before keys were chained.
    pub job: Option<&'a str>,
}

impl<'a> Served<'a> {
    /// The last request `world`'s record served.
    pub fn of<O>(world: &'a World<O>) -> Self {
        Served {
            token: world.acked(BACKUP_NOW),
            job: world.acked(BACKUP_JOB),
        }
    }
}

/// [`request`] for the token `o` observes, against the Jobs it observes.
pub fn requested<R, M>(o: &Observed<R, M>, served: Served<'_>, configured: bool) -> Request {
    request(
        o.requests.backup_now.as_deref(),
        served,
        |key| o.job(key).is_some(),
        configured,
    )
}

impl Request {
    /// A [`Request::Start`] as the ready state's transition to the backing-up state
    /// `backing_up(token, key)`, creating the Job of that key unless it exists; any other
    /// request as it is.
    ///
    /// # Errors
    /// The request, if it does not start a backup.
    pub fn start<S, A: JobActions>(
        self,
        backing_up: impl FnOnce(String, String) -> S,
    ) -> Result<Decision<S, A>, Request> {
        let Request::Start {
            token,
            key,
            create,
            message,
        } = self
        else {
            return Err(self);
        };
        let run = create.then(|| A::run_backup(key.clone(), BackupKind::OnDemand));
        let go = Decision::go(backing_up(token, key), BACKUP_REQUESTED, message);
        Ok(if let Some(run) = run {
            go.with_actions([run])
        } else {
            go
        })
    }
}

/// What the ready state says while the backup that the annotation's `token` asked for
/// was lost ([`BACKUP_LOST`] entered the state, and the token is still the one served):
/// the Degraded message of [`BACKUP_OUTCOME_UNKNOWN`], naming the token and what to do.
/// `None` once a new token is set or the annotation is removed.
pub fn lost<O>(world: &World<O>, token: Option<&str>) -> Option<String> {
    let token = token.filter(|t| world.acked(BACKUP_NOW) == Some(*t))?;
    (world.entered_by == BACKUP_LOST).then(|| {
        format!(
            "the outcome of the on-demand backup for {BACKUP_NOW}={token} is unknown: its Job is gone (its {OUTCOME_FINALIZER} finalizer was removed) before the outcome was recorded, so that backup may not exist; set a new {BACKUP_NOW} token to take another backup, or remove the annotation to accept this"
        )
    })
}

/// The finished on-demand backup Jobs beyond the newest [`HISTORY_LIMIT`] of each
/// outcome, oldest first: what the ready state deletes. Only Jobs of served tokens are
/// ever finished at rest, so pruning them never makes a token run again.
pub fn prune(jobs: &[JobView]) -> Vec<&JobView> {
    let mut pruned = Vec::new();
    for succeeded in [true, false] {
        let mut finished: Vec<&JobView> = jobs
            .iter()
            .filter(|j| j.purpose == Some(Purpose::Backup))
            .filter(|j| j.key.as_deref().is_some_and(|k| k.starts_with("backup-")))
            .filter(|j| match j.outcome {
                JobOutcome::Running => false,
                JobOutcome::Succeeded { .. } => succeeded,
                JobOutcome::Failed { .. } => !succeeded,
            })
            .collect();
        // Newest first: by creation, then by the time it finished, then by name.
        finished.sort_by(|a, b| {
            (b.created, b.outcome.finished_at(), &b.name).cmp(&(
                a.created,
                a.outcome.finished_at(),
                &a.name,
            ))
        });
        pruned.extend(finished.into_iter().skip(HISTORY_LIMIT));
    }
    pruned.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
    pruned
}

/// What the backing-up state sees.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The token being served.
    pub token: &'a str,
    /// The key of the Job serving it ([`serving`]).
    pub key: &'a str,
    /// Whether the record says the token's Job was created (the token is acked): a
    /// record persisted before acks existed may be in the backing-up state without it.
    pub created: bool,
    /// Whether backups are still configured.
    pub configured: bool,
    /// The spec field that configures backups, for messages (`backupPolicy`).
    pub field: &'a str,
    /// The outcome and name of the token's Job, if it exists.
    pub job: Option<(&'a JobOutcome, &'a str)>,
    /// The owner's name (the token's Job is named after it and the Job's key).
    pub owner: &'a str,
    /// How long the backing-up state has lasted: a Job created moments ago may not be
    /// in the cache yet ([`UNSEEN_GRACE`]).
    pub in_state: std::time::Duration,
}

impl<'a> Facts<'a> {
    /// What the backing-up state sees of `world` while it serves `token` with the Job
    /// of `key`: whether the record acks it, that Job, and how long the state has
    /// lasted. `configured` says whether the spec field `field` still configures
    /// backups.
    pub fn of<R, M>(
        world: &'a World<Observed<R, M>>,
        (token, key): (&'a str, &'a str),
        configured: bool,
        field: &'a str,
    ) -> Self {
        Facts {
            token,
            key,
            created: world.acked(BACKUP_NOW) == Some(token),
            configured,
            field,
            job: job(&world.observed.jobs, key),
            owner: &world.observed.name,
            in_state: world.in_state_for(),
        }
    }
}

/// What the backing-up state waits for: the Job `name` serving `token` to finish.
fn waiting(token: &str, name: &str) -> String {
    format!("waiting for on-demand backup Job {name} ({BACKUP_NOW}={token}) to finish")
}

/// How long a Job the record says was created may go unobserved before it counts as
/// lost: the cache lags its own creation by a watch event, which may also be late.
pub const UNSEEN_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// What the backing-up state does: a failed backup goes back too.
pub type Verdict = jobs::Verdict<Infallible>;

/// Decide the backing-up state.
pub fn step(facts: Facts<'_>) -> Verdict {
    let Some((outcome, name)) = facts.job else {
        if !facts.created && !facts.configured {
            return Verdict::Leave {
                reason: BACKUP_LOST,
                message: format!(
                    "{} was removed before the backup Job was created; no backup taken",
                    facts.field
                ),
            };
        }
        if facts.created && facts.in_state < UNSEEN_GRACE {
            // Not in the cache yet: said as while it runs, so that Progressing is
            // written once for the wait.
            return Verdict::Wait {
                message: waiting(facts.token, &jobs::job_name(facts.owner, facts.key)),
                recheck: Some(UNSEEN_GRACE - facts.in_state),
            };
        }
        if facts.created {
            return Verdict::Leave {
                reason: BACKUP_LOST,
                message: format!(
                    "the on-demand backup Job for {BACKUP_NOW}={} is gone before its outcome was read (its {OUTCOME_FINALIZER} finalizer was removed); it is not run again (set a new {BACKUP_NOW} token to take another backup)",
                    facts.token
                ),
            };
        }
        // A record from before acks existed: its Job may not have been created yet.
        return Verdict::Start {
            key: facts.key.to_owned(),
            message: format!("starting on-demand backup for {BACKUP_NOW}={}", facts.token),
        };
    };
    match outcome {
        JobOutcome::Running => Verdict::Wait {
            message: waiting(facts.token, name),
            recheck: None,
        },
        JobOutcome::Succeeded { .. } => Verdict::Leave {
            reason: BACKUP_SUCCEEDED,
            message: format!("on-demand backup Job {name} succeeded"),
        },
        failed @ JobOutcome::Failed { .. } => Verdict::Leave {
            reason: BACKUP_FAILED,
            message: format!(
                "on-demand backup Job {name} {}; set a new {BACKUP_NOW} token to try again",
                failed.describe()
            ),
        },
    }
}

/// Turn a verdict into a decision, given the machine's ready state, the `upkeep` its
/// stays carry, and its action running an on-demand backup Job.
pub fn decision<S, A>(
    verdict: Verdict,
    back: impl FnOnce() -> S,
    upkeep: Vec<A>,
    run: impl FnOnce(String) -> A,
) -> Decision<S, A> {
    verdict.decision(back, BACKUP_RUNNING, upkeep, run, |never| match never {})
}

/// A machine's whole BackingUp state: [`step`] on `facts`, then [`decision`] with the
/// machine's ready state `back`, its `upkeep` and its backup action.
pub fn backing_up<S, A: JobActions>(facts: Facts<'_>, back: S, upkeep: Vec<A>) -> Decision<S, A> {
    decision(
        step(facts),
        || back,
        upkeep,
        |key| A::run_backup(key, BackupKind::OnDemand),
    )
}

/// The outcome and name of the Job of `key` among `jobs`, for [`Facts::job`].
pub fn job<'a>(jobs: &'a [JobView], key: &str) -> Option<(&'a JobOutcome, &'a str)> {
    job_by_key(jobs, key).map(|j| (&j.outcome, j.name.as_str()))
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;

    use super::*;

    fn facts<'a>(job: Option<(&'a JobOutcome, &'a str)>) -> Facts<'a> {
        Facts {
            token: "t1",
            key: "backup-t1",
            created: true,
            configured: true,
            field: "spec.backup",
            job,
            owner: "db",
            in_state: UNSEEN_GRACE,
        }
    }

    #[test]
    fn a_job_created_moments_ago_but_not_yet_in_the_cache_is_waited_for_not_lost() {
        let mut young = facts(None);
        young.in_state = std::time::Duration::from_secs(1);
        assert!(matches!(
            step(young),
            Verdict::Wait { recheck: Some(after), .. } if after == UNSEEN_GRACE - std::time::Duration::from_secs(1)
        ));
        assert!(matches!(
            step(facts(None)),
            Verdict::Leave {
                reason: BACKUP_LOST,
                ..
            }
        ));
    }

    fn served<'a>(token: &'a str, job: &'a str) -> Served<'a> {
        Served {
            token: Some(token),
            job: Some(job),
        }
    }

    #[test]
    fn a_new_token_starts_a_backup_once() {
        let none = Served::default();
        assert_eq!(request(None, none, |_| false, true), Request::Idle);
        assert!(matches!(
            request(Some("t1"), none, |_| false, true),
            Request::Start { token, create: true, .. } if token == "t1"
        ));
        // Served: whether or not its Job is still there.
        let t1 = key("t1", None);
        assert_eq!(
            request(Some("t1"), served("t1", &t1), |_| false, true),
            Request::Idle
        );
        assert_eq!(
            request(Some("t1"), served("t1", &t1), |k| k == t1, true),
            Request::Idle
        );
        // The Job exists but the write that served it was lost: follow it, do not create.
        assert!(matches!(
            request(Some("t1"), none, |k| k == t1, false),
            Request::Start { create: false, .. }
        ));
        assert!(matches!(
            request(Some("t2"), served("t1", &t1), |_| false, true),
            Request::Start { create: true, .. }
        ));
        assert!(matches!(
            request(Some("t1"), none, |_| false, false),
            Request::NotConfigured { .. }
        ));
    }

    /// Found by the model check: t1, then t0, then t1 again was served by t1's first Job
    /// (its old outcome reported), or, once that Job was pruned, by a Job of the same name.
    #[test]
    fn a_token_set_again_after_another_was_served_gets_a_job_of_its_own() {
        let first = key("t1", None);
        let between = key("t0", Some(&first));
        let again = request(Some("t1"), served("t0", &between), |k| k == first, true);
        assert!(matches!(
            &again,
            Request::Start { key, create: true, .. } if *key != first && *key != between
        ));
        // The same history gives the same key: a lost write finds the Job it created.
        let Request::Start { key: again, .. } = again else {
            unreachable!("matched above")
        };
        assert!(matches!(
            request(Some("t1"), served("t0", &between), |k| k == again, true),
            Request::Start { create: false, .. }
        ));
        // A record from before keys were chained serves the token's own key.
        assert_eq!(serving("t1", None), first);
        assert_eq!(serving("t1", Some(&again)), again);
    }

    #[test]
    fn the_job_is_created_only_while_configured_and_followed_to_its_end() {
        // A record from before acks: the Job may not exist yet.
        let old = Facts {
            created: false,
            ..facts(None)
        };
        assert!(matches!(step(old), Verdict::Start { key: k, .. } if k == "backup-t1"));
        let unconfigured = Facts {
            configured: false,
            ..old
        };
        assert!(matches!(
            step(unconfigured),
            Verdict::Leave {
                reason: BACKUP_LOST,
                ..
            }
        ));
        // The Job was created and is gone before its outcome was read: not run again.
        assert!(matches!(
            step(facts(None)),
            Verdict::Leave {
                reason: BACKUP_LOST,
                ..
            }
        ));
        let running = Facts {
            configured: false,
            ..facts(Some((&JobOutcome::Running, "j")))
        };
        assert!(matches!(step(running), Verdict::Wait { .. }));
        let done = JobOutcome::Succeeded {
            at: DateTime::from_timestamp(0, 0).unwrap_or_default(),
        };
        assert!(matches!(
            step(facts(Some((&done, "j")))),
            Verdict::Leave {
                reason: BACKUP_SUCCEEDED,
                ..
            }
        ));
    }

    fn finished(key: &str, created: i64, ok: bool) -> JobView {
        let at = DateTime::from_timestamp(created + 5, 0).unwrap_or_default();
        JobView {
            name: format!("db-{key}"),
            uid: key.to_owned(),
            key: Some(key.to_owned()),
            purpose: Some(Purpose::Backup),
            created: DateTime::from_timestamp(created, 0),
            outcome: if ok {
                JobOutcome::Succeeded { at }
            } else {
                JobOutcome::Failed {
                    at,
                    reason: "BackoffLimitExceeded".to_owned(),
                    message: String::new(),
                }
            },
            held: None,
        }
    }

    #[test]
    fn finished_jobs_beyond_the_history_limit_of_each_outcome_are_pruned_oldest_first() {
        let mut jobs: Vec<JobView> = (0..5)
            .map(|i| finished(&format!("backup-s{i}"), i, true))
            .collect();
        jobs.extend((0..4).map(|i| finished(&format!("backup-f{i}"), 10 + i, false)));
        jobs.push(JobView {
            outcome: JobOutcome::Running,
            ..finished("backup-r", 0, true)
        });
        jobs.push(JobView {
            purpose: Some(Purpose::FinalBackup),
            ..finished("final-backup-1", 0, true)
        });
        let pruned: Vec<&str> = prune(&jobs).iter().map(|j| j.uid.as_str()).collect();
        assert_eq!(pruned, ["backup-s0", "backup-s1", "backup-f0"]);
    }

    #[test]
    fn a_failed_backup_is_not_retried() {
        let failed = JobOutcome::Failed {
            at: DateTime::from_timestamp(0, 0).unwrap_or_default(),
            reason: "BackoffLimitExceeded".to_owned(),
            message: String::new(),
        };
        assert!(matches!(
            step(facts(Some((&failed, "j")))),
            Verdict::Leave { reason: BACKUP_FAILED, message } if message.contains("BackoffLimitExceeded")
        ));
    }
}
