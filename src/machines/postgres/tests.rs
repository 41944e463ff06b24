//! Unit tests of `decide`, of rendering and of the status projection, read as sentences.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Container, EnvVar};
use kube::ResourceExt;

use super::actions::{DeleteCause, PgAction, Role, ServiceKind, backup_key, promote_key};
use super::api::{BackupSpec, PostgresCluster, PostgresClusterSpec};
use super::machine::Postgres;
use super::observe::{CronJobView, InSync, Observed, PodView, Requests, StatefulSetView};
use super::render;
use super::state::{PgState, PodRef, SwitchCause, SwitchStep, Switchover, Topology};
use super::table::reason::*;
use crate::engine::machine::is_declared;
use crate::engine::{Decision, Health, Machine, Wait, World};
use crate::machines::common::backup::BackupKind;
use crate::machines::common::jobs::{JobOutcome, JobView, Purpose};

const V1: &str = "postgres:16.3";
const V2: &str = "postgres:16.4";

fn t(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap_or_default()
}

fn spec(version: &str) -> PostgresClusterSpec {
    PostgresClusterSpec {
        version: version.to_owned(),
        image: None,
        replicas: 3,
        storage_size: "1Gi".to_owned(),
        storage_class_name: None,
        resources: None,
        failover_delay_seconds: 30,
        credentials_secret: Some("pg-creds".to_owned()),
        database: Some("app".to_owned()),
        backup_schedule: None,
        backup: None,
    }
}

fn backup() -> BackupSpec {
    BackupSpec {
        s3_endpoint: "https://s3.example".to_owned(),
        bucket: "backups".to_owned(),
        prefix: Some("prod".to_owned()),
        region: None,
        virtual_hosted_style: false,
        credentials_secret: "s3".to_owned(),
        image: "pg-backup:16".to_owned(),
        timeout_seconds: 600,
        suspend: false,
        pod_labels: BTreeMap::new(),
        pod_annotations: BTreeMap::new(),
    }
}

fn with_backups(mut s: PostgresClusterSpec, schedule: Option<&str>) -> PostgresClusterSpec {
    s.backup = Some(backup());
    s.backup_schedule = schedule.map(str::to_owned);
    s
}

fn uid(k: i32, image: &str) -> String {
    format!("uid-{k}-{image}")
}

fn pod(k: i32, image: &str, ready: bool, role: Option<Role>) -> PodView {
    PodView {
        uid: uid(k, image),
        image: Some(image.to_owned()),
        ready,
        terminating: false,
        role,
    }
}

/// Change the observed pod `k`, if there is one.
fn edit(o: &mut Observed, k: i32, change: impl FnOnce(&mut PodView)) {
    if let Some(p) = o.pods.get_mut(&k) {
        change(p);
    }
}

fn role_of(k: i32, primary: i32) -> Role {
    if k == primary {
        Role::Primary
    } else {
        Role::Replica
    }
}

/// Three instances Ready at `image`, `primary` labelled primary, every object in place.
fn at_rest(image: &str, primary: i32) -> Observed {
    Observed {
        name: "pg".to_owned(),
        in_sync: InSync::ALL,
        statefulset: Some(StatefulSetView {
            conforms: true,
            image: Some(image.to_owned()),
            replicas: 3,
            caught_up: true,
        }),
        pods: (0..3)
            .map(|k| (k, pod(k, image, true, Some(role_of(k, primary)))))
            .collect(),
        jobs: Vec::new(),
        cronjob: None,
        requests: Requests::default(),
    }
}

fn world_at(observed: Observed, now: i64, entered: i64) -> World<Observed> {
    World {
        observed,
        deleting: false,
        now: t(now),
        entered_at: t(entered),
    }
}

fn decide_at(
    spec: &PostgresClusterSpec,
    state: &PgState,
    o: Observed,
    now: i64,
    entered: i64,
) -> Decision<PgState, PgAction> {
    let d = Postgres::decide(spec, state, &world_at(o, now, entered));
    if let Decision::Go { to, reason, .. } = &d {
        assert!(
            is_declared::<Postgres>(state, to, reason),
            "undeclared: {state:?} -> {to:?} ({reason})"
        );
    }
    d
}

fn decide(spec: &PostgresClusterSpec, state: &PgState, o: Observed) -> Decision<PgState, PgAction> {
    decide_at(spec, state, o, 1000, 0)
}

fn cluster(image: &str, primary: i32) -> Topology {
    Topology {
        image: image.to_owned(),
        replicas: 3,
        primary,
    }
}

fn ready(image: &str, primary: i32) -> PgState {
    PgState::Ready {
        cluster: cluster(image, primary),
    }
}

fn switching(step: SwitchStep, attempt: u32, cause: SwitchCause) -> PgState {
    PgState::SwitchingOver(Switchover {
        cluster: cluster(V2, 0),
        old_uid: Some(uid(0, V1)),
        target: PodRef {
            ordinal: 1,
            uid: uid(1, V2),
        },
        step,
        attempt,
        cause,
    })
}

fn job(key: &str, purpose: Purpose, outcome: JobOutcome) -> JobView {
    JobView {
        name: format!("pg-{key}"),
        uid: format!("job-{key}"),
        key: Some(key.to_owned()),
        purpose: Some(purpose),
        created: Some(t(0)),
        outcome,
    }
}

fn failed(at: i64) -> JobOutcome {
    JobOutcome::Failed {
        at: t(at),
        reason: "BackoffLimitExceeded".to_owned(),
        message: String::new(),
    }
}

fn target(d: &Decision<PgState, PgAction>) -> Option<&PgState> {
    match d {
        Decision::Go { to, .. } => Some(to),
        Decision::Stay { .. } => None,
    }
}

fn labels_in(d: &Decision<PgState, PgAction>) -> Vec<(i32, Role)> {
    d.actions()
        .iter()
        .filter_map(|a| match a {
            PgAction::Label { ordinal, role } => Some((*ordinal, *role)),
            _ => None,
        })
        .collect()
}

fn deletes_in(d: &Decision<PgState, PgAction>) -> Vec<(i32, String, DeleteCause)> {
    d.actions()
        .iter()
        .filter_map(|a| match a {
            PgAction::DeletePod {
                ordinal,
                uid,
                cause,
            } => Some((*ordinal, uid.clone(), *cause)),
            _ => None,
        })
        .collect()
}

fn promotes_in(d: &Decision<PgState, PgAction>) -> Vec<i32> {
    d.actions()
        .iter()
        .filter_map(|a| match a {
            PgAction::RunPromote { target, .. } => Some(*target),
            _ => None,
        })
        .collect()
}

fn is_degraded(d: &Decision<PgState, PgAction>) -> bool {
    matches!(
        d,
        Decision::Stay {
            health: Health::Degraded,
            ..
        }
    )
}

// --- creation ----------------------------------------------------------------------

#[test]
fn a_cluster_without_a_credentials_secret_generates_one_before_anything_else() {
    let mut s = spec("16.3");
    s.credentials_secret = None;
    let d = decide(&s, &Postgres::initial(), Observed::default());
    assert_eq!(d.reason(), CREDENTIALS_GENERATED);
    assert_eq!(d.actions(), &[PgAction::CreateCredentials]);
    // Once recorded, it is never created again.
    let next = PgState::Creating {
        credentials_created: true,
    };
    let d = decide(&s, &next, Observed::default());
    assert!(!d.actions().contains(&PgAction::CreateCredentials));
}

#[test]
fn a_given_credentials_secret_is_used_as_it_is() {
    let d = decide(&spec("16.3"), &Postgres::initial(), Observed::default());
    assert!(!d.actions().contains(&PgAction::CreateCredentials));
    assert!(d.actions().contains(&PgAction::EnsureStatefulSet {
        image: V1.to_owned(),
        replicas: 3
    }));
    assert!(d.actions().contains(&PgAction::EnsureScripts));
    for kind in [
        ServiceKind::Headless,
        ServiceKind::ReadWrite,
        ServiceKind::ReadOnly,
    ] {
        assert!(d.actions().contains(&PgAction::EnsureService(kind)));
    }
}

#[test]
fn creation_labels_pod_0_primary_and_every_other_pod_replica() {
    let mut o = at_rest(V1, 0);
    for p in o.pods.values_mut() {
        p.role = None;
        p.ready = false;
    }
    let d = decide(&spec("16.3"), &Postgres::initial(), o);
    assert_eq!(
        labels_in(&d),
        vec![(1, Role::Replica), (2, Role::Replica), (0, Role::Primary)]
    );
    assert!(target(&d).is_none());
}

#[test]
fn creation_completes_once_every_instance_is_ready_with_its_role() {
    let d = decide(&spec("16.3"), &Postgres::initial(), at_rest(V1, 0));
    assert_eq!(d.reason(), CLUSTER_CREATED);
    assert_eq!(target(&d), Some(&ready(V1, 0)));
}

#[test]
fn an_explicit_image_overrides_the_version() {
    let mut s = spec("16");
    s.image = Some("registry.example/postgres:16-custom".to_owned());
    let d = decide(&s, &Postgres::initial(), Observed::default());
    assert!(d.actions().contains(&PgAction::EnsureStatefulSet {
        image: "registry.example/postgres:16-custom".to_owned(),
        replicas: 3
    }));
}

// --- at rest -----------------------------------------------------------------------

#[test]
fn a_cluster_at_rest_makes_no_request() {
    let d = decide(&spec("16.3"), &ready(V1, 0), at_rest(V1, 0));
    assert_eq!(d.reason(), SERVING);
    assert!(d.actions().is_empty());
}

#[test]
fn a_recreated_pod_gets_its_role_back_from_the_state() {
    let mut o = at_rest(V1, 1);
    edit(&mut o, 1, |p| p.role = None);
    edit(&mut o, 0, |p| p.role = None);
    let d = decide(&spec("16.3"), &ready(V1, 1), o);
    assert_eq!(labels_in(&d), vec![(0, Role::Replica), (1, Role::Primary)]);
}

#[test]
fn a_stray_primary_label_is_removed_before_the_primary_is_labelled() {
    let mut o = at_rest(V1, 0);
    edit(&mut o, 2, |p| p.role = Some(Role::Primary));
    edit(&mut o, 0, |p| p.role = None);
    let d = decide(&spec("16.3"), &ready(V1, 0), o);
    // It may be a writable primary: out of both Services, and restarted as a standby.
    assert_eq!(labels_in(&d), vec![(2, Role::Demoted), (0, Role::Primary)]);
    assert_eq!(deletes_in(&d), vec![(2, uid(2, V1), DeleteCause::Fence)]);
}

// --- upgrades ----------------------------------------------------------------------

#[test]
fn a_version_change_starts_an_upgrade_to_the_new_image() {
    let d = decide(&spec("16.4"), &ready(V1, 0), at_rest(V1, 0));
    assert_eq!(d.reason(), IMAGE_CHANGED);
    assert_eq!(
        target(&d),
        Some(&PgState::Upgrading {
            cluster: cluster(V2, 0),
            pod: None
        })
    );
}

#[test]
fn the_highest_replica_is_chosen_first_and_its_uid_recorded_before_any_delete() {
    let state = PgState::Upgrading {
        cluster: cluster(V2, 0),
        pod: None,
    };
    let mut o = at_rest(V1, 0);
    o.statefulset = Some(StatefulSetView {
        image: Some(V2.to_owned()),
        ..o.statefulset.clone().unwrap_or(StatefulSetView {
            conforms: true,
            image: None,
            replicas: 3,
            caught_up: true,
        })
    });
    let d = decide(&spec("16.4"), &state, o);
    assert_eq!(d.reason(), POD_CHOSEN);
    assert!(deletes_in(&d).is_empty());
    assert_eq!(
        target(&d),
        Some(&PgState::Upgrading {
            cluster: cluster(V2, 0),
            pod: Some(PodRef {
                ordinal: 2,
                uid: uid(2, V1)
            })
        })
    );
}

fn upgrade_observed(at_target: &[i32], primary: i32) -> Observed {
    let mut o = at_rest(V1, primary);
    for k in at_target {
        o.pods
            .insert(*k, pod(*k, V2, true, Some(role_of(*k, primary))));
    }
    if let Some(sts) = o.statefulset.as_mut() {
        sts.image = Some(V2.to_owned());
    }
    o
}

#[test]
fn the_chosen_replica_is_deleted_with_its_uid_as_precondition() {
    let state = PgState::Upgrading {
        cluster: cluster(V2, 0),
        pod: Some(PodRef {
            ordinal: 2,
            uid: uid(2, V1),
        }),
    };
    let d = decide(&spec("16.4"), &state, upgrade_observed(&[], 0));
    assert_eq!(deletes_in(&d), vec![(2, uid(2, V1), DeleteCause::Upgrade)]);
}

#[test]
fn no_replica_is_deleted_while_another_instance_is_not_ready() {
    let state = PgState::Upgrading {
        cluster: cluster(V2, 0),
        pod: Some(PodRef {
            ordinal: 2,
            uid: uid(2, V1),
        }),
    };
    let mut o = upgrade_observed(&[], 0);
    edit(&mut o, 1, |p| p.ready = false);
    let d = decide(&spec("16.4"), &state, o);
    assert_eq!(d.reason(), WAITING_FOR_PODS);
    assert!(deletes_in(&d).is_empty());
}

#[test]
fn no_pod_is_deleted_until_the_statefulset_template_holds_the_target() {
    let state = PgState::Upgrading {
        cluster: cluster(V2, 0),
        pod: Some(PodRef {
            ordinal: 2,
            uid: uid(2, V1),
        }),
    };
    let d = decide(&spec("16.4"), &state, at_rest(V1, 0));
    assert!(deletes_in(&d).is_empty());
    assert!(d.actions().contains(&PgAction::EnsureStatefulSet {
        image: V2.to_owned(),
        replicas: 3
    }));
}

#[test]
fn a_recreated_replica_ready_at_the_target_is_upgraded() {
    let state = PgState::Upgrading {
        cluster: cluster(V2, 0),
        pod: Some(PodRef {
            ordinal: 2,
            uid: uid(2, V1),
        }),
    };
    let d = decide(&spec("16.4"), &state, upgrade_observed(&[2], 0));
    assert_eq!(d.reason(), POD_UPGRADED);
}

#[test]
fn the_primary_is_left_alone_until_every_replica_runs_the_target() {
    let state = PgState::Upgrading {
        cluster: cluster(V2, 0),
        pod: None,
    };
    let d = decide(&spec("16.4"), &state, upgrade_observed(&[2], 0));
    assert_eq!(d.reason(), POD_CHOSEN);
    assert!(matches!(
        target(&d),
        Some(PgState::Upgrading { pod: Some(p), .. }) if p.ordinal == 1
    ));
}

#[test]
fn with_every_replica_upgraded_the_switchover_intent_is_recorded_before_any_label_moves() {
    let state = PgState::Upgrading {
        cluster: cluster(V2, 0),
        pod: None,
    };
    let d = decide(&spec("16.4"), &state, upgrade_observed(&[1, 2], 0));
    assert_eq!(d.reason(), SWITCHOVER_STARTED);
    assert!(d.actions().is_empty(), "{:?}", d.actions());
    assert_eq!(
        target(&d),
        Some(&switching(SwitchStep::Demote, 1, SwitchCause::Upgrade))
    );
}

#[test]
fn the_switchover_demotes_the_old_primary_before_promoting_anyone() {
    let d = decide(
        &spec("16.4"),
        &switching(SwitchStep::Demote, 1, SwitchCause::Upgrade),
        upgrade_observed(&[1, 2], 0),
    );
    assert_eq!(d.reason(), OLD_PRIMARY_DEMOTED);
    // Still a writable primary until it restarts: served by neither Service.
    assert_eq!(labels_in(&d), vec![(0, Role::Demoted)]);
    assert!(deletes_in(&d).is_empty(), "a switchover does not fence");
    assert!(promotes_in(&d).is_empty());
}

#[test]
fn mid_switchover_nobody_is_labelled_primary() {
    let mut o = upgrade_observed(&[1, 2], 0);
    edit(&mut o, 0, |p| p.role = Some(Role::Demoted));
    let d = decide(
        &spec("16.4"),
        &switching(SwitchStep::Promote, 1, SwitchCause::Upgrade),
        o,
    );
    assert_eq!(d.reason(), PROMOTING);
    // The target leaves `-ro` before it can become writable; nobody is labelled primary.
    assert_eq!(labels_in(&d), vec![(1, Role::Demoted)]);
    assert_eq!(promotes_in(&d), vec![1]);
    assert!(d.actions().iter().any(|a| matches!(
        a,
        PgAction::RunPromote {
            old_primary: Some(0),
            ..
        }
    )));
}

#[test]
fn a_target_that_is_not_ready_is_never_promoted_and_a_ready_one_is_chosen_instead() {
    let mut o = upgrade_observed(&[1, 2], 0);
    edit(&mut o, 0, |p| p.role = Some(Role::Demoted));
    edit(&mut o, 1, |p| p.ready = false);
    let d = decide(
        &spec("16.4"),
        &switching(SwitchStep::Promote, 1, SwitchCause::Upgrade),
        o.clone(),
    );
    assert!(promotes_in(&d).is_empty());
    assert_eq!(d.reason(), TARGET_CHANGED);
    assert!(matches!(
        target(&d),
        Some(PgState::SwitchingOver(s)) if s.target.ordinal == 2 && s.attempt == 1
    ));
    // With no other Ready replica at the target image, it waits, Degraded.
    edit(&mut o, 2, |p| p.ready = false);
    let d = decide(
        &spec("16.4"),
        &switching(SwitchStep::Promote, 1, SwitchCause::Upgrade),
        o,
    );
    assert!(promotes_in(&d).is_empty());
    assert_eq!(d.reason(), NO_PROMOTION_TARGET);
    assert!(is_degraded(&d));
}

#[test]
fn once_promoted_the_old_primary_loses_its_label_before_the_target_gets_it() {
    let mut o = upgrade_observed(&[1, 2], 0);
    edit(&mut o, 0, |p| p.role = Some(Role::Demoted));
    o.jobs = vec![job(
        &promote_key(1, &uid(1, V2), 1),
        Purpose::Promote,
        JobOutcome::Succeeded { at: t(10) },
    )];
    let d = decide(
        &spec("16.4"),
        &switching(SwitchStep::Promote, 1, SwitchCause::Upgrade),
        o,
    );
    assert_eq!(d.reason(), SWITCHOVER_COMPLETED);
    // Unconditionally: a cache may still show the old primary as a replica. It is still
    // the pod the switchover began with, so possibly writable: `demoted`, not `replica`.
    assert_eq!(labels_in(&d), vec![(0, Role::Demoted), (1, Role::Primary)]);
    assert_eq!(
        target(&d),
        Some(&PgState::Upgrading {
            cluster: cluster(V2, 1),
            pod: None
        })
    );
}

#[test]
fn the_primary_label_does_not_move_while_the_old_primary_pod_is_unseen() {
    let mut o = upgrade_observed(&[1, 2], 0);
    o.pods.remove(&0);
    o.jobs = vec![job(
        &promote_key(1, &uid(1, V2), 1),
        Purpose::Promote,
        JobOutcome::Succeeded { at: t(10) },
    )];
    let d = decide(
        &spec("16.4"),
        &switching(SwitchStep::Promote, 1, SwitchCause::Upgrade),
        o,
    );
    assert_eq!(d.reason(), WAITING_FOR_OLD_PRIMARY);
    assert!(!labels_in(&d).contains(&(1, Role::Primary)));
}

#[test]
fn after_the_switchover_the_old_primary_is_upgraded_last() {
    let state = PgState::Upgrading {
        cluster: cluster(V2, 1),
        pod: None,
    };
    let d = decide(&spec("16.4"), &state, upgrade_observed(&[1, 2], 1));
    assert_eq!(d.reason(), POD_CHOSEN);
    assert!(matches!(
        target(&d),
        Some(PgState::Upgrading { pod: Some(p), .. }) if p.ordinal == 0
    ));
    let d = decide(&spec("16.4"), &state, upgrade_observed(&[0, 1, 2], 1));
    assert_eq!(d.reason(), UPGRADE_COMPLETED);
    assert_eq!(target(&d), Some(&ready(V2, 1)));
}

#[test]
fn a_failed_promote_job_is_retried_after_its_backoff_as_a_new_job() {
    let mut o = upgrade_observed(&[1, 2], 0);
    edit(&mut o, 0, |p| p.role = Some(Role::Demoted));
    o.jobs = vec![job(
        &promote_key(1, &uid(1, V2), 1),
        Purpose::Promote,
        failed(1000),
    )];
    let state = switching(SwitchStep::Promote, 1, SwitchCause::Upgrade);
    let d = decide_at(&spec("16.4"), &state, o.clone(), 1005, 0);
    assert_eq!(d.reason(), PROMOTION_FAILED);
    assert!(is_degraded(&d));
    assert!(matches!(
        d,
        Decision::Stay {
            wait: Wait::Requeue(_),
            ..
        }
    ));
    let d = decide_at(&spec("16.4"), &state, o, 1011, 0);
    assert_eq!(d.reason(), PROMOTION_RETRIED);
    assert!(matches!(
        target(&d),
        Some(PgState::SwitchingOver(s)) if s.attempt == 2
    ));
}

#[test]
fn a_single_instance_is_replaced_in_place() {
    let mut s = spec("16.4");
    s.replicas = 1;
    let one = Topology {
        image: V2.to_owned(),
        replicas: 1,
        primary: 0,
    };
    let mut o = at_rest(V1, 0);
    o.pods.retain(|k, _| *k == 0);
    if let Some(sts) = o.statefulset.as_mut() {
        sts.image = Some(V2.to_owned());
        sts.replicas = 1;
    }
    let d = decide(
        &s,
        &PgState::Upgrading {
            cluster: one.clone(),
            pod: None,
        },
        o,
    );
    assert_eq!(d.reason(), POD_CHOSEN);
    assert!(matches!(
        target(&d),
        Some(PgState::Upgrading { pod: Some(p), .. }) if p.ordinal == 0
    ));
}

// --- failover ----------------------------------------------------------------------

fn primary_down(primary: i32) -> Observed {
    let mut o = at_rest(V1, primary);
    edit(&mut o, primary, |p| p.ready = false);
    o
}

fn lost(primary: i32) -> PgState {
    PgState::PrimaryLost {
        cluster: cluster(V1, primary),
    }
}

#[test]
fn a_primary_that_is_not_ready_is_noticed_at_once() {
    let d = decide(&spec("16.3"), &ready(V1, 0), primary_down(0));
    assert_eq!(d.reason(), PRIMARY_NOT_READY);
    assert_eq!(target(&d), Some(&lost(0)));
}

#[test]
fn failover_waits_for_the_delay_and_says_why() {
    let d = decide_at(&spec("16.3"), &lost(0), primary_down(0), 10, 0);
    assert_eq!(d.reason(), AWAITING_FAILOVER);
    assert!(is_degraded(&d));
    assert!(matches!(
        d,
        Decision::Stay { wait: Wait::Requeue(w), .. } if w.as_secs() == 20
    ));
    assert!(promotes_in(&d).is_empty());
}

#[test]
fn a_primary_that_recovers_within_the_delay_keeps_its_role() {
    let d = decide_at(&spec("16.3"), &lost(0), at_rest(V1, 0), 10, 0);
    assert_eq!(d.reason(), PRIMARY_RECOVERED);
    assert_eq!(target(&d), Some(&ready(V1, 0)));
}

#[test]
fn after_the_delay_a_ready_replica_is_chosen_and_the_intent_recorded() {
    let d = decide_at(&spec("16.3"), &lost(0), primary_down(0), 31, 0);
    assert_eq!(d.reason(), FAILOVER_STARTED);
    assert!(d.actions().is_empty());
    let Some(PgState::SwitchingOver(s)) = target(&d) else {
        panic!("{d:?}")
    };
    assert_eq!(s.cause, SwitchCause::Failover);
    assert_eq!(s.target.ordinal, 1);
    assert_eq!(s.old_uid.as_deref(), Some(uid(0, V1).as_str()));
    if let Decision::Go { message, .. } = &d {
        assert!(message.contains("failoverDelaySeconds=30"), "{message}");
    }
}

#[test]
fn a_not_ready_replica_is_never_chosen_for_failover() {
    let mut o = primary_down(0);
    edit(&mut o, 1, |p| p.ready = false);
    let d = decide_at(&spec("16.3"), &lost(0), o.clone(), 31, 0);
    assert!(matches!(
        target(&d),
        Some(PgState::SwitchingOver(s)) if s.target.ordinal == 2
    ));
    edit(&mut o, 2, |p| p.ready = false);
    let d = decide_at(&spec("16.3"), &lost(0), o, 31, 0);
    assert_eq!(d.reason(), NO_PROMOTION_TARGET);
    assert!(is_degraded(&d));
    assert!(target(&d).is_none());
}

#[test]
fn failover_fences_the_failed_primary_by_label_and_uid_preconditioned_delete() {
    let state = PgState::SwitchingOver(Switchover {
        cluster: cluster(V1, 0),
        old_uid: Some(uid(0, V1)),
        target: PodRef {
            ordinal: 1,
            uid: uid(1, V1),
        },
        step: SwitchStep::Demote,
        attempt: 1,
        cause: SwitchCause::Failover,
    });
    let d = decide(&spec("16.3"), &state, primary_down(0));
    assert_eq!(d.reason(), OLD_PRIMARY_DEMOTED);
    assert_eq!(labels_in(&d), vec![(0, Role::Demoted)]);
    assert_eq!(deletes_in(&d), vec![(0, uid(0, V1), DeleteCause::Fence)]);
    // A recreated old primary (another UID, no label yet) is not deleted again, and as a
    // new pod it starts as a standby: `replica`.
    let mut o = primary_down(0);
    edit(&mut o, 0, |p| p.uid = "recreated".to_owned());
    edit(&mut o, 0, |p| p.role = None);
    let d = decide(&spec("16.3"), &state, o);
    assert!(deletes_in(&d).is_empty());
    assert_eq!(labels_in(&d), vec![(0, Role::Replica)]);
}

#[test]
fn a_failover_promotes_without_waiting_for_the_failed_primary() {
    let state = PgState::SwitchingOver(Switchover {
        cluster: cluster(V1, 0),
        old_uid: Some(uid(0, V1)),
        target: PodRef {
            ordinal: 1,
            uid: uid(1, V1),
        },
        step: SwitchStep::Promote,
        attempt: 1,
        cause: SwitchCause::Failover,
    });
    let mut o = primary_down(0);
    edit(&mut o, 0, |p| p.role = Some(Role::Demoted));
    let d = decide(&spec("16.3"), &state, o);
    assert!(d.actions().iter().any(|a| matches!(
        a,
        PgAction::RunPromote {
            target: 1,
            old_primary: None,
            ..
        }
    )));
}

#[test]
fn a_completed_failover_records_why_in_its_message() {
    let state = PgState::SwitchingOver(Switchover {
        cluster: cluster(V1, 0),
        old_uid: Some(uid(0, V1)),
        target: PodRef {
            ordinal: 1,
            uid: uid(1, V1),
        },
        step: SwitchStep::Promote,
        attempt: 1,
        cause: SwitchCause::Failover,
    });
    let mut o = primary_down(0);
    edit(&mut o, 0, |p| p.role = Some(Role::Demoted));
    o.jobs = vec![job(
        &promote_key(1, &uid(1, V1), 1),
        Purpose::Promote,
        JobOutcome::Succeeded { at: t(10) },
    )];
    let d = decide(&spec("16.3"), &state, o);
    assert_eq!(d.reason(), FAILOVER_COMPLETED);
    assert_eq!(target(&d), Some(&ready(V1, 1)));
    assert_eq!(labels_in(&d), vec![(0, Role::Demoted), (1, Role::Primary)]);
    if let Decision::Go { message, .. } = &d {
        assert!(message.contains("failoverDelaySeconds"), "{message}");
    }
}

#[test]
fn an_upgrade_whose_primary_goes_down_fails_over_like_a_cluster_at_rest() {
    let state = PgState::Upgrading {
        cluster: cluster(V2, 0),
        pod: None,
    };
    let mut o = upgrade_observed(&[2], 0);
    edit(&mut o, 0, |p| p.ready = false);
    let d = decide(&spec("16.4"), &state, o);
    assert_eq!(d.reason(), PRIMARY_NOT_READY);
}

// --- scaling -----------------------------------------------------------------------

#[test]
fn scaling_below_the_primary_hands_the_role_to_a_lower_ordinal_first() {
    let mut s = spec("16.3");
    s.replicas = 2;
    let d = decide(&s, &ready(V1, 2), at_rest(V1, 2));
    assert_eq!(d.reason(), PRIMARY_OUTSIDE_SCALE);
    assert!(matches!(
        target(&d),
        Some(PgState::SwitchingOver(sw)) if sw.target.ordinal == 0 && sw.cause == SwitchCause::Scale
    ));
    s.replicas = 3;
    let d = decide(&s, &ready(V1, 0), at_rest(V1, 0));
    assert_eq!(d.reason(), SERVING);
}

#[test]
fn scaling_above_the_primary_goes_straight_to_scaling() {
    let mut s = spec("16.3");
    s.replicas = 5;
    let d = decide(&s, &ready(V1, 0), at_rest(V1, 0));
    assert_eq!(d.reason(), REPLICAS_CHANGED);
}

// --- backups -----------------------------------------------------------------------

#[test]
fn the_cronjob_is_created_updated_and_deleted_as_the_schedule_changes() {
    let scheduled = with_backups(spec("16.3"), Some("0 3 * * *"));
    let d = decide(&scheduled, &ready(V1, 0), at_rest(V1, 0));
    assert_eq!(d.actions(), &[PgAction::EnsureCronJob]);
    let mut o = at_rest(V1, 0);
    o.cronjob = Some(CronJobView {
        uid: "cj".to_owned(),
        in_sync: false,
    });
    let d = decide(&scheduled, &ready(V1, 0), o.clone());
    assert_eq!(d.actions(), &[PgAction::EnsureCronJob]);
    let unscheduled = with_backups(spec("16.3"), None);
    let d = decide(&unscheduled, &ready(V1, 0), o);
    assert_eq!(
        d.actions(),
        &[PgAction::DeleteCronJob {
            uid: "cj".to_owned()
        }]
    );
}

#[test]
fn an_on_demand_backup_runs_once_per_token() {
    let s = with_backups(spec("16.3"), None);
    let mut o = at_rest(V1, 0);
    o.requests.backup_now = Some("t1".to_owned());
    let d = decide(&s, &ready(V1, 0), o.clone());
    assert_eq!(d.reason(), BACKUP_REQUESTED);
    let backing_up = PgState::BackingUp {
        cluster: cluster(V1, 0),
        request: "t1".to_owned(),
    };
    let d = decide(&s, &backing_up, o.clone());
    assert_eq!(
        d.actions(),
        &[PgAction::RunBackup {
            key: backup_key("t1"),
            kind: BackupKind::OnDemand
        }]
    );
    o.jobs = vec![job(
        &backup_key("t1"),
        Purpose::Backup,
        JobOutcome::Succeeded { at: t(5) },
    )];
    let d = decide(&s, &backing_up, o.clone());
    assert_eq!(d.reason(), BACKUP_SUCCEEDED);
    // The token's Job exists: leaving the annotation in place asks for nothing more.
    let d = decide(&s, &ready(V1, 0), o);
    assert_eq!(d.reason(), SERVING);
}

#[test]
fn a_backup_without_a_destination_is_reported_not_attempted() {
    let mut o = at_rest(V1, 0);
    o.requests.backup_now = Some("t1".to_owned());
    let d = decide(&spec("16.3"), &ready(V1, 0), o);
    assert_eq!(d.reason(), BACKUP_NOT_CONFIGURED);
    assert!(is_degraded(&d));
}

// --- deletion ----------------------------------------------------------------------

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
        &[PgAction::RunBackup {
            key: "final-backup-1".to_owned(),
            kind: BackupKind::Final
        }]
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

// --- rendering ---------------------------------------------------------------------

fn object(spec: PostgresClusterSpec) -> PostgresCluster {
    let mut pg = PostgresCluster::new("pg", spec);
    pg.metadata.namespace = Some("db".to_owned());
    pg.metadata.uid = Some("owner-uid".to_owned());
    pg
}

fn env_of(c: &Container) -> BTreeMap<String, EnvVar> {
    c.env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name.clone(), e))
        .collect()
}

fn secret_key(e: Option<&EnvVar>) -> Option<(String, String)> {
    let r = e?.value_from.as_ref()?.secret_key_ref.as_ref()?;
    Some((r.name.clone(), r.key.clone()))
}

#[test]
fn the_statefulset_wires_the_entrypoint_per_the_scripts_contract() {
    let pg = object(spec("16.3"));
    let sts = render::statefulset(&pg, V1, 3).expect("renders");
    assert_eq!(
        sts.spec.update_strategy.and_then(|u| u.type_).as_deref(),
        Some("OnDelete")
    );
    let template = sts.spec.template;
    let labels = template.metadata.and_then(|m| m.labels).unwrap_or_default();
    assert!(
        !labels.contains_key(render::ROLE_LABEL),
        "roles come from the operator, never from the template"
    );
    let pod = template.spec.unwrap_or_default();
    assert_eq!(
        pod.security_context.and_then(|s| s.run_as_user),
        Some(render::POSTGRES_UID)
    );
    let c = &pod.containers[0];
    assert_eq!(
        c.command.clone().unwrap_or_default(),
        vec!["bash", "/lockstep/scripts/entrypoint.sh"]
    );
    let env = env_of(c);
    let plain = |k: &str| env.get(k).and_then(|e| e.value.clone());
    assert_eq!(plain("PGDATA").as_deref(), Some(render::PGDATA));
    assert_eq!(plain("PRIMARY_HOST").as_deref(), Some("pg-rw.db.svc"));
    assert_eq!(plain("POSTGRES_DB").as_deref(), Some("app"));
    assert_eq!(
        plain("LOCKSTEP_ROLE_FILE").as_deref(),
        Some("/etc/lockstep/podinfo/labels")
    );
    assert_eq!(
        secret_key(env.get("POSTGRES_PASSWORD")),
        Some(("pg-creds".to_owned(), "superuserPassword".to_owned()))
    );
    assert_eq!(
        secret_key(env.get("REPLICATION_PASSWORD")),
        Some(("pg-creds".to_owned(), "replicationPassword".to_owned()))
    );
    assert!(
        c.lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
            .is_some()
    );
    let volumes = pod.volumes.unwrap_or_default();
    assert!(volumes.iter().any(|v| v.downward_api.is_some()));
    assert!(volumes.iter().any(|v| {
        v.config_map
            .as_ref()
            .is_some_and(|c| c.name == "pg-scripts" && c.default_mode == Some(0o555))
    }));
}

#[test]
fn the_rw_and_ro_services_select_by_role() {
    let pg = object(spec("16.3"));
    let selector = |kind| {
        render::service(&pg, kind)
            .ok()
            .and_then(|s| s.spec)
            .and_then(|s| s.selector)
            .unwrap_or_default()
    };
    assert_eq!(
        selector(ServiceKind::ReadWrite)
            .get(render::ROLE_LABEL)
            .map(String::as_str),
        Some("primary")
    );
    assert_eq!(
        selector(ServiceKind::ReadOnly)
            .get(render::ROLE_LABEL)
            .map(String::as_str),
        Some("replica")
    );
    assert!(!selector(ServiceKind::Headless).contains_key(render::ROLE_LABEL));
    assert_eq!(render::service_name(&pg, ServiceKind::ReadWrite), "pg-rw");
}

#[test]
fn the_scripts_configmap_ships_every_script_verbatim() {
    let cm = render::scripts(&object(spec("16.3"))).expect("renders");
    let data = cm.data.unwrap_or_default();
    for (file, text) in render::SCRIPTS {
        assert_eq!(data.get(file).map(String::as_str), Some(text));
    }
}

#[test]
fn generated_passwords_are_random_and_only_in_the_secret() {
    let mut s = spec("16.3");
    s.credentials_secret = None;
    let pg = object(s);
    let a = render::credentials_secret(&pg)
        .string_data
        .unwrap_or_default();
    let b = render::credentials_secret(&pg)
        .string_data
        .unwrap_or_default();
    assert_eq!(a.len(), 2);
    assert!(a.values().all(|p| p.len() == 32));
    assert_ne!(a, b);
    let sts = render::statefulset(&pg, V1, 3).expect("renders");
    let text = serde_json::to_string(&sts).unwrap_or_default();
    assert!(a.values().all(|p| !text.contains(p.as_str())));
    assert!(text.contains("pg-credentials"));
}

#[test]
fn backup_jobs_run_backup_sh_against_the_primary_with_secrets_by_reference() {
    let pg = object(with_backups(spec("16.3"), Some("0 3 * * *")));
    let job = render::backup_job(&pg, "final-backup-1", BackupKind::Final)
        .ok()
        .flatten()
        .expect("renders");
    assert_eq!(job.name_any(), "pg-final-backup-1");
    let pod = job.spec.and_then(|s| s.template.spec).unwrap_or_default();
    let c = &pod.containers[0];
    assert_eq!(
        c.command.clone().unwrap_or_default(),
        vec!["bash", "/lockstep/scripts/backup.sh"]
    );
    let env = env_of(c);
    let plain = |k: &str| env.get(k).and_then(|e| e.value.clone());
    assert_eq!(plain("CLUSTER_NAME").as_deref(), Some("pg"));
    assert_eq!(plain("PRIMARY_HOST").as_deref(), Some("pg-rw.db.svc"));
    assert_eq!(plain("S3_BUCKET").as_deref(), Some("backups"));
    assert_eq!(plain("S3_PREFIX").as_deref(), Some("prod"));
    assert_eq!(plain("BACKUP_DATABASE").as_deref(), Some("app"));
    assert_eq!(
        secret_key(env.get("AWS_SECRET_ACCESS_KEY")),
        Some(("s3".to_owned(), "secretKey".to_owned()))
    );
    assert_eq!(
        secret_key(env.get("POSTGRES_PASSWORD")),
        Some(("pg-creds".to_owned(), "superuserPassword".to_owned()))
    );
    assert!(pod.volumes.unwrap_or_default().len() == 2);
    let cj = render::cronjob(&pg).ok().flatten().expect("renders");
    assert_eq!(cj.spec.schedule, "0 3 * * *");
    let unscheduled = object(with_backups(spec("16.3"), None));
    assert!(render::cronjob(&unscheduled).ok().flatten().is_none());
}

#[test]
fn the_promote_job_targets_the_pod_by_its_stable_name() {
    let pg = object(spec("16.3"));
    let job = render::promote_job(&pg, "promote-1-abc-1", 1, V1, Some(0)).expect("renders");
    let pod = job.spec.and_then(|s| s.template.spec).unwrap_or_default();
    let env = env_of(&pod.containers[0]);
    let plain = |k: &str| env.get(k).and_then(|e| e.value.clone());
    assert_eq!(plain("TARGET_HOST").as_deref(), Some("pg-1.pg.db.svc"));
    assert_eq!(plain("OLD_PRIMARY_HOST").as_deref(), Some("pg-0.pg.db.svc"));
    assert_eq!(pod.containers[0].image.as_deref(), Some(V1));
    // A failover does not wait for the old primary.
    let job = render::promote_job(&pg, "promote-1-abc-1", 1, V1, None).expect("renders");
    let pod = job.spec.and_then(|s| s.template.spec).unwrap_or_default();
    assert!(!env_of(&pod.containers[0]).contains_key("OLD_PRIMARY_HOST"));
}

// --- status ------------------------------------------------------------------------

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
    assert_eq!(super::last_backup_time(&o, Some(t(10))), Some(t(50)));
    assert_eq!(super::last_backup_time(&o, Some(t(90))), Some(t(90)));
}

#[test]
fn every_edge_is_taken_in_the_file_the_table_names() {
    let checked = crate::machines::common::table_sources::where_taken::<Postgres>(
        "src/machines/postgres/decide",
    );
    assert_eq!(checked, Ok(()));
}
