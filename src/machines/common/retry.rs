//! Retries of a step that runs a Job which may fail: exponential backoff and an attempt
//! budget, decided purely from the failed Job's recorded failure time and the clock.
//!
//! The machine persists two numbers in its state: the current `attempt` (from 1; it
//! names the attempt's Job) and the `round_start` (the attempt at which the current
//! retry budget began; a user's retry request starts a new round). The failure time comes
//! from the Job itself, so after a restart the same backoff is still in force.

use std::time::Duration;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::annotations;
use super::jobs::{JobOutcome, JobView};
use crate::engine::Decision;

/// The way out of a hook step that does not finish (named when Degraded): a new token in
/// [`annotations::RETRY_HOOK`] or [`annotations::SKIP_HOOK`].
pub const HOOK_WAY_OUT: &str = "annotate lockstep.dev/retry-hook=<new token> to run the hook again with a fresh budget, or lockstep.dev/skip-hook=<new token> to go on without it";

/// Exponential backoff: `base`, `2·base`, `4·base`, … capped at `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait after the first failure.
    pub base: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Backoff {
    /// The backoff Lockstep uses for failing Job steps: 10 s doubling up to 5 min.
    pub const JOB_STEP: Backoff = Backoff {
        base: Duration::from_secs(10),
        max: Duration::from_secs(300),
    };

    /// The wait after the `failures`-th consecutive failure (from 1).
    pub fn delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(20);
        self.base
            .checked_mul(1u32 << doublings)
            .unwrap_or(self.max)
            .min(self.max)
    }
}

/// Where a Job step stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobStep {
    /// The attempt's Job does not exist yet: create it.
    Start,
    /// The attempt's Job is running.
    Running,
    /// The attempt's Job succeeded.
    Succeeded,
    /// The attempt failed; the next may start at `at`, `wait` from now.
    Backoff {
        /// What failed, from the Job's condition.
        failure: String,
        /// When the next attempt may start.
        at: DateTime<Utc>,
        /// How long until then.
        wait: Duration,
    },
    /// The attempt failed and the next may start now.
    Retry {
        /// What failed.
        failure: String,
    },
    /// The attempt failed and the budget is spent; only a user can move this on.
    Exhausted {
        /// What failed.
        failure: String,
    },
}

/// The attempt numbers of a Job step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempts {
    /// The current attempt, from 1.
    pub attempt: u32,
    /// The attempt the current retry budget began with.
    pub round_start: u32,
    /// Retries allowed per round after the first attempt; `None` for unlimited.
    pub retry_limit: Option<u32>,
}

impl Attempts {
    /// Failures so far in this round, counting the current attempt if it failed.
    pub fn failures_in_round(&self) -> u32 {
        self.attempt.saturating_sub(self.round_start) + 1
    }

    /// `attempt 2 of 4` (or `attempt 2` when unlimited).
    pub fn describe(&self) -> String {
        match self.retry_limit {
            Some(limit) => format!(
                "attempt {} of {}",
                self.failures_in_round(),
                limit.saturating_add(1)
            ),
            None => format!("attempt {}", self.attempt),
        }
    }
}

/// The retry budget of a Job step that a user can renew with a retry token (an
/// annotation such as `lockstep.dev/retry-hook`): where the current round began and the
/// last token acted on. A state holds it with `#[serde(flatten)]` beside its `attempt`,
/// so the record keeps `roundStart` and `retryAck` at the state's own level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryBudget {
    /// The attempt the current retry budget began with (a new `lockstep.dev/retry-hook` or
    /// `lockstep.dev/retry-promote` token starts a new one; absent in records written
    /// before it existed: 1).
    #[serde(default = "first_attempt")]
    pub round_start: u32,
    /// The last `lockstep.dev/retry-hook` (DistributedDB) or `lockstep.dev/retry-promote`
    /// (PostgresCluster) token acted on, or present when the step began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_ack: Option<String>,
}

fn first_attempt() -> u32 {
    1
}

impl RetryBudget {
    /// A first round, from attempt 1. The retry token already `present` is acknowledged,
    /// so that only a new one acts.
    pub fn begin(present: Option<String>) -> Self {
        RetryBudget {
            round_start: 1,
            retry_ack: present,
        }
    }

    /// A fresh round from attempt 1 (the step moved on), the acknowledged token kept.
    pub fn restart(&self) -> Self {
        RetryBudget {
            round_start: 1,
            retry_ack: self.retry_ack.clone(),
        }
    }

    /// The attempt numbers of `attempt` in this budget, with `retry_limit` retries a
    /// round.
    pub fn attempts(&self, attempt: u32, retry_limit: Option<u32>) -> Attempts {
        Attempts {
            attempt,
            round_start: self.round_start,
            retry_limit,
        }
    }

    /// Once the budget is spent at `attempt`: if `requested` is a retry token not yet
    /// acted on, the next attempt and the round it begins (acknowledging the token).
    pub fn renewed(&self, attempt: u32, requested: Option<&str>) -> Option<(u32, Self)> {
        if !annotations::is_new_token(requested, self.retry_ack.as_deref()) {
            return None;
        }
        let next = attempt.saturating_add(1);
        let round = RetryBudget {
            round_start: next,
            retry_ack: requested.map(str::to_owned),
        };
        Some((next, round))
    }
}

/// Where the step whose current attempt's Job has `outcome` stands at `now`.
pub fn job_step(
    outcome: Option<&JobOutcome>,
    attempts: Attempts,
    backoff: &Backoff,
    now: DateTime<Utc>,
) -> JobStep {
    let (at, failure) = match outcome {
        None => return JobStep::Start,
        Some(JobOutcome::Running) => return JobStep::Running,
        Some(JobOutcome::Succeeded { .. }) => return JobStep::Succeeded,
        Some(failed @ JobOutcome::Failed { at, .. }) => (*at, failed.describe()),
    };
    let failures = attempts.failures_in_round();
    if attempts.retry_limit.is_some_and(|limit| failures > limit) {
        return JobStep::Exhausted { failure };
    }
    let delay = chrono::Duration::from_std(backoff.delay(failures)).unwrap_or_default();
    let ready = at + delay;
    match (ready - now).to_std() {
        Ok(wait) if !wait.is_zero() => JobStep::Backoff {
            failure,
            at: ready,
            wait,
        },
        _ => JobStep::Retry { failure },
    }
}

/// Where a run-once Job step stands: [`job_step`] with [`Backoff::JOB_STEP`] on the
/// attempt's observed `job`, and the name messages call the Job by (its name once it
/// exists, else its `key`).
pub fn run_once_step(
    job: Option<&JobView>,
    key: &str,
    attempts: Attempts,
    now: DateTime<Utc>,
) -> (JobStep, String) {
    let name = job.map_or_else(|| key.to_owned(), |j| j.name.clone());
    let step = job_step(job.map(|j| &j.outcome), attempts, &Backoff::JOB_STEP, now);
    (step, name)
}

/// The Degraded stay while a failed Job's backoff runs: `failed` says what failed and
/// how, the message adds when it is retried; `upkeep` goes on meanwhile, and the machine
/// looks again once the backoff is over.
pub fn backoff_stay<S, A>(
    reason: &'static str,
    failed: String,
    at: DateTime<Utc>,
    wait: Duration,
    upkeep: Vec<A>,
) -> Decision<S, A> {
    Decision::stay(reason, format!("{failed}; retrying at {}", retry_time(at)))
        .with_actions(upkeep)
        .degraded()
        .requeue(wait)
}

/// A retry time as messages print it (UTC, to the second).
pub fn retry_time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).unwrap_or_default()
    }

    fn failed(secs: i64) -> JobOutcome {
        JobOutcome::Failed {
            at: at(secs),
            reason: "BackoffLimitExceeded".to_owned(),
            message: String::new(),
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let b = Backoff::JOB_STEP;
        assert_eq!(b.delay(1), Duration::from_secs(10));
        assert_eq!(b.delay(2), Duration::from_secs(20));
        assert_eq!(b.delay(6), Duration::from_secs(300));
        assert_eq!(b.delay(99), Duration::from_secs(300));
    }

    #[test]
    fn a_failed_attempt_waits_out_its_backoff_then_retries() {
        let attempts = Attempts {
            attempt: 1,
            round_start: 1,
            retry_limit: Some(3),
        };
        let b = Backoff::JOB_STEP;
        assert!(matches!(
            job_step(Some(&failed(100)), attempts, &b, at(105)),
            JobStep::Backoff { wait, .. } if wait == Duration::from_secs(5)
        ));
        assert!(matches!(
            job_step(Some(&failed(100)), attempts, &b, at(110)),
            JobStep::Retry { .. }
        ));
    }

    #[test]
    fn the_budget_is_spent_after_retry_limit_retries() {
        let b = Backoff::JOB_STEP;
        let last = Attempts {
            attempt: 4,
            round_start: 1,
            retry_limit: Some(3),
        };
        assert!(matches!(
            job_step(Some(&failed(0)), last, &b, at(0)),
            JobStep::Exhausted { .. }
        ));
        let new_round = Attempts {
            round_start: 4,
            ..last
        };
        assert!(matches!(
            job_step(Some(&failed(0)), new_round, &b, at(1000)),
            JobStep::Retry { .. }
        ));
    }

    #[test]
    fn a_retry_token_renews_a_spent_budget_once() {
        let budget = RetryBudget::begin(Some("old".to_owned()));
        assert_eq!(budget.renewed(4, Some("old")), None, "present at the start");
        assert_eq!(budget.renewed(4, None), None);
        let (next, round) = budget
            .renewed(4, Some("new"))
            .unwrap_or((0, budget.clone()));
        assert_eq!(next, 5);
        assert_eq!(round.attempts(next, Some(3)).failures_in_round(), 1);
        assert_eq!(round.retry_ack.as_deref(), Some("new"));
        assert_eq!(round.renewed(8, Some("new")), None, "acted on once");
        assert_eq!(round.restart(), RetryBudget::begin(Some("new".to_owned())));
    }

    #[test]
    fn no_retries_means_the_first_failure_exhausts() {
        let once = Attempts {
            attempt: 1,
            round_start: 1,
            retry_limit: Some(0),
        };
        assert!(matches!(
            job_step(Some(&failed(0)), once, &Backoff::JOB_STEP, at(0)),
            JobStep::Exhausted { .. }
        ));
    }
}
