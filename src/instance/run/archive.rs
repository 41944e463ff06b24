//! Continuous WAL archiving with pgBackRest (`spec.backup.walArchive`): what the manager
//! adds to the server's configuration, the stanza it creates on a primary, and what it
//! reports ([`crate::pod::archiving`]).
//!
//! The operator renders pgBackRest's options as `PGBACKREST_*` variables of the
//! container (`machines::postgres::render::archive`); the postmaster inherits them, so
//! `archive_command` needs no options of its own. pgBackRest is used rather than a
//! hand-written uploader: it checks each file against the cluster's system identifier,
//! compresses, verifies checksums, retries, and gives the restore side
//! (`archive-get`) and base backups the same repository (see `docs/backup.md`).
//!
//! # Guarantees
//! - **Nothing here delays a round** (the manager's Lease renewals): `stanza-create` runs
//!   as a child process on its own task, bounded by [`STANZA_BOUND`], and the round only
//!   looks at whether it finished. The round itself reads one local directory
//!   (`pg_wal/archive_status`, for a stalled archive) and the columns of the query it
//!   already runs.
//! - **A failure is reported, never hidden:** `archive_command` failing more recently
//!   than it succeeded, a WAL file waiting longer than [`STALL_SECONDS`], or the stanza
//!   not created, each turns the pod condition `False` with what failed.
//! - The stanza is created only by a writable primary (pgBackRest reads the server's
//!   system identifier and WAL position from it). `stanza-create` is idempotent: a
//!   primary after a failover finds the stanza its predecessor made and goes on.
//! - A failed `stanza-create` is tried again every [`STANZA_RETRY`], and reported until
//!   it succeeds.
//!
//! # Assumptions
//! - The image has `pgbackrest` on `PATH` (the local cluster's `postgres-15` image
//!   installs Debian's package).
//! - The node's clock is the server's: `pg_stat_archiver`'s times are compared with the
//!   moment the stanza was seen created.
//!
//! # Errors
//! Nothing here fails the manager. `stanza-create`'s failure (or its bound passing) is
//! reported as [`Archiving::StanzaFailed`] with its last line of output; an
//! `archive_status` directory that cannot be read counts as nothing waiting.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::FutureExt;
use tokio::task::JoinHandle;

use super::metrics::ServerStats;
use super::repository::Probe;
use crate::pod::archived::{REPORT_SECONDS, is_wal_file};
use crate::pod::archiving::{Archiving, STALL_SECONDS};

/// The tool `LOCKSTEP_WAL_ARCHIVE` names.
pub const PGBACKREST: &str = "pgbackrest";
/// How long one `stanza-create` may run.
pub const STANZA_BOUND: Duration = Duration::from_secs(120);
/// The pause after a failed `stanza-create`.
pub const STANZA_RETRY: Duration = Duration::from_secs(30);
pub use crate::pod::archiving::ARCHIVE_TIMEOUT_SECONDS;

/// The `lockstep.conf` lines of an archiving instance. `archive_mode = on` archives on a
/// primary only; a standby keeps the setting so that it archives as soon as it is
/// promoted (PostgreSQL then archives the new timeline's history file too).
#[must_use]
pub fn conf_lines() -> Vec<String> {
    vec![
        "archive_mode = on".to_owned(),
        format!("archive_command = '{PGBACKREST} archive-push %p'"),
        format!("archive_timeout = {ARCHIVE_TIMEOUT_SECONDS}"),
    ]
}

/// Where the stanza stands.
#[derive(Debug, Default)]
enum Stanza {
    /// Not created by this manager yet, and no attempt runs.
    #[default]
    Unknown,
    /// `stanza-create` runs (again, after `failed`).
    Creating {
        /// The child's task.
        task: JoinHandle<Result<(), String>>,
        /// The error of the attempt before, reported until this one ends.
        failed: Option<String>,
    },
    /// It exists, since `at` (Unix time): an archiving failure before then was the
    /// stanza's absence, and does not count.
    Created {
        /// When this manager saw it created.
        at: f64,
    },
    /// The last attempt failed, at `at`.
    Failed {
        /// Its error.
        error: String,
        /// When.
        at: Instant,
    },
}

/// The manager's archiving: the stanza, and each round's report.
#[derive(Debug, Default)]
pub struct Archiver {
    stanza: Stanza,
    /// The last archived WAL file reported, its archive time, and when it was reported.
    reported: Option<(String, DateTime<Utc>, Instant)>,
    /// Whether the repository answers, asked off the round once the stanza exists.
    probe: Probe,
}

impl Archiver {
    /// One round on a server that `writable` or not, which answered `stats` (none when
    /// it did not answer), with `waiting` its oldest WAL file not yet archived and how
    /// long it has waited ([`oldest_waiting`]): starts or follows `stanza-create` on a
    /// writable primary, and says what to report (none on a standby, or while the first
    /// `stanza-create` runs).
    pub fn round(
        &mut self,
        writable: bool,
        stats: Option<&ServerStats>,
        waiting: Option<(String, Duration)>,
    ) -> Option<Archiving> {
        if !writable {
            self.probe.reset();
            return None;
        }
        self.follow();
        let due = match &self.stanza {
            Stanza::Unknown => true,
            Stanza::Failed { at, .. } => at.elapsed() >= STANZA_RETRY,
            Stanza::Creating { .. } | Stanza::Created { .. } => false,
        };
        if due {
            let failed = match std::mem::take(&mut self.stanza) {
                Stanza::Failed { error, .. } => Some(error),
                _ => None,
            };
            self.stanza = Stanza::Creating {
                task: tokio::spawn(stanza_create()),
                failed,
            };
        }
        match &self.stanza {
            Stanza::Unknown | Stanza::Creating { failed: None, .. } => None,
            Stanza::Failed { error, .. }
            | Stanza::Creating {
                failed: Some(error),
                ..
            } => Some(Archiving::StanzaFailed {
                error: error.clone(),
            }),
            Stanza::Created { at } => {
                let unreachable = self.probe.round(Instant::now());
                Some(match (stats, unreachable, waiting) {
                    (Some(s), _, _) if s.archive_failing_since(*at) => Archiving::Failing {
                        wal: s.last_failed_wal.clone().unwrap_or_default(),
                        last_archived: s.last_archived_wal.clone(),
                    },
                    (_, Some(error), _) => Archiving::Unreachable {
                        error: error.to_owned(),
                    },
                    (_, _, Some((wal, waited))) if waited >= Duration::from_secs(STALL_SECONDS) => {
                        Archiving::Stalled { wal }
                    }
                    _ => Archiving::Works,
                })
            }
        }
    }

    /// The last archived WAL file to report this round, and when it was archived
    /// ([`crate::machines::postgres::archived`]): the newest `stats` names, once
    /// [`REPORT_SECONDS`] passed since another was reported (the first at once); what
    /// was reported before until then. None on a server that is not `writable` (a
    /// standby archives nothing), or before anything was archived.
    pub fn last_archived(
        &mut self,
        writable: bool,
        stats: Option<&ServerStats>,
        now: Instant,
    ) -> Option<(String, DateTime<Utc>)> {
        if !writable {
            return None;
        }
        let newest = stats.and_then(|s| {
            let wal = s.last_archived_wal.clone().filter(|w| is_wal_file(w))?;
            let secs = s.last_archived?;
            #[allow(clippy::cast_possible_truncation)] // whole seconds of a Unix time
            let time = DateTime::from_timestamp(secs.floor() as i64, 0)?;
            Some((wal, time))
        });
        let due = self.reported.as_ref().is_none_or(|(wal, _, at)| {
            newest.as_ref().is_some_and(|(newer, _)| newer != wal)
                && now.saturating_duration_since(*at) >= Duration::from_secs(REPORT_SECONDS)
        });
        if due && let Some((wal, time)) = newest {
            self.reported = Some((wal, time, now));
        }
        self.reported
            .as_ref()
            .map(|(wal, time, _)| (wal.clone(), *time))
    }

    /// Takes the result of a `stanza-create` that finished.
    fn follow(&mut self) {
        let Stanza::Creating { task, .. } = &mut self.stanza else {
            return;
        };
        // A finished task answers its first poll.
        let Some(joined) = task.now_or_never() else {
            return;
        };
        let result = joined.unwrap_or_else(|e| Err(format!("the stanza-create task failed: {e}")));
        self.stanza = match result {
            Ok(()) => {
                tracing::info!("pgbackrest stanza-create: the stanza exists");
                Stanza::Created { at: unix_now() }
            }
            Err(error) => {
                tracing::warn!(%error, "pgbackrest stanza-create failed; trying again in 30 s");
                Stanza::Failed {
                    error,
                    at: Instant::now(),
                }
            }
        };
    }
}

/// The oldest WAL file of `pgdata` that waits to be archived (its
/// `pg_wal/archive_status/<file>.ready` marker) and how long it has waited (since the
/// marker was written); none when nothing waits or the directory cannot be read.
#[must_use]
pub fn oldest_waiting(pgdata: &std::path::Path) -> Option<(String, Duration)> {
    let dir = std::fs::read_dir(pgdata.join("pg_wal/archive_status")).ok()?;
    dir.filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let wal = name.strip_suffix(".ready")?.to_owned();
            let waited = entry.metadata().ok()?.modified().ok()?.elapsed().ok()?;
            Some((wal, waited))
        })
        .max_by_key(|(_, waited)| *waited)
}

/// Now, as Unix time (the server's `pg_stat_archiver` times are compared with it: one
/// clock, the node's).
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `pgbackrest stanza-create`, bounded by [`STANZA_BOUND`] (the child is killed past it):
/// its error's last line on failure.
async fn stanza_create() -> Result<(), String> {
    pgbackrest(PGBACKREST, &["stanza-create".to_owned()], STANZA_BOUND)
        .await
        .map(drop)
}

/// Run `program` (pgBackRest's command line) with `args` within `bound`, killed past it:
/// its standard output, or on failure the first line it marked `ERROR:` (the cause;
/// what follows may be request headers that change from run to run), else the last
/// line it printed.
pub(super) async fn pgbackrest(
    program: &str,
    args: &[String],
    bound: Duration,
) -> Result<String, String> {
    let child = tokio::process::Command::new(program)
        .args(args)
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(bound, child).await {
        Err(_) => Err(format!(
            "{PGBACKREST} {} did not finish within {} s",
            args.first().map_or("", String::as_str),
            bound.as_secs()
        )),
        Ok(Err(e)) => Err(format!("{PGBACKREST} could not run: {e}")),
        Ok(Ok(out)) if out.status.success() => Ok(String::from_utf8_lossy(&out.stdout).into()),
        Ok(Ok(out)) => {
            let text = String::from_utf8_lossy(&out.stderr).into_owned()
                + &String::from_utf8_lossy(&out.stdout);
            Err(text
                .lines()
                .find(|l| l.contains("ERROR:"))
                .or_else(|| text.lines().rev().find(|l| !l.trim().is_empty()))
                .unwrap_or("no output")
                .trim()
                .to_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An archiver whose repository probe always succeeds.
    fn quiet() -> Archiver {
        Archiver {
            probe: Probe::new("true", &[], Duration::from_secs(5)),
            ..Archiver::default()
        }
    }

    #[tokio::test]
    async fn a_repository_that_does_not_answer_is_reported_until_archive_command_itself_fails() {
        let mut a = Archiver {
            stanza: Stanza::Created { at: 1000.0 },
            probe: Probe::new(
                "sh",
                &["-c", "echo 'ERROR: [049]: unable to connect' >&2; exit 49"],
                Duration::from_secs(5),
            ),
            ..Archiver::default()
        };
        // The first round starts the probe; once it finished, the next says what it
        // found.
        assert_eq!(a.round(true, None, None), Some(Archiving::Works));
        a.probe.finish().await;
        let said = a.round(true, None, None);
        let unreachable = Archiving::Unreachable {
            error: "ERROR: [049]: unable to connect".to_owned(),
        };
        assert_eq!(said, Some(unreachable.clone()));
        let failing = ServerStats {
            last_failed: Some(1010.0),
            last_failed_wal: Some("000000010000000000000004".to_owned()),
            ..ServerStats::default()
        };
        assert!(
            matches!(
                a.round(true, Some(&failing), None),
                Some(Archiving::Failing { .. })
            ),
            "archive_command's own failure names the file"
        );
        assert_eq!(a.round(true, None, None), Some(unreachable));
        assert_eq!(a.round(false, None, None), None, "a standby says nothing");
    }

    #[tokio::test]
    async fn a_standby_reports_nothing_and_a_primary_reports_once_the_stanza_exists() {
        let mut a = quiet();
        assert_eq!(a.round(false, None, None), None);
        a.stanza = Stanza::Created { at: 1000.0 };
        assert_eq!(a.round(true, None, None), Some(Archiving::Works));
        let failing = ServerStats {
            last_failed: Some(1010.0),
            last_archived: Some(1005.0),
            last_failed_wal: Some("000000010000000000000004".to_owned()),
            last_archived_wal: Some("000000010000000000000003".to_owned()),
            ..ServerStats::default()
        };
        // Failures from before the stanza existed do not count.
        let before = ServerStats {
            last_failed: Some(990.0),
            last_archived: None,
            ..failing.clone()
        };
        assert_eq!(a.round(true, Some(&before), None), Some(Archiving::Works));
        assert_eq!(
            a.round(true, Some(&failing), None),
            Some(Archiving::Failing {
                wal: "000000010000000000000004".to_owned(),
                last_archived: Some("000000010000000000000003".to_owned()),
            })
        );
    }

    #[test]
    fn a_newer_archived_wal_file_is_reported_at_once_the_first_time_then_once_a_minute_at_most() {
        let mut a = Archiver::default();
        let archived = |wal: &str, secs: f64| ServerStats {
            last_archived_wal: Some(wal.to_owned()),
            last_archived: Some(secs),
            ..ServerStats::default()
        };
        let t0 = Instant::now();
        let later = |secs| t0 + Duration::from_secs(secs);
        let said = |wal: &str, secs: i64| {
            Some((wal.to_owned(), DateTime::from_timestamp(secs, 0).unwrap()))
        };
        let (first, second) = ("000000010000000000000003", "000000010000000000000004");

        assert_eq!(
            a.last_archived(true, None, t0),
            None,
            "nothing archived yet"
        );
        assert_eq!(
            a.last_archived(true, Some(&archived(first, 1000.5)), t0),
            said(first, 1000)
        );
        assert_eq!(
            a.last_archived(
                true,
                Some(&archived(second, 1010.0)),
                later(REPORT_SECONDS - 1)
            ),
            said(first, 1000),
            "a newer file within the minute waits"
        );
        assert_eq!(
            a.last_archived(
                false,
                Some(&archived(second, 1010.0)),
                later(REPORT_SECONDS)
            ),
            None,
            "a standby reports nothing"
        );
        assert_eq!(
            a.last_archived(true, Some(&archived(second, 1010.0)), later(REPORT_SECONDS)),
            said(second, 1010)
        );
        assert_eq!(
            a.last_archived(true, None, later(3 * REPORT_SECONDS)),
            said(second, 1010),
            "a round whose query failed keeps what was said"
        );
    }

    #[tokio::test]
    async fn a_wal_file_waiting_past_the_bound_without_a_failure_is_a_stalled_archive() {
        let mut a = Archiver {
            stanza: Stanza::Created { at: 1000.0 },
            ..quiet()
        };
        let waiting = |secs| {
            Some((
                "000000010000000000000009".to_owned(),
                Duration::from_secs(secs),
            ))
        };
        assert_eq!(
            a.round(true, None, waiting(STALL_SECONDS - 1)),
            Some(Archiving::Works)
        );
        assert_eq!(
            a.round(true, None, waiting(STALL_SECONDS)),
            Some(Archiving::Stalled {
                wal: "000000010000000000000009".to_owned()
            })
        );
    }

    #[test]
    fn the_oldest_ready_marker_is_the_file_that_waits_longest() {
        let dir =
            std::env::temp_dir().join(format!("lockstep-archive-status-{}", std::process::id()));
        let status = dir.join("pg_wal/archive_status");
        std::fs::create_dir_all(&status).expect("a directory");
        assert_eq!(oldest_waiting(&dir), None);
        let old = status.join("000000010000000000000001.ready");
        std::fs::write(&old, "").expect("a marker");
        let f = std::fs::File::options()
            .write(true)
            .open(&old)
            .expect("open");
        f.set_modified(std::time::SystemTime::now() - Duration::from_secs(600))
            .expect("set its time");
        std::fs::write(status.join("000000010000000000000002.ready"), "").expect("a marker");
        std::fs::write(status.join("000000010000000000000000.done"), "").expect("a marker");
        let (wal, waited) = oldest_waiting(&dir).expect("one waits");
        assert_eq!(wal, "000000010000000000000001");
        assert!(waited >= Duration::from_secs(600));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_failed_stanza_is_reported_while_it_is_tried_again() {
        let mut a = Archiver {
            stanza: Stanza::Failed {
                error: "unable to connect".to_owned(),
                at: Instant::now(),
            },
            ..Archiver::default()
        };
        let failed = Some(Archiving::StanzaFailed {
            error: "unable to connect".to_owned(),
        });
        assert_eq!(a.round(true, None, None), failed);
        a.stanza = Stanza::Failed {
            error: "unable to connect".to_owned(),
            at: Instant::now()
                .checked_sub(STANZA_RETRY)
                .unwrap_or_else(Instant::now),
        };
        // Due again: a new attempt starts, and the failure stays reported meanwhile.
        assert_eq!(a.round(true, None, None), failed);
        assert!(matches!(a.stanza, Stanza::Creating { .. }));
        assert_eq!(a.round(true, None, None), failed);
    }

    #[test]
    fn an_archiving_server_archives_with_pgbackrest_at_least_once_a_minute() {
        let lines = conf_lines();
        assert!(lines.contains(&"archive_mode = on".to_owned()));
        assert!(lines.contains(&"archive_command = 'pgbackrest archive-push %p'".to_owned()));
        assert!(lines.contains(&"archive_timeout = 60".to_owned()));
    }
}
