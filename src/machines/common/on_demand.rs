//! The on-demand backup sub-machine: what every Lockstep machine does with a token in
//! [`BACKUP_NOW`].
//!
//! ```text
//!   Ready ── new token, backups configured ──► BackingUp(token) ── Job succeeded ──► Ready
//!     │                                          │  Job failed ─────────────────────► Ready
//!     │                                          │  no Job yet, backups unconfigured ► Ready
//!     └── new token, backups not configured: stays (the machine says why)
//! ```
//!
//! # Guarantees
//! - A token is served by at most one Job: the Job's key is a hash of the token
//!   ([`key`]), and a token whose Job exists is never acted on again. A failed backup is
//!   not retried; a new token asks for a new one.
//! - The Job is created only while backups are configured; a Job that exists is followed
//!   to its end even if the configuration is removed meanwhile.
//!
//! # Assumptions
//! - The machine persists the token in its backing-up state and goes back to its ready
//!   state on every [`Verdict::Back`].
//!
//! [`BACKUP_NOW`]: super::annotations::BACKUP_NOW

use super::annotations::BACKUP_NOW;
use super::jobs::JobOutcome;
use super::meta::short_hash;
use crate::engine::Decision;

/// Edge reason: an on-demand backup was requested.
pub const BACKUP_REQUESTED: &str = "BackupRequested";
/// Edge reason: the on-demand backup succeeded.
pub const BACKUP_SUCCEEDED: &str = "BackupSucceeded";
/// Edge reason: the on-demand backup failed.
pub const BACKUP_FAILED: &str = "BackupFailed";
/// Edge reason: backups were unconfigured before the backup Job was created.
pub const BACKUP_CANCELLED: &str = "BackupCancelled";
/// Stay reason: the on-demand backup Job is being created or runs.
pub const BACKUP_RUNNING: &str = "BackupRunning";
/// Stay reason: a backup was requested while backups are not configured.
pub const BACKUP_NOT_CONFIGURED: &str = "BackupNotConfigured";

/// The key of the on-demand backup Job for a `backup-now` token.
pub fn key(token: &str) -> String {
    format!("backup-{}", short_hash(&[token]))
}

/// What the ready state does with the [`BACKUP_NOW`] annotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// No token, or its Job exists already: nothing to do.
    Idle,
    /// Go to the backing-up state for `token` ([`BACKUP_REQUESTED`]).
    Start {
        /// The token to persist.
        token: String,
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

/// What to do with the annotation's `token`, given whether the Job of a key exists and
/// whether backups are `configured`.
pub fn request(
    token: Option<&str>,
    job_exists: impl FnOnce(&str) -> bool,
    configured: bool,
) -> Request {
    let Some(token) = token else {
        return Request::Idle;
    };
    if job_exists(&key(token)) {
        return Request::Idle;
    }
    if configured {
        Request::Start {
            token: token.to_owned(),
            message: format!("on-demand backup requested ({BACKUP_NOW}={token})"),
        }
    } else {
        Request::NotConfigured {
            token: token.to_owned(),
        }
    }
}

/// What the backing-up state sees.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The token being served.
    pub token: &'a str,
    /// Whether backups are still configured.
    pub configured: bool,
    /// The spec field that configures backups, for messages (`backupPolicy`).
    pub field: &'a str,
    /// The outcome and name of the token's Job, if it exists.
    pub job: Option<(&'a JobOutcome, &'a str)>,
}

/// What the backing-up state does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Go back to the ready state.
    Back {
        /// [`BACKUP_SUCCEEDED`], [`BACKUP_FAILED`] or [`BACKUP_CANCELLED`].
        reason: &'static str,
        /// Why.
        message: String,
    },
    /// Create the token's Job and wait.
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
    },
}

/// Decide the backing-up state.
pub fn step(facts: Facts<'_>) -> Verdict {
    let Some((outcome, name)) = facts.job else {
        if !facts.configured {
            return Verdict::Back {
                reason: BACKUP_CANCELLED,
                message: format!("{} was removed; no backup taken", facts.field),
            };
        }
        return Verdict::Start {
            key: key(facts.token),
            message: format!("starting on-demand backup for {BACKUP_NOW}={}", facts.token),
        };
    };
    match outcome {
        JobOutcome::Running => Verdict::Wait {
            message: format!("on-demand backup Job {name} is running"),
        },
        JobOutcome::Succeeded { .. } => Verdict::Back {
            reason: BACKUP_SUCCEEDED,
            message: format!("on-demand backup Job {name} succeeded"),
        },
        failed @ JobOutcome::Failed { .. } => Verdict::Back {
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
    match verdict {
        Verdict::Back { reason, message } => Decision::go(back(), reason, message),
        Verdict::Start { key, message } => Decision::stay(BACKUP_RUNNING, message)
            .with_actions(upkeep)
            .with_actions([run(key)]),
        Verdict::Wait { message } => Decision::stay(BACKUP_RUNNING, message).with_actions(upkeep),
    }
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;

    use super::*;

    fn facts<'a>(job: Option<(&'a JobOutcome, &'a str)>) -> Facts<'a> {
        Facts {
            token: "t1",
            configured: true,
            field: "spec.backup",
            job,
        }
    }

    #[test]
    fn a_new_token_starts_a_backup_once() {
        assert_eq!(request(None, |_| false, true), Request::Idle);
        assert!(matches!(
            request(Some("t1"), |_| false, true),
            Request::Start { token, .. } if token == "t1"
        ));
        assert_eq!(request(Some("t1"), |k| k == key("t1"), true), Request::Idle);
        assert!(matches!(
            request(Some("t1"), |_| false, false),
            Request::NotConfigured { .. }
        ));
    }

    #[test]
    fn the_job_is_created_only_while_configured_and_followed_to_its_end() {
        assert!(matches!(step(facts(None)), Verdict::Start { key: k, .. } if k == key("t1")));
        let unconfigured = Facts {
            configured: false,
            ..facts(None)
        };
        assert!(matches!(
            step(unconfigured),
            Verdict::Back {
                reason: BACKUP_CANCELLED,
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
            Verdict::Back {
                reason: BACKUP_SUCCEEDED,
                ..
            }
        ));
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
            Verdict::Back { reason: BACKUP_FAILED, message } if message.contains("BackoffLimitExceeded")
        ));
    }
}
