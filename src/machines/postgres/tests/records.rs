//! Whole reconciles through the engine ([`crate::engine::step`]) for what a decision
//! alone cannot show: what the persisted record remembers once the Jobs are gone, and
//! what a lost record does to deletion.

use super::*;
use crate::engine::{EngineStatus, Outcome};
use crate::machines::common::testing::{self, status_in};

fn reconcile(
    spec: &PostgresClusterSpec,
    status: &mut EngineStatus<PgState>,
    o: &Observed,
    deleting: bool,
) -> Outcome<Postgres> {
    testing::reconcile_at(spec, status, o, deleting, 1000)
}

fn runs_backup(out: &Outcome<Postgres>) -> bool {
    out.actions
        .iter()
        .any(|a| matches!(a, PgAction::Jobs(JobAction::RunBackup { .. })))
}

fn deleted_jobs(actions: &[PgAction]) -> Vec<String> {
    let mut names: Vec<String> =
        picked!(actions, PgAction::Jobs(JobAction::DeleteJob { name, .. }) => name.clone());
    names.sort();
    names
}

/// Bug 2 of issue 11: a token runs one backup, whether its Job is pruned after its
/// outcome was read or before.
#[test]
fn a_token_runs_one_backup_even_when_its_job_is_deleted() {
    let s = with_backups(spec("16.3"), None);
    for read_first in [true, false] {
        let mut status = status_in(&ready(V1, 0));
        let mut o = at_rest(V1, 0);
        o.requests.backup_now = Some("t1".to_owned());
        let key = backup_key("t1");
        let mut backups = 0;
        for _ in 0..3 {
            if runs_backup(&reconcile(&s, &mut status, &o, false)) {
                backups += 1;
                o.jobs = vec![job(&key, Purpose::Backup, JobOutcome::Running)];
            }
        }
        o.jobs = vec![job(
            &key,
            Purpose::Backup,
            JobOutcome::Succeeded { at: t(5) },
        )];
        if read_first {
            let out = reconcile(&s, &mut status, &o, false);
            assert_eq!(out.taken.map(|t| t.reason), Some(BACKUP_SUCCEEDED));
        }
        o.jobs.clear();
        for _ in 0..3 {
            backups += usize::from(runs_backup(&reconcile(&s, &mut status, &o, false)));
        }
        assert_eq!(backups, 1, "read before the delete: {read_first}");
    }
}

/// Bug 8 of issue 11: at rest, finished on-demand Jobs beyond the history limit go.
#[test]
fn on_demand_backup_jobs_are_pruned_beyond_the_history_limit() {
    let s = with_backups(spec("16.3"), None);
    let mut o = at_rest(V1, 0);
    for i in 0..5 {
        let mut j = job(
            &backup_key(&format!("t{i}")),
            Purpose::Backup,
            JobOutcome::Succeeded { at: t(i) },
        );
        j.created = Some(t(i));
        o.jobs.push(j);
    }
    let d = decide(&s, &ready(V1, 0), o);
    let mut oldest = vec![
        format!("pg-{}", backup_key("t0")),
        format!("pg-{}", backup_key("t1")),
    ];
    oldest.sort();
    assert_eq!(deleted_jobs(d.actions()), oldest);
}

/// Bug 7 of issue 11: a record lost while deleting never skips the final backup; an
/// object that never created anything is released at once.
#[test]
fn a_lost_record_while_deleting_still_takes_the_final_backup() {
    let s = with_backups(spec("16.3"), None);
    let mut status = EngineStatus::default();
    let o = at_rest(V1, 0);
    let mut started = false;
    for _ in 0..4 {
        let out = reconcile(&s, &mut status, &o, true);
        assert!(!out.release_finalizer, "the cluster may hold data");
        started |= runs_backup(&out);
    }
    assert!(started, "no final backup was started: {:?}", status.machine);
    let mut empty = at_rest(V1, 0);
    empty.statefulset = None;
    empty.pods.clear();
    let out = reconcile(&s, &mut EngineStatus::default(), &empty, true);
    assert!(out.release_finalizer);
}
