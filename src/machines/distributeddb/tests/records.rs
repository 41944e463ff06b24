//! Whole reconciles through the engine ([`crate::engine::step`]) for what a decision
//! alone cannot show: what the persisted record remembers once the Jobs are gone, and
//! what a lost record does to deletion.

use super::*;
use crate::machines::common::testing::{Reconciles, deleted_jobs, runs_backup};

/// Reconciles of a DistributedDB with a backup policy at db:1, from Ready.
fn from_ready() -> Reconciles<DistributedDb> {
    Reconciles::from(with_backups(spec("db:1")), &ready("db:1"))
}

/// Reconciles of a DistributedDB with a backup policy being deleted, its record lost.
fn deleting_without_a_record() -> Reconciles<DistributedDb> {
    Reconciles::deleting_without_a_record(with_backups(spec("db:1")))
}

fn with_token(mut o: Observed, token: &str) -> Observed {
    o.requests.backup_now = Some(token.to_owned());
    o
}

/// Pruning the Job that served a token must not run another backup.
#[test]
fn a_served_token_runs_no_second_backup_once_its_job_is_gone() {
    let mut run = from_ready();
    let mut o = with_token(at_rest("db:1"), "t1");
    let key = backup_key("t1", None);
    let backups = run.backups_playing(3, &mut o, |o| {
        o.jobs = vec![job(&key, Purpose::Backup, JobOutcome::Running)];
    });
    assert_eq!(backups, 1, "the token's Job is created once");
    o.jobs = vec![job(&key, Purpose::Backup, succeeded())];
    let taken = run.once(&o).taken.map(|t| t.reason);
    assert_eq!(taken, Some(BACKUP_SUCCEEDED));
    // A cleanup (a TTL controller, a person, Lockstep's own history limit) removes it.
    o.jobs.clear();
    for _ in 0..3 {
        let out = run.once(&o);
        assert!(
            !runs_backup(&out.actions),
            "token t1 was served: {:?}",
            out.actions
        );
        assert_eq!(out.state.as_ref(), Some(&ready("db:1")));
    }
    // A new token is a new backup.
    let asked = run.backups_in(2, &with_token(at_rest("db:1"), "t2"));
    assert!(asked > 0, "a new token runs a backup");
}

/// A Job deleted before its outcome was read is not run again.
#[test]
fn a_backup_job_gone_before_its_outcome_was_read_is_not_run_again() {
    let mut run = from_ready();
    let o = with_token(at_rest("db:1"), "t1");
    assert_eq!(run.backups_in(2, &o), 1);
    // Not in the cache yet (a watch event behind): waited for, not taken for lost.
    let out = run.once_at(&o, 1010);
    assert!(!runs_backup(&out.actions), "{:?}", out.actions);
    assert!(matches!(run.current(), Some(DdbState::BackingUp { .. })));
    // The Job ran, finished and was deleted while the operator was away.
    for _ in 0..3 {
        let out = run.once_at(&o, 1000 + 61);
        assert!(!runs_backup(&out.actions), "{:?}", out.actions);
    }
    assert_eq!(
        run.current(),
        Some(ready("db:1")),
        "the backup is reported lost and the machine is back at rest"
    );
}

/// Served on-demand backup Jobs are pruned beyond a history limit per
/// outcome, oldest first, as a CronJob prunes its Jobs.
#[test]
fn on_demand_backup_jobs_are_pruned_beyond_the_history_limit() {
    let mut o = at_rest("db:1");
    let mut keys = Vec::new();
    for (i, token) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        let key = backup_key(token, None);
        let mut j = job(
            &key,
            Purpose::Backup,
            JobOutcome::Succeeded { at: t(i as i64) },
        );
        j.created = Some(t(i as i64));
        o.jobs.push(j);
        keys.push(key);
    }
    let mut f = job(&backup_key("f", None), Purpose::Backup, failed(10));
    f.created = Some(t(10));
    o.jobs.push(f);
    o.requests.backup_now = Some("e".to_owned());
    let mut run = from_ready();
    // The current token's backup was served (its Job is there): back at rest.
    let _ = run.once(&o);
    let _ = run.once(&o);
    assert_eq!(
        deleted_jobs(&run.once(&o).actions),
        [format!("db-{}", keys[0]), format!("db-{}", keys[1])],
        "the two oldest successful ones go; the newest three and the one failure stay"
    );
}

/// A record lost while deleting never skips the final backup.
#[test]
fn a_lost_record_while_deleting_still_takes_the_final_backup() {
    let mut run = deleting_without_a_record();
    let o = at_rest("db:1");
    assert!(!run.once(&o).release_finalizer, "the cluster may hold data");
    let mut finalizing = false;
    for _ in 0..3 {
        let out = run.once(&o);
        assert!(!out.release_finalizer);
        finalizing |= matches!(out.state, Some(DdbState::Finalizing { .. }));
        if runs_backup(&out.actions) {
            assert!(finalizing);
            return;
        }
    }
    panic!("no final backup was started: {:?}", run.status.machine);
}

/// An object that never created anything is released at once.
#[test]
fn a_lost_record_while_deleting_releases_when_nothing_was_created() {
    let mut o = at_rest("db:1");
    o.statefulset = None;
    o.pods.clear();
    o.own.volumes.claims.clear();
    let out = deleting_without_a_record().once(&o);
    assert!(out.release_finalizer);
    assert!(out.actions.is_empty());
}
