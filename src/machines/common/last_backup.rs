//! `status.lastBackup` of every Lockstep machine: the most recent backup that finished
//! (scheduled, on demand or final), and what it says when the Job of a requested backup
//! was lost before its outcome was recorded.
//!
//! # Guarantees
//! - `lastBackup` comes from the newest finished backup Job observed, or from what the
//!   status said before if that is more recent: Jobs are pruned, the status remembers.
//! - When the last transition is [`BACKUP_LOST`] (the Job of a served
//!   [`BACKUP_NOW`] token vanished, its outcome finalizer removed, before its outcome was
//!   read), `lastBackup` names that Job with the outcome `Unknown (…)`, naming the token,
//!   rather than keep naming the backup before it. It stays so until a newer backup
//!   finishes.
//!
//! [`BACKUP_NOW`]: super::annotations::BACKUP_NOW

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::annotations::BACKUP_NOW;
use super::jobs::{JobOutcome, job_name};
use super::observe::Observed;
use super::on_demand::{self, BACKUP_LOST};
use crate::engine::MachineRecord;

/// A finished backup.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastBackup {
    /// When it finished (for an `Unknown` outcome: when the loss was recorded).
    pub time: DateTime<Utc>,
    /// The Job that took it.
    pub job: String,
    /// `Succeeded`, `Failed (reason: message)`, or `Unknown (...)` when its Job was lost
    /// before its outcome was recorded.
    pub outcome: String,
}

/// The outcome a lost backup's `lastBackup` says: unknown, naming the token whose Job
/// is gone.
pub fn unknown(token: &str) -> String {
    format!("Unknown (the Job for {BACKUP_NOW}={token} is gone before its outcome was recorded)")
}

/// The on-demand backup whose Job was lost before its outcome was read, as a
/// `lastBackup` with an [`unknown`] outcome, when the record's last transition says so
/// ([`BACKUP_LOST`]): its time is that transition's, its Job the one the served token
/// named (on the owner `owner`).
pub fn lost<S>(record: &MachineRecord<S>, owner: &str) -> Option<LastBackup> {
    let entry = record.history.last().filter(|h| h.reason == BACKUP_LOST)?;
    // Lost after it was created: the served token is the one the entry names.
    let token = record
        .acks
        .get(BACKUP_NOW)
        .filter(|t| entry.message.contains(&format!("{BACKUP_NOW}={t} ")))?;
    Some(LastBackup {
        time: entry.at,
        job: job_name(
            owner,
            &on_demand::serving(
                token,
                record.acks.get(on_demand::BACKUP_JOB).map(String::as_str),
            ),
        ),
        outcome: unknown(token),
    })
}

/// The more recent of a backup seen and one lost (a lost one wins a tie: it was
/// recorded after the Jobs were read).
pub fn latest(seen: Option<LastBackup>, lost: Option<LastBackup>) -> Option<LastBackup> {
    match (seen, lost) {
        (Some(seen), Some(lost)) if seen.time > lost.time => Some(seen),
        (seen, None) => seen,
        (_, lost) => lost,
    }
}

/// The most recent finished backup among the observed Jobs, or `before` if that is more
/// recent (Jobs are pruned; the status remembers).
pub fn seen<R, M>(observed: &Observed<R, M>, before: Option<&LastBackup>) -> Option<LastBackup> {
    let seen = observed
        .jobs
        .iter()
        .filter(|j| j.purpose.is_some_and(|p| p.is_backup()))
        .filter_map(|j| {
            let time = j.outcome.finished_at()?;
            let outcome = match &j.outcome {
                JobOutcome::Succeeded { .. } => "Succeeded".to_owned(),
                other => other.describe(),
            };
            Some(LastBackup {
                time,
                job: j.name.clone(),
                outcome,
            })
        })
        .max_by(|a, b| (a.time, &a.job).cmp(&(b.time, &b.job)));
    match (seen, before) {
        (Some(seen), Some(before)) if before.time > seen.time => Some(before.clone()),
        (None, before) => before.cloned(),
        (seen, _) => seen,
    }
}

/// `status.lastBackup` of the owner `owner`: the newer of the backup [`seen`] among
/// the observed Jobs (or `before`) and the one its record says was [`lost`].
pub fn project<S, R, M>(
    record: Option<&MachineRecord<S>>,
    owner: &str,
    observed: &Observed<R, M>,
    before: Option<&LastBackup>,
) -> Option<LastBackup> {
    latest(seen(observed, before), record.and_then(|r| lost(r, owner)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::engine::HistoryEntry;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).unwrap_or_default()
    }

    /// A record whose last transition is `reason` with `message` at `t(secs)`, having
    /// served the `backup-now` token `served`.
    fn record(reason: &str, message: &str, secs: i64, served: &str) -> MachineRecord<()> {
        MachineRecord {
            state: (),
            entered_at: at(secs),
            state_version: 1,
            history: vec![HistoryEntry {
                from: "BackingUp".to_owned(),
                to: "Ready".to_owned(),
                reason: reason.to_owned(),
                message: message.to_owned(),
                at: at(secs),
            }],
            acks: BTreeMap::from([(BACKUP_NOW.to_owned(), served.to_owned())]),
            last_error: None,
        }
    }

    fn lost_message(token: &str) -> String {
        format!(
            "the on-demand backup Job for {BACKUP_NOW}={token} is gone before its outcome was read"
        )
    }

    #[test]
    fn a_backup_lost_after_its_job_was_created_is_the_last_backup_with_an_unknown_outcome() {
        let gone = lost(&record(BACKUP_LOST, &lost_message("t1"), 50, "t1"), "pg")
            .expect("the last transition lost the backup of t1");
        assert_eq!(gone.time, at(50));
        assert_eq!(gone.job, job_name("pg", &on_demand::key("t1", None)));
        assert_eq!(
            gone.outcome,
            "Unknown (the Job for lockstep.dev/backup-now=t1 is gone before its outcome was recorded)"
        );
    }

    #[test]
    fn only_a_lost_transition_naming_the_served_token_says_unknown() {
        let succeeded = record(
            on_demand::BACKUP_SUCCEEDED,
            "Job pg-backup-x succeeded",
            50,
            "t1",
        );
        assert_eq!(lost(&succeeded, "pg"), None);
        // Lost because the backup configuration went before a Job was created: no Job,
        // so nothing whose outcome is unknown.
        let never_created = record(
            BACKUP_LOST,
            "spec.backup was removed before the backup Job was created; no backup taken",
            50,
            "t1",
        );
        assert_eq!(lost(&never_created, "pg"), None);
    }

    #[test]
    fn a_lost_backup_outranks_an_older_one_until_a_newer_backup_finishes() {
        let older = LastBackup {
            time: at(10),
            job: "pg-backup-old".to_owned(),
            outcome: "Succeeded".to_owned(),
        };
        let gone = lost(&record(BACKUP_LOST, &lost_message("t1"), 50, "t1"), "pg");
        let now = latest(Some(older.clone()), gone.clone());
        assert_eq!(now, gone);
        let newer = LastBackup {
            time: at(90),
            ..older
        };
        assert_eq!(latest(Some(newer.clone()), gone), Some(newer));
    }
}
