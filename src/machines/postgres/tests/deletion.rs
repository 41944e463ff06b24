//! Deletion and the status projection.

use super::rendering::object;
use super::*;

fn deleting(
    spec: &PostgresClusterSpec,
    state: &PgState,
    o: Observed,
) -> Decision<PgState, PgAction> {
    let world = World {
        deleting: true,
        ..world_at(o, 1000, 0)
    };
    let d = Postgres::decide(spec, state, &world);
    if let Decision::Go { to, reason, .. } = &d {
        assert!(is_declared::<Postgres>(state, to, reason));
    }
    d
}

#[test]
fn deletion_takes_a_final_backup_before_the_finalizer_goes() {
    let s = with_backups(spec("16.3"), None);
    let d = deleting(&s, &ready(V1, 0), at_rest(V1, 0));
    assert_eq!(d.reason(), DELETION_REQUESTED);
    let finalizing = PgState::Finalizing { attempt: 1 };
    let d = deleting(&s, &finalizing, at_rest(V1, 0));
    assert_eq!(
        d.actions(),
        &[PgAction::Jobs(JobAction::RunBackup {
            key: "final-backup-1".to_owned(),
            kind: BackupKind::Final
        })]
    );
    let mut o = at_rest(V1, 0);
    o.jobs = vec![job("final-backup-1", Purpose::FinalBackup, failed(1000))];
    let d = deleting(&s, &finalizing, o.clone());
    assert_eq!(d.reason(), FINAL_BACKUP_FAILED);
    assert!(is_degraded(&d));
    o.requests.skip_final_backup = true;
    let d = deleting(&s, &finalizing, o);
    assert_eq!(d.reason(), FINAL_BACKUP_SKIPPED);
    assert_eq!(target(&d), Some(&PgState::Finalized));
}

#[test]
fn without_a_backup_destination_deletion_releases_at_once() {
    let d = deleting(&spec("16.3"), &ready(V1, 0), at_rest(V1, 0));
    assert_eq!(d.reason(), NO_BACKUP_POLICY);
    assert_eq!(target(&d), Some(&PgState::Finalized));
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
fn every_edge_is_taken_in_the_file_the_table_names() {
    let checked = crate::machines::common::table_sources::where_taken::<Postgres>(
        "src/machines/postgres/decide",
    );
    assert_eq!(checked, Ok(()));
}
