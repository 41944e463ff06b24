//! Whole reconciles through the engine ([`crate::engine::step`]) for what a decision
//! alone cannot show: what the persisted record remembers once the Jobs are gone, and
//! what a lost record does to deletion.

use super::*;
use crate::machines::common::testing::{Reconciles, deleted_jobs, runs_backup};

/// Reconciles of a cluster with a backup destination being deleted, its record lost.
fn deleting_without_a_record() -> Reconciles<Postgres> {
    Reconciles::deleting_without_a_record(with_backups(spec("16.3"), None))
}

/// A token runs one backup, whether its Job is pruned after its
/// outcome was read or before.
#[test]
fn a_token_runs_one_backup_even_when_its_job_is_deleted() {
    for read_first in [true, false] {
        let mut run = Reconciles::<Postgres>::from(with_backups(spec("16.3"), None), &ready(V1, 0));
        let mut o = at_rest(V1, 0);
        o.requests.backup_now = Some("t1".to_owned());
        let key = backup_key("t1", None);
        let mut backups = run.backups_playing(3, &mut o, |o| {
            o.jobs = vec![job(&key, Purpose::Backup, JobOutcome::Running)];
        });
        o.jobs = vec![job(
            &key,
            Purpose::Backup,
            JobOutcome::Succeeded { at: t(5) },
        )];
        if read_first {
            let out = run.once(&o);
            assert_eq!(out.taken.map(|t| t.reason), Some(BACKUP_SUCCEEDED));
        }
        o.jobs.clear();
        backups += run.backups_in(3, &o);
        assert_eq!(backups, 1, "read before the delete: {read_first}");
    }
}

/// At rest, finished on-demand Jobs beyond the history limit go.
#[test]
fn on_demand_backup_jobs_are_pruned_beyond_the_history_limit() {
    let s = with_backups(spec("16.3"), None);
    let mut o = at_rest(V1, 0);
    for i in 0..5 {
        let mut j = job(
            &backup_key(&format!("t{i}"), None),
            Purpose::Backup,
            JobOutcome::Succeeded { at: t(i) },
        );
        j.created = Some(t(i));
        o.jobs.push(j);
    }
    let d = decide(&s, &ready(V1, 0), o);
    let mut oldest = vec![
        format!("pg-{}", backup_key("t0", None)),
        format!("pg-{}", backup_key("t1", None)),
    ];
    oldest.sort();
    let mut pruned = deleted_jobs(d.actions());
    pruned.sort();
    assert_eq!(pruned, oldest);
}

/// A record lost while deleting never skips the final backup; an
/// object that never created anything is released at once.
#[test]
fn a_lost_record_while_deleting_still_takes_the_final_backup() {
    let mut run = deleting_without_a_record();
    let o = at_rest(V1, 0);
    let mut started = false;
    for _ in 0..4 {
        let out = run.once(&o);
        assert!(!out.release_finalizer, "the cluster may hold data");
        started |= runs_backup(&out.actions);
    }
    assert!(
        started,
        "no final backup was started: {:?}",
        run.status.machine
    );
    let mut empty = at_rest(V1, 0);
    empty.statefulset = None;
    empty.pods.clear();
    assert!(deleting_without_a_record().once(&empty).release_finalizer);
}
