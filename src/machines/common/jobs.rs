//! Run-once Jobs: building them with deterministic names, and reading their outcome.
//!
//! A machine step that runs something to completion (an upgrade hook, a backup, a
//! promotion) does it with a Job whose name is a pure function of what the step is for
//! (its *key*, for example `pre-2-1a2b3c4d-1`: hook, ordinal, hash of target and pod,
//! attempt). Creating it is therefore idempotent (`AlreadyExists` means it already runs),
//! and after a restart the machine finds the same Job and reads its outcome instead of
//! running the step again. Retries are new attempts with new keys, never a rerun of a
//! finished Job, so every Job's outcome is final and readable.
//!
//! # Bounded, without a TTL
//! No Job sets `ttlSecondsAfterFinished`: a machine reads a Job's outcome to decide (a
//! hook, a promotion, a final backup), and a TTL could delete the Job before that read,
//! which for a hook or a promotion would run the step again. Instead each machine prunes
//! its own Jobs once their outcome is recorded, as a CronJob's history limits do: hook
//! and survey Jobs at rest, on-demand backup Jobs beyond the newest few of each outcome
//! (their tokens are recorded as served, [`super::on_demand`]), final-backup Jobs of all
//! but the latest few attempts ([`super::finalize`]). A TTL someone else sets is safe for
//! on-demand backups (a served token never runs again, and a Job gone before its outcome
//! was read is reported, not rerun) and for final backups (a missing attempt's Job is
//! created again: one more backup, never a release without one).
//!
//! # Evidence kept until it is read
//! Every run-once Job ([`RunOnce`]: hooks, on-demand and final backups, promotions,
//! surveys) is created with the [`OUTCOME_FINALIZER`], as Kubernetes' own Job
//! controller keeps a tracking finalizer on its pods until it has counted them. Whoever
//! deletes such a Job (a person, a TTL controller, a namespace cleanup) only marks it
//! for deletion: it stays, with its outcome, until the operator removes the finalizer.
//! The operator does that only once the outcome is recorded in the owner's status, that
//! is in a state persisted after the one that read it: at rest for every finished Job
//! ([`release_finished`](super::actions::release_finished)), and before the owner's own finalizer goes for every Job left
//! ([`release_all`](super::actions::release_all)). The removal is a merge patch preconditioned on the Job's UID and
//! the resourceVersion read ([`JobAction::ReleaseJob`](super::actions::JobAction::ReleaseJob)), so a Job that changed since is
//! looked at again first. If the finalizer is removed by someone else and the Job goes
//! before its outcome was read, the machine says so (`Degraded`, naming what to do),
//! never only in its history.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::meta::{JOB_KEY, JOB_PURPOSE, MAX_JOB_NAME, OUTCOME_FINALIZER, Owner, child_name};
use crate::engine::Decision;

/// What a Job is for: the value of [`JOB_PURPOSE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString)]
#[strum(serialize_all = "kebab-case")]
pub enum Purpose {
    /// An upgrade hook (pre or post).
    Hook,
    /// A backup, scheduled or on demand.
    Backup,
    /// The backup taken before the finalizer is released.
    FinalBackup,
    /// A primary promotion.
    Promote,
}

impl Purpose {
    /// The label value.
    pub fn label(self) -> &'static str {
        self.into()
    }

    /// Whether this Job takes a backup (so its outcome is a `lastBackup`).
    pub fn is_backup(self) -> bool {
        matches!(self, Purpose::Backup | Purpose::FinalBackup)
    }
}

/// How a Job ended, or that it has not yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobOutcome {
    /// Not finished (including not yet started).
    Running,
    /// Completed successfully.
    Succeeded {
        /// When it completed.
        at: DateTime<Utc>,
    },
    /// Failed for good (`backoffLimit` or `activeDeadlineSeconds` reached).
    Failed {
        /// When it was marked failed.
        at: DateTime<Utc>,
        /// The Job's `Failed` condition reason (`BackoffLimitExceeded`, `DeadlineExceeded`).
        reason: String,
        /// The condition's message.
        message: String,
    },
}

impl JobOutcome {
    /// When the Job finished, if it has.
    pub fn finished_at(&self) -> Option<DateTime<Utc>> {
        match self {
            JobOutcome::Running => None,
            JobOutcome::Succeeded { at } | JobOutcome::Failed { at, .. } => Some(*at),
        }
    }

    /// A one-line description: `Succeeded`, `Running`, or `Failed (reason: message)`.
    pub fn describe(&self) -> String {
        match self {
            JobOutcome::Running => "Running".to_owned(),
            JobOutcome::Succeeded { .. } => "Succeeded".to_owned(),
            JobOutcome::Failed {
                reason, message, ..
            } if message.is_empty() => format!("Failed ({reason})"),
            JobOutcome::Failed {
                reason, message, ..
            } => format!("Failed ({reason}: {message})"),
        }
    }
}

/// What a machine needs to know of one owned Job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobView {
    /// The Job's name.
    pub name: String,
    /// The Job's UID (for preconditioned deletes).
    pub uid: String,
    /// Its run-once key ([`JOB_KEY`]), if it has one (CronJob-made Jobs do not).
    pub key: Option<String>,
    /// What it is for ([`JOB_PURPOSE`]), if labelled.
    pub purpose: Option<Purpose>,
    /// When it was created.
    pub created: Option<DateTime<Utc>>,
    /// How it ended.
    pub outcome: JobOutcome,
    /// `Some` while it carries the [`OUTCOME_FINALIZER`]: what removing it needs.
    pub held: Option<Hold>,
}

/// What removing the [`OUTCOME_FINALIZER`] from a Job needs: the version it was read at
/// (the removal is preconditioned on it) and the finalizers to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// `metadata.resourceVersion` as read.
    pub resource_version: String,
    /// The Job's other finalizers, kept as they were.
    pub others: Vec<String>,
}

/// The Jobs for `purpose` that have finished: their outcome is read, so at rest nothing
/// needs them any more.
pub fn finished(jobs: &[JobView], purpose: Purpose) -> impl Iterator<Item = &JobView> {
    jobs.iter()
        .filter(move |j| j.purpose == Some(purpose) && j.outcome != JobOutcome::Running)
}

/// Convert an API timestamp.
pub fn time(t: &Time) -> DateTime<Utc> {
    DateTime::from_timestamp(t.0.as_second(), 0).unwrap_or_default()
}

/// Read a Job's outcome from its conditions.
pub fn outcome(job: &Job) -> JobOutcome {
    let status = job.status.as_ref();
    let conditions = status
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let created = job.metadata.creation_timestamp.as_ref().map(time);
    for c in conditions.iter().filter(|c| c.status == "True") {
        let at = c
            .last_transition_time
            .as_ref()
            .map(time)
            .or_else(|| status.and_then(|s| s.completion_time.as_ref()).map(time))
            .or(created)
            .unwrap_or_default();
        match c.type_.as_str() {
            "Complete" => return JobOutcome::Succeeded { at },
            "Failed" => {
                return JobOutcome::Failed {
                    at,
                    reason: c.reason.clone().unwrap_or_else(|| "Failed".to_owned()),
                    message: c.message.clone().unwrap_or_default(),
                };
            }
            _ => {}
        }
    }
    JobOutcome::Running
}

/// Summarize a Job for a machine's observation.
pub fn view(job: &Job) -> JobView {
    let labels = job.metadata.labels.as_ref();
    JobView {
        name: job.metadata.name.clone().unwrap_or_default(),
        uid: job.metadata.uid.clone().unwrap_or_default(),
        key: labels.and_then(|l| l.get(JOB_KEY)).cloned(),
        purpose: labels
            .and_then(|l| l.get(JOB_PURPOSE))
            .and_then(|p| p.parse().ok()),
        created: job.metadata.creation_timestamp.as_ref().map(time),
        outcome: outcome(job),
        held: hold(job),
    }
}

/// What removing the [`OUTCOME_FINALIZER`] from `job` needs, if it carries it.
fn hold(job: &Job) -> Option<Hold> {
    let finalizers = job.metadata.finalizers.as_deref().unwrap_or_default();
    if !finalizers.iter().any(|f| f == OUTCOME_FINALIZER) {
        return None;
    }
    Some(Hold {
        resource_version: job.metadata.resource_version.clone().unwrap_or_default(),
        others: finalizers
            .iter()
            .filter(|f| *f != OUTCOME_FINALIZER)
            .cloned()
            .collect(),
    })
}

/// The pod a Job runs: one container, labels and annotations.
#[derive(Debug, Clone, Default)]
pub struct PodRecipe {
    /// Labels of the pod (the Job's own labels are added).
    pub labels: BTreeMap<String, String>,
    /// Annotations of the pod.
    pub annotations: BTreeMap<String, String>,
    /// The container.
    pub container: Container,
    /// The ServiceAccount to run as (default: the namespace's default).
    pub service_account_name: Option<String>,
}

/// A Job that runs its pod once: `backoffLimit: 0`, `restartPolicy: Never`, and an
/// optional deadline. Failures are retried by the machine as new attempts, never by the
/// Job controller, so each Job's outcome is one attempt's.
pub fn job_spec(
    pod: &PodRecipe,
    labels: &BTreeMap<String, String>,
    deadline: Option<i64>,
) -> JobSpec {
    let mut pod_labels = pod.labels.clone();
    pod_labels.extend(labels.clone());
    JobSpec {
        backoff_limit: Some(0),
        active_deadline_seconds: deadline,
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(pod_labels),
                annotations: (!pod.annotations.is_empty()).then(|| pod.annotations.clone()),
                ..ObjectMeta::default()
            }),
            spec: Some(PodSpec {
                restart_policy: Some("Never".to_owned()),
                service_account_name: pod.service_account_name.clone(),
                containers: vec![pod.container.clone()],
                ..PodSpec::default()
            }),
        },
        ..JobSpec::default()
    }
}

/// The name of the run-once Job `key` of `owner`.
pub fn job_name(owner: &str, key: &str) -> String {
    child_name(owner, key, MAX_JOB_NAME)
}

/// Everything a run-once Job is made of.
#[derive(Debug, Clone)]
pub struct RunOnce<'a> {
    /// The owner (the Job is named `{owner}-{key}`).
    pub owner: &'a Owner,
    /// The owner's standard labels (the key and purpose are added).
    pub labels: BTreeMap<String, String>,
    /// The deterministic key.
    pub key: &'a str,
    /// What the Job is for.
    pub purpose: Purpose,
    /// The pod it runs.
    pub pod: PodRecipe,
    /// `activeDeadlineSeconds`.
    pub deadline: Option<i64>,
}

impl RunOnce<'_> {
    /// The Job: named by its key, owned, labelled with its key and purpose, and held by
    /// the [`OUTCOME_FINALIZER`] until its outcome is recorded.
    pub fn build(&self) -> Job {
        let mut labels = self.labels.clone();
        labels.insert(JOB_KEY.to_owned(), self.key.to_owned());
        labels.insert(JOB_PURPOSE.to_owned(), self.purpose.label().to_owned());
        let mut metadata = self
            .owner
            .child(job_name(&self.owner.name, self.key), labels.clone());
        metadata.finalizers = Some(vec![OUTCOME_FINALIZER.to_owned()]);
        Job {
            spec: Some(job_spec(&self.pod, &labels, self.deadline)),
            metadata,
            status: None,
        }
    }
}

/// What a state that runs one Job at a time does next: leave, start the Job, wait for it,
/// or what it does about a failed attempt (`F`; [`std::convert::Infallible`] for a state
/// that leaves on a failure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<F> {
    /// Go to the state this one leaves to.
    Leave {
        /// The edge's reason.
        reason: &'static str,
        /// Why.
        message: String,
    },
    /// Create the Job and wait.
    Start {
        /// The Job's key.
        key: String,
        /// What is happening.
        message: String,
    },
    /// Wait for the running Job.
    Wait {
        /// What is happening.
        message: String,
        /// Look again this soon even without an event.
        recheck: Option<std::time::Duration>,
    },
    /// The attempt failed.
    Failed(F),
}

impl<F> Verdict<F> {
    /// The decision: go to `leave()` on [`Verdict::Leave`]; stay for `running` with the
    /// `upkeep` actions while the Job is started (by the action `run` makes of its key) or
    /// waited for; and `failed` on a failure.
    pub fn decision<S, A>(
        self,
        leave: impl FnOnce() -> S,
        running: &'static str,
        upkeep: Vec<A>,
        run: impl FnOnce(String) -> A,
        failed: impl FnOnce(F) -> Decision<S, A>,
    ) -> Decision<S, A> {
        match self {
            Verdict::Leave { reason, message } => Decision::go(leave(), reason, message),
            Verdict::Start { key, message } => Decision::stay(running, message)
                .with_actions(upkeep)
                .with_actions([run(key)]),
            Verdict::Wait { message, recheck } => Decision::stay(running, message)
                .with_actions(upkeep)
                .requeue_if_any(recheck),
            Verdict::Failed(failure) => failed(failure),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::machines::common::testing;

    fn job_with(conditions: Vec<(&str, &str, Option<&str>)>) -> Job {
        Job {
            status: Some(JobStatus {
                conditions: Some(
                    conditions
                        .into_iter()
                        .map(|(t, s, r)| JobCondition {
                            type_: t.to_owned(),
                            status: s.to_owned(),
                            reason: r.map(str::to_owned),
                            last_transition_time: Some(Time(
                                Timestamp::from_second(60).unwrap_or_default(),
                            )),
                            ..JobCondition::default()
                        })
                        .collect(),
                ),
                ..JobStatus::default()
            }),
            ..Job::default()
        }
    }

    #[test]
    fn a_job_without_a_final_condition_is_running() {
        assert_eq!(outcome(&Job::default()), JobOutcome::Running);
        assert_eq!(
            outcome(&job_with(vec![(
                "FailureTarget",
                "True",
                Some("BackoffLimitExceeded")
            )])),
            JobOutcome::Running
        );
    }

    #[test]
    fn complete_and_failed_conditions_are_final_outcomes() {
        let at = DateTime::from_timestamp(60, 0).unwrap_or_default();
        assert_eq!(
            outcome(&job_with(vec![("Complete", "True", None)])),
            JobOutcome::Succeeded { at }
        );
        assert_eq!(
            outcome(&job_with(vec![(
                "Failed",
                "True",
                Some("DeadlineExceeded")
            )])),
            JobOutcome::Failed {
                at,
                reason: "DeadlineExceeded".to_owned(),
                message: String::new()
            }
        );
    }

    #[test]
    fn a_run_once_job_never_retries_by_itself_and_carries_its_key() {
        let owner = testing::owner_db();
        let job = RunOnce {
            owner: &owner,
            labels: BTreeMap::new(),
            key: "pre-2-abc-1",
            purpose: Purpose::Hook,
            pod: PodRecipe::default(),
            deadline: Some(60),
        }
        .build();
        assert_eq!(job.metadata.name.as_deref(), Some("db-pre-2-abc-1"));
        testing::assert_runs_once(&job, 60);
        assert_eq!(
            job.metadata.finalizers,
            Some(vec![OUTCOME_FINALIZER.to_owned()]),
            "held until its outcome is recorded"
        );
        let pod = job.spec.and_then(|s| s.template.metadata);
        let pod_label = |key| testing::label(pod.as_ref(), key);
        assert_eq!(pod_label(JOB_KEY).as_deref(), Some("pre-2-abc-1"));
        assert_eq!(pod_label(JOB_PURPOSE).as_deref(), Some("hook"));
    }
}
