//! Whether the primary's WAL reaches the archive (`spec.backup.walArchive`), as its
//! instance manager tells the operator: the pod condition [`ARCHIVING`], written on its
//! own pod (as [`crate::pod::applied`]'s) when it changes.
//!
//! | status | reason | when |
//! |---|---|---|
//! | `True` | [`reason::ARCHIVING`] | the stanza exists and no archiving attempt failed since the last that succeeded |
//! | `False` | [`reason::FAILING`] | `archive_command` failed for a WAL file more recently than one succeeded |
//! | `False` | [`reason::UNREACHABLE`] | the archive's repository did not answer the last check (`pgbackrest repo-ls`, every 20 s off the round), and `archive_command` has not failed since its last success |
//! | `False` | [`reason::STALLED`] | the oldest WAL file waiting to be archived has waited longer than [`STALL_SECONDS`], with no failure recorded since (a hung `archive_command`, or a backlog that long) |
//! | `False` | [`reason::STANZA_FAILED`] | pgBackRest could not create the stanza (the repository unreachable, refused, or another cluster's) |
//!
//! Only a writable primary writes it (only a primary archives). The message names no
//! changing position while archiving works, so a healthy instance writes it once; a
//! failing one writes again only when another WAL file starts to fail.
//!
//! The operator reads the primary's: `False` makes the cluster `Degraded`
//! (`ArchiveFailing`, a Warning Event) naming the pod and what failed, and its
//! `ContinuousArchiving` condition says the same.

/// The pod condition's type.
pub const ARCHIVING: &str = "lockstep.dev/Archiving";

/// How long the oldest WAL file may wait to be archived before the primary says its
/// archive is stalled: well beyond `archive_timeout` (60 s) and PostgreSQL's pause
/// between failed rounds (60 s).
pub const STALL_SECONDS: u64 = 300;

/// The condition's reasons.
pub mod reason {
    /// The archive takes the WAL.
    pub const ARCHIVING: &str = "Archiving";
    /// `archive_command` fails.
    pub const FAILING: &str = "ArchiveFailing";
    /// The stanza could not be created.
    pub const STANZA_FAILED: &str = "StanzaCreateFailed";
    /// A WAL file has waited too long, with no failure recorded.
    pub const STALLED: &str = "ArchiveStalled";
    /// The repository does not answer, whether or not a WAL file is due.
    pub const UNREACHABLE: &str = "ArchiveUnreachable";
}

/// What a primary's archiver shows this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Archiving {
    /// The stanza exists and nothing failed since the last success.
    Works,
    /// `archive_command` failed for `wal` more recently than any succeeded.
    Failing {
        /// The WAL file that failed last.
        wal: String,
        /// The last one archived, if any since the server started.
        last_archived: Option<String>,
    },
    /// The oldest WAL file waiting to be archived, `wal`, has waited longer than
    /// [`STALL_SECONDS`], and no attempt failed since.
    Stalled {
        /// That file.
        wal: String,
    },
    /// The repository did not answer the last check (`pgbackrest repo-ls`), and
    /// `archive_command` has not failed since it last succeeded.
    Unreachable {
        /// pgBackRest's error, its first `ERROR:` line.
        error: String,
    },
    /// `pgbackrest stanza-create` failed.
    StanzaFailed {
        /// Its error, first line.
        error: String,
    },
}

impl Archiving {
    /// The condition's status, reason and message.
    #[must_use]
    pub fn condition(&self) -> (&'static str, &'static str, String) {
        match self {
            Archiving::Works => (
                "True",
                reason::ARCHIVING,
                "pgBackRest archives this primary's WAL".to_owned(),
            ),
            Archiving::Failing { wal, last_archived } => (
                "False",
                reason::FAILING,
                format!(
                    "archive_command (pgbackrest archive-push) fails for WAL file {wal}; the last archived is {}; the server keeps every WAL file not archived (its pg_wal grows) and tries again; the postgres container's log says why",
                    last_archived
                        .as_deref()
                        .unwrap_or("none since the server started")
                ),
            ),
            Archiving::Stalled { wal } => (
                "False",
                reason::STALLED,
                format!(
                    "WAL file {wal} has waited more than {STALL_SECONDS} s to be archived, and no attempt failed meanwhile: archive_command (pgbackrest archive-push) hangs, or the archive is that far behind; the server keeps every WAL file not archived"
                ),
            ),
            Archiving::Unreachable { error } => (
                "False",
                reason::UNREACHABLE,
                format!(
                    "the archive's repository does not answer (pgbackrest repo-ls): {error}; the next WAL file cannot be archived, and the server keeps every WAL file not archived (its pg_wal grows) until it can"
                ),
            ),
            Archiving::StanzaFailed { error } => (
                "False",
                reason::STANZA_FAILED,
                format!("pgbackrest stanza-create failed, so no WAL can be archived: {error}"),
            ),
        }
    }
}

/// `archive_timeout`: a primary that writes completes a WAL file (and archives it) at
/// least this often, which bounds what a lost volume can take with it.
pub const ARCHIVE_TIMEOUT_SECONDS: u32 = 60;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn working_archiving_names_no_position_and_a_failure_names_the_file() {
        assert_eq!(Archiving::Works.condition().0, "True");
        let (status, reason, message) = Archiving::Failing {
            wal: "000000010000000000000003".to_owned(),
            last_archived: None,
        }
        .condition();
        assert_eq!((status, reason), ("False", reason::FAILING));
        assert!(message.contains("000000010000000000000003"), "{message}");
        assert!(
            message.contains("none since the server started"),
            "{message}"
        );
    }
}
