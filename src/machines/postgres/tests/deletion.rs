//! Deletion and the status projection.

use super::rendering::object;
use super::*;
use crate::machines::common::testing::decide_deleting;

#[test]
fn deletion_takes_a_final_backup_before_the_finalizer_goes() {
    let s = with_backups(spec("16.3"), None);
    let finalizing = PgState::Finalizing { attempt: 1 };
    let d = decide_deleting::<Postgres>(&s, &ready(V1, 0), at_rest(V1, 0));
    assert_goes(&d, DELETION_REQUESTED, &finalizing);
    let mut broken = at_rest(V1, 0);
    broken.jobs = vec![job("final-backup-1", Purpose::FinalBackup, failed(1000))];
    let mut skipped = broken.clone();
    skipped.requests.skip_final_backup = true;
    testing::assert_final_backup_holds_the_finalizer::<Postgres>(
        &s,
        &finalizing,
        &PgState::Finalized,
        testing::BackupSteps {
            before: at_rest(V1, 0),
            finished: broken,
            after: skipped,
        },
    );
}

#[test]
fn without_a_backup_destination_deletion_releases_at_once() {
    let d = decide_deleting::<Postgres>(&spec("16.3"), &ready(V1, 0), at_rest(V1, 0));
    assert_goes(&d, NO_BACKUP_POLICY, &PgState::Finalized);
}

#[test]
fn the_status_names_the_pods_the_services_select() {
    use crate::driver::Operator;
    let pg = object(spec("16.3"));
    let o = at_rest(V1, 1);
    let status = Postgres::status(
        &pg,
        crate::engine::EngineStatus::default(),
        Some(&ready(V1, 1)),
        &o,
        chrono::Utc::now(),
    );
    assert_eq!(status["primaryPod"], "pg-1");
    assert_eq!(status["replicaPods"], serde_json::json!(["pg-0", "pg-2"]));
    assert_eq!(status["image"], V1);
}

#[test]
fn a_job_made_by_the_cronjob_counts_as_the_last_backup() {
    let mut o = at_rest(V1, 0);
    o.jobs = vec![JobView {
        name: "pg-backup-29000000".to_owned(),
        uid: "j".to_owned(),
        key: None,
        purpose: Some(Purpose::Backup),
        created: Some(t(0)),
        outcome: JobOutcome::Succeeded { at: t(50) },
        held: None,
    }];
    assert_eq!(
        crate::machines::postgres::last_backup_time(&o, Some(t(10))),
        Some(t(50))
    );
    assert_eq!(
        crate::machines::postgres::last_backup_time(&o, Some(t(90))),
        Some(t(90))
    );
}

#[test]
fn the_newest_base_backup_says_the_first_recoverable_point_and_the_status_keeps_it_once_pruned() {
    use crate::machines::postgres::recoverability::{FIRST_RECOVERABLE_POINT, project};
    let mut o = at_rest(V1, 0);
    let backup = |name: &str, finished: i64| JobView {
        name: name.to_owned(),
        uid: name.to_owned(),
        key: None,
        purpose: Some(Purpose::Backup),
        created: Some(t(0)),
        outcome: JobOutcome::Succeeded { at: t(finished) },
        held: None,
    };
    o.jobs = vec![backup("pg-backup-1", 50), backup("pg-backup-2", 70)];
    let said = |point: &str| {
        format!(
            "lockstep-backup: base backup L (consistent at x; the repository keeps 1 backup(s), {FIRST_RECOVERABLE_POINT}{point})"
        )
    };
    o.own
        .job_results
        .insert("pg-backup-1".to_owned(), said("2026-12-03T05:00:00+00:00"));
    o.own
        .job_results
        .insert("pg-backup-2".to_owned(), said("2026-12-03T06:00:00+00:00"));
    let newest = chrono::DateTime::parse_from_rfc3339("2026-12-03T06:00:00+00:00")
        .map(|t| t.with_timezone(&chrono::Utc))
        .ok();
    assert_eq!(project(&o, Some(t(10))), newest);
    // Both Jobs pruned: the status keeps what it said.
    o.jobs.clear();
    assert_eq!(project(&o, newest), newest);
}

#[test]
fn a_requested_backup_whose_job_vanished_unread_is_the_last_backup_with_an_unknown_outcome() {
    use crate::driver::Operator;
    let s = with_backups(spec("16.3"), None);
    let pg = object(s.clone());
    let mut asked = at_rest(V1, 0);
    asked.requests.backup_now = Some("t1".to_owned());
    let mut status = testing::status_in(&ready(V1, 0));
    testing::reconcile_at::<Postgres>(&s, &mut status, &asked, false, 0);
    assert!(
        matches!(
            testing::current::<Postgres>(&status),
            Some(PgState::BackingUp { .. })
        ),
        "{status:?}"
    );
    // Its Job finished and went, its outcome finalizer stripped, before it was read.
    testing::reconcile_at::<Postgres>(&s, &mut status, &asked, false, 120);
    assert_eq!(testing::current::<Postgres>(&status), Some(ready(V1, 0)));
    let shown = Postgres::status(&pg, status, Some(&ready(V1, 0)), &asked, t(120));
    assert_eq!(
        shown["lastBackup"]["outcome"],
        "Unknown (the Job for lockstep.dev/backup-now=t1 is gone before its outcome was recorded)"
    );
    assert_eq!(
        shown["lastBackup"]["job"],
        crate::machines::common::jobs::job_name("pg", &backup_key("t1", None))
    );
    assert_eq!(shown["lastBackup"]["time"], serde_json::json!(t(120)));
}

#[test]
fn every_edge_is_taken_in_the_file_the_table_names() {
    let checked = crate::machines::common::table_sources::where_taken::<Postgres>(
        "src/machines/postgres/decide",
    );
    assert_eq!(checked, Ok(()));
}
