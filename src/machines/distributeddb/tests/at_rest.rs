//! Ready: drift, scaling, volumes.

use super::*;

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
    let d = decide(&spec("db:1"), &ready("db:1"), o);
    assert_eq!(d.actions().len(), 2);
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
