//! The earliest moment a cluster can be recovered to (`status.firstRecoverabilityPoint`),
//! as its base backups tell it.
//!
//! A base-backup Job (`basebackup.sh`) ends with the primary's instance manager's summary
//! of the repository after the backup and its retention ran
//! (`instance::run::basebackup::summary`), and writes it to its termination log. Its
//! last part is [`FIRST_RECOVERABLE_POINT`] and the end of the oldest backup the
//! repository keeps: no target before it can be reached, and every moment after it can,
//! as long as the archive holds the WAL (pgBackRest's retention expires WAL only with the
//! backups that need it).
//!
//! # Guarantees
//! - The point comes from the newest finished base-backup Job whose result names one;
//!   without such a Job (pruned, or dumps only) the status keeps what it said.
//! - It changes only when a backup finishes, so it adds no status write of its own.
//!
//! # Assumptions
//! - The manager's summary and [`first_recoverable_point`] share [`FIRST_RECOVERABLE_POINT`]
//!   and RFC 3339 times.

use chrono::{DateTime, Utc};

use super::observe::Observed;
use crate::machines::common::jobs::JobOutcome;

pub use crate::pod::backups::{FIRST_RECOVERABLE_POINT, first_recoverable_point};

/// `status.firstRecoverabilityPoint`: what the newest succeeded backup Job whose result
/// names one says, else `before`.
#[must_use]
pub fn project(observed: &Observed, before: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    observed
        .jobs
        .iter()
        .filter(|j| j.purpose.is_some_and(|p| p.is_backup()))
        .filter_map(|j| match j.outcome {
            JobOutcome::Succeeded { at } => {
                let point = first_recoverable_point(observed.own.job_results.get(&j.name)?)?;
                Some((at, point))
            }
            _ => None,
        })
        .max_by_key(|(at, _)| *at)
        .map(|(_, point)| point)
        .or(before)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_point_is_read_from_a_summary_and_nothing_else_is_taken_for_one() {
        let summary = format!(
            "lockstep-backup: base backup 20261203-063012F (consistent at 2026-12-03T06:30:15+00:00; the repository keeps 2 backup(s), {FIRST_RECOVERABLE_POINT}2026-12-03T05:00:01+00:00)"
        );
        assert_eq!(
            first_recoverable_point(&summary).map(|t| t.to_rfc3339()),
            Some("2026-12-03T05:00:01+00:00".to_owned())
        );
        assert_eq!(
            first_recoverable_point(&format!("{FIRST_RECOVERABLE_POINT}?)")),
            None
        );
        assert_eq!(first_recoverable_point("lockstep-backup: dump taken"), None);
    }
}
