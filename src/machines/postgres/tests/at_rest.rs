//! Creation, rest, scaling and backups.

use super::*;

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
        served_restore: None,
    };
    let d = decide(&s, &next, Observed::default());
    assert!(!d.actions().contains(&PgAction::CreateCredentials));
}

#[test]
fn a_given_credentials_secret_is_used_as_it_is() {
    // The certificates are issued first, even with credentials given.
    let d = decide(&spec("16.3"), &Postgres::initial(), Observed::default());
    assert_eq!(d.reason(), CREDENTIALS_GENERATED);
    let message = crate::machines::common::testing::message(&d);
    assert!(message.contains("certificates") && !message.contains("passwords"));

    let d = decide(&spec("16.3"), &issued(), Observed::default());
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
    let d = decide(&spec("16.3"), &issued(), o);
    assert_eq!(
        labels_in(&d),
        vec![(1, Role::Replica), (2, Role::Replica), (0, Role::Primary)]
    );
    assert!(target(&d).is_none());
}

#[test]
fn creation_completes_once_every_instance_is_ready_with_its_role() {
    let d = decide(&spec("16.3"), &issued(), at_rest(V1, 0));
    assert_goes(&d, CLUSTER_CREATED, &ready(V1, 0));
}

#[test]
fn a_first_primary_whose_bootstrap_from_backups_failed_keeps_the_cluster_creating_and_degraded() {
    let failing = |ready: bool| {
        let mut o = at_rest(V1, 0);
        o.own.recovery_failed.insert(
            0,
            "pgbackrest restore: ERROR: [075]: unable to find backup set".to_owned(),
        );
        edit(&mut o, 0, |p| p.ready = ready);
        o
    };
    match decide(&spec("16.3"), &issued(), failing(false)) {
        Decision::Stay {
            reason,
            message,
            health,
            ..
        } => {
            assert_eq!(reason, RECOVERY_FAILED);
            assert_eq!(health, crate::engine::Health::Degraded);
            assert!(
                message.contains("pg-0 could not bootstrap from backups")
                    && message.contains("unable to find backup set"),
                "{message}"
            );
        }
        other => panic!("a degraded stay, got {other:?}"),
    }
    // A Ready primary's last exit is history: a retry succeeded.
    let d = decide(&spec("16.3"), &issued(), failing(true));
    assert_goes(&d, CLUSTER_CREATED, &ready(V1, 0));
}

#[test]
fn an_explicit_image_overrides_the_version() {
    let mut s = spec("16");
    s.image = Some("registry.example/postgres:16-custom".to_owned());
    let d = decide(&s, &issued(), Observed::default());
    assert!(d.actions().contains(&PgAction::EnsureStatefulSet {
        image: "registry.example/postgres:16-custom".to_owned(),
        replicas: 3
    }));
}

#[test]
fn without_an_image_the_server_runs_the_configured_repository_at_the_spec_version() {
    use crate::machines::postgres::actions::{DEFAULT_POSTGRES_IMAGE_REPOSITORY, image_in};
    let s = spec("16.3");
    assert_eq!(
        image_in(&s, "registry.example/pg"),
        "registry.example/pg:16.3"
    );
    // Unless the operator is told otherwise: the project's own images.
    let d = decide(&s, &issued(), Observed::default());
    assert!(d.actions().contains(&PgAction::EnsureStatefulSet {
        image: format!("{DEFAULT_POSTGRES_IMAGE_REPOSITORY}:16.3"),
        replicas: 3
    }));
    // An explicit image wins over any repository.
    let mut custom = spec("16");
    custom.image = Some("registry.example/postgres:16-custom".to_owned());
    assert_eq!(
        image_in(&custom, "registry.example/pg"),
        "registry.example/postgres:16-custom"
    );
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

#[test]
fn scaling_below_the_primary_hands_the_role_to_a_lower_ordinal_first() {
    let d = decide(&scaled_to(2), &ready(V1, 2), at_rest(V1, 2));
    assert_eq!(d.reason(), PRIMARY_OUTSIDE_SCALE);
    assert!(matches!(
        target(&d),
        Some(PgState::SwitchingOver(sw)) if sw.target.ordinal == 0 && sw.cause == SwitchCause::Scale
    ));
    let d = decide(&scaled_to(3), &ready(V1, 0), at_rest(V1, 0));
    assert_eq!(d.reason(), SERVING);
}

/// As a requested switchover refuses one: a standby behind the primary would keep
/// writes unavailable until it caught up.
#[test]
fn scaling_below_the_primary_passes_over_a_standby_that_does_not_stream_and_waits_when_all_lag() {
    let mut o = at_rest(V1, 2);
    o.own.lagging = [0].into();
    let d = decide(&scaled_to(2), &ready(V1, 2), o.clone());
    assert!(matches!(
        target(&d),
        Some(PgState::SwitchingOver(sw)) if sw.target.ordinal == 1
    ));
    o.own.lagging = [0, 1].into();
    let d = decide(&scaled_to(2), &ready(V1, 2), o);
    assert_eq!(d.reason(), WAITING_FOR_PODS);
    assert!(target(&d).is_none(), "nobody is promoted: {d:?}");
    assert_says(
        &d,
        &["pg-0, pg-1", "do not stream", "delete its volume claim"],
    );
}

#[test]
fn scaling_above_the_primary_goes_straight_to_scaling() {
    let d = decide(&scaled_to(5), &ready(V1, 0), at_rest(V1, 0));
    assert_eq!(d.reason(), REPLICAS_CHANGED);
}

// --- backups -----------------------------------------------------------------------

#[test]
fn the_cronjob_is_created_updated_and_deleted_as_the_schedule_changes() {
    let scheduled = with_backups(spec("16.3"), Some("0 3 * * *"));
    let d = decide(&scheduled, &ready(V1, 0), at_rest(V1, 0));
    assert_eq!(d.actions(), &[PgAction::Jobs(JobAction::EnsureCronJob)]);
    let mut o = at_rest(V1, 0);
    o.cronjob = Some(CronJobView {
        uid: "cj".to_owned(),
        in_sync: false,
    });
    let d = decide(&scheduled, &ready(V1, 0), o.clone());
    assert_eq!(d.actions(), &[PgAction::Jobs(JobAction::EnsureCronJob)]);
    let unscheduled = with_backups(spec("16.3"), None);
    let d = decide(&unscheduled, &ready(V1, 0), o);
    assert_eq!(
        d.actions(),
        &[PgAction::Jobs(JobAction::DeleteCronJob {
            uid: "cj".to_owned()
        })]
    );
}

#[test]
fn an_on_demand_backup_runs_once_per_token() {
    let mut asked = at_rest(V1, 0);
    asked.requests.backup_now = Some("t1".to_owned());
    let mut succeeded = asked.clone();
    succeeded.jobs = vec![job(
        &backup_key("t1", None),
        Purpose::Backup,
        JobOutcome::Succeeded { at: t(5) },
    )];
    // The token is served: leaving the annotation in place asks for nothing more, whether
    // its Job is still there or was pruned.
    let pruned = asked.clone();
    let s = with_backups(spec("16.3"), None);
    let seen = testing::BackupSteps {
        before: asked,
        finished: succeeded,
        after: pruned,
    };
    let backing_up =
        testing::assert_a_token_runs_one_backup::<Postgres>(&s, &ready(V1, 0), SERVING, seen);
    let expected = PgState::BackingUp {
        cluster: cluster(V1, 0),
        request: "t1".to_owned(),
        job: Some(backup_key("t1", None)),
    };
    assert_eq!(backing_up, expected);
}

#[test]
fn a_backup_without_a_destination_is_reported_not_attempted() {
    let mut o = at_rest(V1, 0);
    o.requests.backup_now = Some("t1".to_owned());
    let d = decide(&spec("16.3"), &ready(V1, 0), o);
    assert_degraded(&d, BACKUP_NOT_CONFIGURED);
}

#[test]
fn synchronous_replication_is_a_condition_from_the_primarys_report_false_once_preferred_turned_asynchronous()
 {
    use crate::driver::Operator;
    use crate::pod::synchronous::{
        DataDurability, SyncMethod, SynchronousSpec, Waiting, condition,
    };
    let mut s = spec("16.3");
    s.synchronous = Some(SynchronousSpec {
        number: 1,
        method: SyncMethod::Any,
        data_durability: DataDurability::Preferred,
    });
    let pg = super::rendering::object(s);
    let status_of = |pg: &PostgresCluster, o: &Observed| {
        Postgres::status(
            pg,
            crate::engine::EngineStatus::default(),
            Some(&ready(V1, 0)),
            o,
            chrono::Utc::now(),
        )
    };
    let mut o = at_rest(V1, 0);
    let said = |asynchronous: bool| {
        let waiting = if asynchronous {
            Waiting::Relaxed(1)
        } else {
            Waiting::Standbys(1)
        };
        let (status, _, message) = condition(&waiting);
        (status == "True", message)
    };
    // A replica's report (from when it was a primary) is not the cluster's.
    o.own.synchronous = BTreeMap::from([(0, said(true)), (1, said(false))]);
    let status = status_of(&pg, &o);
    let sync = |status: &serde_json::Value| {
        status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "SynchronousReplication")
            .map(|c| {
                (
                    c["status"].clone(),
                    c["reason"].clone(),
                    c["message"].clone(),
                )
            })
    };
    let (held, reason, message) = sync(&status).expect("the condition");
    assert_eq!((held, reason), ("False".into(), "Asynchronous".into()));
    assert!(
        message.as_str().is_some_and(|m| m.starts_with("pg-0: ")),
        "{message}"
    );
    o.own.synchronous.insert(0, said(false));
    let status = status_of(&pg, &o);
    assert_eq!(
        sync(&status).map(|(held, reason, _)| (held, reason)),
        Some(("True".into(), "Synchronous".into()))
    );
    // Without spec.synchronous there is no such condition.
    let plain = super::rendering::object(spec("16.3"));
    let status = status_of(&plain, &o);
    assert_eq!(sync(&status), None);
}

#[test]
fn the_status_lists_every_instance_with_its_role_readiness_and_what_its_server_reports() {
    use crate::driver::Operator;
    use crate::machines::postgres::instances::{Reported, ServerRole};
    let s = spec("16.3");
    let pg = super::rendering::object(s.clone());
    let mut o = at_rest(V1, 0);
    o.pods.get_mut(&2).expect("pod 2").ready = false;
    o.own.instances = BTreeMap::from([
        (
            0,
            Reported {
                server: Some(ServerRole {
                    primary: true,
                    timeline: 2,
                    term: None,
                }),
                streaming: None,
            },
        ),
        (
            1,
            Reported {
                server: Some(ServerRole {
                    primary: false,
                    timeline: 2,
                    term: None,
                }),
                streaming: Some(true),
            },
        ),
    ]);
    let shown = Postgres::status(
        &pg,
        testing::status_in(&ready(V1, 0)),
        Some(&ready(V1, 0)),
        &o,
        t(10),
    );
    assert_eq!(
        shown["instances"],
        serde_json::json!([
            {"pod": "pg-0", "role": "primary", "ready": true, "server": "primary", "timeline": 2},
            {"pod": "pg-1", "role": "replica", "ready": true, "server": "standby", "timeline": 2, "streaming": true},
            {"pod": "pg-2", "role": "replica", "ready": false},
        ])
    );
}
