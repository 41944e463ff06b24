//! The newest WAL file the archive took (the operator's `status.lastArchived`), as the
//! primary that archived it tells the operator: the pod condition [`ARCHIVED`], written on its own
//! pod (as [`super::archiving`]'s) when it changes, with a new file at most every
//! [`REPORT_SECONDS`].
//!
//! | status | reason | message |
//! |---|---|---|
//! | `True` | [`reason::ARCHIVED`] | `<WAL file> archived at <RFC 3339 time>` ([`LastArchived::condition`]) |
//!
//! Only WAL segment files count ([`is_wal_file`]): a timeline's history file or a base
//! backup's label, which the archive also takes, leaves the report as it was.
//!
//! # Guarantees
//! - **Bounded staleness, bounded writes.** While archiving goes on, the primary reports
//!   a newer file once [`REPORT_SECONDS`] passed since its last report: the status is at
//!   most that much (plus a round) behind `pg_stat_archiver`, and a busy cluster makes at
//!   most one pod write and one status write per [`REPORT_SECONDS`] for it. An idle
//!   primary archives nothing and writes nothing.
//! - **The status never goes back.** `status.lastArchived` is the newest, by archive
//!   time, of what it said and what any live pod reports: a new primary that has not
//!   archived yet (a promoted standby's `pg_stat_archiver` starts empty), or an old
//!   primary's condition left on its pod, does not move it back.
//!
//! # Assumptions
//! - The instances' clocks and the operator's agree to within the staleness above (the
//!   time is the server's `pg_stat_archiver.last_archived_time`).
//! - The manager's report and [`LastArchived::parse`] share [`ARCHIVED_AT`].

use chrono::{DateTime, SecondsFormat, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `status.lastArchived`: a WAL file the archive took.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastArchived {
    /// The WAL file's name (its timeline, then its position).
    pub wal: String,
    /// When it was archived (the server's `pg_stat_archiver.last_archived_time`).
    pub time: DateTime<Utc>,
    /// The instance that archived it (the primary then).
    pub pod: String,
}

/// The pod condition's type.
pub const ARCHIVED: &str = "lockstep.dev/Archived";

/// The least time between two reports of a newer WAL file by one primary.
pub const REPORT_SECONDS: u64 = 60;

/// What separates the WAL file from its time in the condition's message.
pub const ARCHIVED_AT: &str = " archived at ";

/// The condition's reasons.
pub mod reason {
    /// The archive took the file the message names.
    pub const ARCHIVED: &str = "Archived";
}

impl LastArchived {
    /// The pod condition's status, reason and message for `wal`, archived at `time`.
    #[must_use]
    pub fn condition(wal: &str, time: DateTime<Utc>) -> (&'static str, &'static str, String) {
        (
            "True",
            reason::ARCHIVED,
            format!(
                "{wal}{ARCHIVED_AT}{}",
                time.to_rfc3339_opts(SecondsFormat::Secs, true)
            ),
        )
    }

    /// What `pod` reported in the condition's `message`; `None` if it does not say it as
    /// [`LastArchived::condition`] does.
    #[must_use]
    pub fn parse(pod: &str, message: &str) -> Option<LastArchived> {
        let (wal, at) = message.split_once(ARCHIVED_AT)?;
        let time = DateTime::parse_from_rfc3339(at.trim()).ok()?;
        is_wal_file(wal).then(|| LastArchived {
            wal: wal.to_owned(),
            time: time.with_timezone(&Utc),
            pod: pod.to_owned(),
        })
    }
}

/// Whether `name` is a WAL segment file's (24 hexadecimal digits: timeline, log, segment),
/// not a history, backup-label or partial file's, which the archive takes too.
#[must_use]
pub fn is_wal_file(name: &str) -> bool {
    name.len() == 24 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rfc3339: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn what_a_primary_reports_is_read_back_as_written() {
        let (status, reason, message) =
            LastArchived::condition("00000002000000000000000A", at("2026-12-04T10:00:00Z"));
        assert_eq!((status, reason), ("True", reason::ARCHIVED));
        assert_eq!(
            message,
            "00000002000000000000000A archived at 2026-12-04T10:00:00Z"
        );
        assert_eq!(
            LastArchived::parse("pg-1", &message),
            Some(LastArchived {
                wal: "00000002000000000000000A".to_owned(),
                time: at("2026-12-04T10:00:00Z"),
                pod: "pg-1".to_owned(),
            })
        );
    }

    #[test]
    fn a_message_that_names_no_wal_file_and_time_is_not_read() {
        for message in [
            "",
            "00000002000000000000000A",
            "00000002000000000000000A archived at yesterday",
            "not-a-wal-file archived at 2026-12-04T10:00:00Z",
        ] {
            assert_eq!(LastArchived::parse("pg-1", message), None, "{message}");
        }
    }
}
