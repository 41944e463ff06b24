//! Ready: drift, scaling, volumes.

use super::*;
use crate::machines::common::annotations::BACKUP_NOW;

#[test]
fn an_idle_ready_cluster_does_nothing() {
    let d = decide(&spec("db:1"), &ready("db:1"), at_rest("db:1"));
    assert!(d.actions().is_empty());
    assert_stays(&d, SERVING);
}

#[test]
fn a_drifted_or_deleted_statefulset_is_restored_at_the_version() {
    let mut o = at_rest("db:1");
    if let Some(s) = &mut o.statefulset {
        s.conforms = false;
    }
    let d = decide(&spec("db:1"), &ready("db:1"), o);
    assert!(matches!(d.actions(), [DdbAction::EnsureStatefulSet(s)] if s.image == "db:1"));
    let mut o = at_rest("db:1");
    o.statefulset = None;
    o.own.service_in_sync = false;
    o.own.pdb_in_sync = false;
    let d = decide(&spec("db:1"), &ready("db:1"), o);
    assert_eq!(d.actions().len(), 3);
    assert!(d.actions().contains(&DdbAction::EnsurePdb));
}

#[test]
fn the_cronjob_follows_the_backup_policy() {
    let d = decide(&with_backups(spec("db:1")), &ready("db:1"), at_rest("db:1"));
    assert_eq!(d.actions(), &[DdbAction::Jobs(JobAction::EnsureCronJob)]);
    let mut o = at_rest("db:1");
    o.cronjob = Some(CronJobView {
        uid: "cj".to_owned(),
        in_sync: true,
    });
    let d = decide(&spec("db:1"), &ready("db:1"), o);
    assert_eq!(
        d.actions(),
        &[DdbAction::Jobs(JobAction::DeleteCronJob {
            uid: "cj".to_owned()
        })]
    );
}

#[test]
fn a_replicas_change_is_tracked_in_scaling_one_replica_at_a_time() {
    let mut s = spec("db:1");
    s.replicas = 5;
    let d = decide(&s, &ready("db:1"), at_rest("db:1"));
    let scaling = |replicas| DdbState::Scaling {
        version: "db:1".to_owned(),
        from_replicas: 3,
        replicas,
        hook: None,
    };
    assert_goes(&d, REPLICAS_CHANGED, &scaling(4));
    let d = decide(&s, &scaling(4), at_rest("db:1"));
    assert!(matches!(d.actions(), [DdbAction::EnsureStatefulSet(sh)] if sh.replicas == 4));
    let mut o = at_rest("db:1");
    if let Some(sts) = &mut o.statefulset {
        sts.replicas = 4;
    }
    o.pods.insert(3, pod(3, "db:1", false));
    assert!(target(&decide(&s, &scaling(4), o.clone())).is_none());
    o.pods.insert(3, pod(3, "db:1", true));
    let d = decide(&s, &scaling(4), o.clone());
    assert_goes(&d, NEXT_REPLICA, &scaling(5));
    o.pods.insert(4, pod(4, "db:1", true));
    if let Some(sts) = &mut o.statefulset {
        sts.replicas = 5;
    }
    let d = decide(&s, &scaling(5), o);
    assert_eq!(d.reason(), SCALING_COMPLETE);
}

#[test]
fn volumes_grow_when_the_storage_size_grows() {
    let mut s = spec("db:1");
    s.storage.size = "2Gi".to_owned();
    let mut o = at_rest("db:1");
    o.own.volumes.claims.insert(
        0,
        crate::machines::distributeddb::observe::VolumeView {
            requested: Some("1Gi".to_owned()),
        },
    );
    o.own.volumes.claims.insert(
        1,
        crate::machines::distributeddb::observe::VolumeView {
            requested: Some("2048Mi".to_owned()),
        },
    );
    let d = decide(&s, &ready("db:1"), o);
    assert_eq!(
        d.actions(),
        &[DdbAction::ExpandVolume {
            ordinal: 0,
            size: "2Gi".to_owned()
        }]
    );
}

/// A finished Job still held by its outcome finalizer.
fn held(key: &str, purpose: Purpose) -> JobView {
    JobView {
        held: Some(crate::machines::common::jobs::Hold {
            resource_version: "7".to_owned(),
            others: Vec::new(),
        }),
        ..job(key, purpose, JobOutcome::Succeeded { at: t(10) })
    }
}

#[test]
fn at_rest_the_outcome_finalizer_of_every_finished_job_goes() {
    let mut o = at_rest("db:1");
    o.jobs = vec![
        held("backup-abc", Purpose::Backup),
        JobView {
            outcome: JobOutcome::Running,
            ..held("backup-def", Purpose::Backup)
        },
    ];
    let d = decide(&spec("db:1"), &ready("db:1"), o);
    let released: Vec<&str> = d
        .actions()
        .iter()
        .filter_map(|a| match a {
            DdbAction::Jobs(JobAction::ReleaseJob { name, hold, .. }) => {
                assert_eq!(
                    hold.resource_version, "7",
                    "preconditioned on the version read"
                );
                Some(name.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        released,
        ["db-backup-abc"],
        "only finished Jobs, whose outcome is recorded"
    );
}

#[test]
fn a_backup_whose_job_was_lost_keeps_ready_degraded_until_a_new_token() {
    let spec = with_backups(spec("db:1"));
    let mut o = at_rest("db:1");
    o.cronjob = Some(CronJobView {
        uid: "cj".to_owned(),
        in_sync: true,
    });
    o.requests.backup_now = Some("t1".to_owned());
    let world = |o: Observed| crate::engine::World {
        acks: [(BACKUP_NOW.to_owned(), "t1".to_owned())].into(),
        entered_by: BACKUP_LOST.to_owned(),
        ..testing::world_at(o, 1000, 0)
    };
    let d =
        <DistributedDb as crate::engine::Machine>::decide(&spec, &ready("db:1"), &world(o.clone()));
    testing::assert_degraded(&d, BACKUP_OUTCOME_UNKNOWN);
    let message = testing::message(&d);
    assert!(
        message.contains("lockstep.dev/backup-now=t1") && message.contains("set a new"),
        "names the token and what to do: {message}"
    );
    // A new token starts another backup.
    o.requests.backup_now = Some("t2".to_owned());
    let d = <DistributedDb as crate::engine::Machine>::decide(&spec, &ready("db:1"), &world(o));
    assert!(matches!(
        testing::target(&d),
        Some(DdbState::BackingUp { .. })
    ));
}

#[test]
fn a_request_refused_while_deleting_names_the_way_out() {
    let status = testing::status_in(&DdbState::Finalizing { attempt: 1 });
    let refusal = "jobs \"db-final-backup-1\" is forbidden: unable to create new content in namespace ns because it is being terminated";
    let (next, note) =
        crate::engine::step::with_refusal::<DistributedDb>(&status, refusal, 1, true, t(0))
            .expect("recorded");
    let degraded = next
        .condition(crate::engine::conditions::DEGRADED)
        .expect("Degraded");
    assert!(
        degraded
            .message
            .ends_with("annotate lockstep.dev/skip-final-backup=true"),
        "{}",
        degraded.message
    );
    assert_eq!(note.message, degraded.message);
    let (not_deleting, _) =
        crate::engine::step::with_refusal::<DistributedDb>(&status, refusal, 1, false, t(0))
            .expect("recorded");
    let message = &not_deleting
        .condition(crate::engine::conditions::DEGRADED)
        .expect("Degraded")
        .message;
    assert!(!message.contains("skip-final-backup"), "{message}");
}
