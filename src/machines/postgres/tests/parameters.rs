//! Settings: `spec.postgresql` on the pods, and what the instances report of it.

use super::rendering::object;
use super::*;

fn with_work_mem() -> PostgresClusterSpec {
    let mut s = spec("16.3");
    s.postgresql
        .parameters
        .insert("work_mem".to_owned(), "16MB".to_owned());
    s
}

#[test]
fn settings_ride_on_the_pod_template_and_a_cluster_without_them_renders_none() {
    let annotation = |pg: &PostgresCluster| {
        render::statefulset(pg, V1, 3)
            .expect("renders")
            .spec
            .template
            .metadata
            .and_then(|m| m.annotations)
            .and_then(|a| a.get(settings::SETTINGS_ANNOTATION).cloned())
    };
    assert_eq!(annotation(&object(spec("16.3"))), None);
    let carried = annotation(&object(with_work_mem())).expect("the settings annotation");
    assert_eq!(
        settings::parse(&carried)
            .expect("parses")
            .postgresql
            .parameters["work_mem"],
        "16MB"
    );
}

#[test]
fn a_live_pod_told_old_settings_is_patched_only_as_it_was_read() {
    let s = with_work_mem();
    let mut o = at_rest(V1, 0);
    o.own.unconfigured = [2].into();
    edit(&mut o, 2, |p| p.version = "42".to_owned());
    let d = decide(&s, &ready(V1, 0), o.clone());
    let configure = PgAction::Configure {
        ordinal: 2,
        uid: o.pods[&2].uid.clone(),
        version: "42".to_owned(),
    };
    assert_eq!(d.actions(), std::slice::from_ref(&configure));
    assert!(matches!(d, Decision::Stay { .. }), "settings move no state");

    let ops =
        <Postgres as crate::driver::Operator>::render(&object(s), &configure).expect("renders");
    match ops.as_slice() {
        [
            crate::driver::Op::Patch {
                name,
                patch,
                precondition,
                ..
            },
        ] => {
            assert_eq!(name, "pg-2");
            assert_eq!(
                (
                    precondition.uid.as_str(),
                    precondition.resource_version.as_str()
                ),
                (o.pods[&2].uid.as_str(), "42")
            );
            let value = patch["metadata"]["annotations"][settings::SETTINGS_ANNOTATION]
                .as_str()
                .expect("the settings");
            assert!(value.contains("work_mem"));
        }
        other => panic!("one fenced pod patch, got {other:?}"),
    }
}

#[test]
fn settings_removed_from_the_spec_are_removed_from_the_pods() {
    let ops = <Postgres as crate::driver::Operator>::render(
        &object(spec("16.3")),
        &PgAction::Configure {
            ordinal: 0,
            uid: "u".to_owned(),
            version: "1".to_owned(),
        },
    )
    .expect("renders");
    match ops.as_slice() {
        [crate::driver::Op::Patch { patch, .. }] => {
            assert!(patch["metadata"]["annotations"][settings::SETTINGS_ANNOTATION].is_null())
        }
        other => panic!("one pod patch, got {other:?}"),
    }
}

// --- what the instances report of their settings ------------------------------

fn reporting(refused: &[&str], pending: &[&str]) -> SettingsReport {
    SettingsReport {
        refused: refused.iter().map(|s| (*s).to_owned()).collect(),
        pending_restart: pending.iter().map(|s| (*s).to_owned()).collect(),
        judged: None,
    }
}

#[test]
fn a_setting_an_instance_refused_makes_the_cluster_degraded_naming_the_field_and_the_pods() {
    let mut o = at_rest(V1, 0);
    o.own.settings = BTreeMap::from([
        (0, reporting(&["spec.postgresql.parameters.work_mem"], &[])),
        (1, reporting(&["spec.postgresql.parameters.work_mem"], &[])),
        (2, reporting(&[], &[])),
    ]);
    let d = decide(&with_work_mem(), &ready(V1, 0), o);
    match &d {
        Decision::Stay {
            reason,
            message,
            health,
            ..
        } => {
            assert_eq!(*reason, SETTINGS_REFUSED);
            assert_eq!(*health, crate::engine::Health::Degraded);
            assert!(
                message.contains("spec.postgresql.parameters.work_mem (pg-0, pg-1)")
                    && message.contains("correct the value in spec.postgresql"),
                "{message}"
            );
        }
        other => panic!("a degraded stay, got {other:?}"),
    }
}

#[test]
fn a_parameter_pending_a_restart_restarts_the_instances_as_an_upgrade_replicas_first() {
    let s = with_work_mem();
    let mut o = at_rest(V1, 0);
    o.own.settings = (0..3)
        .map(|k| (k, reporting(&[], &["shared_buffers"])))
        .collect();
    let d = decide(&s, &ready(V1, 0), o.clone());
    let restarting = PgState::Upgrading {
        cluster: cluster(V1, 0),
        pod: None,
    };
    assert_goes(&d, SETTINGS_NEED_RESTART, &restarting);

    // The highest replica first, deleted only as it was seen.
    let d = decide(&s, &restarting, o.clone());
    let pod_2 = PodRef {
        ordinal: 2,
        uid: o.pods[&2].uid.clone(),
    };
    let chosen = PgState::Upgrading {
        cluster: cluster(V1, 0),
        pod: Some(pod_2.clone()),
    };
    assert_goes(&d, POD_CHOSEN, &chosen);
    match &d {
        Decision::Go { message, .. } => assert_eq!(
            message,
            "replacing pg-2 to apply shared_buffers at its start"
        ),
        other => panic!("{other:?}"),
    }
    let d = decide(&s, &chosen, o.clone());
    assert_eq!(
        deletes_in(&d),
        vec![(2, pod_2.uid.clone(), DeleteCause::Upgrade)]
    );

    // Replicas restarted (their new pods report nothing pending): the primary's turn
    // comes by a switchover, as in an upgrade.
    o.own.settings = BTreeMap::from([(0, reporting(&[], &["shared_buffers"]))]);
    let d = decide(&s, &restarting, o.clone());
    assert_eq!(d.reason(), SWITCHOVER_STARTED);

    // The old primary restarted in place as it rejoined: nothing waits, done.
    o.own.settings.clear();
    let d = decide(&s, &restarting, o);
    assert_eq!(d.reason(), UPGRADE_COMPLETED);
}

#[test]
fn no_instance_restarts_before_every_instance_judged_the_specs_settings() {
    // The primary says first that shared_buffers waits for a start; the replicas'
    // managers have yet to read the new annotation (they judged the last one).
    let s = with_work_mem();
    let mut o = at_rest(V1, 0);
    o.own.settings = BTreeMap::from([(0, reporting(&[], &["shared_buffers"]))]);
    o.own.unjudged = [1, 2].into();
    let d = decide(&s, &ready(V1, 0), o.clone());
    assert_ne!(d.reason(), SETTINGS_NEED_RESTART);
    assert!(deletes_in(&d).is_empty());

    // Mid-upgrade, the role does not move to a replica that may say next that it waits.
    let restarting = PgState::Upgrading {
        cluster: cluster(V1, 0),
        pod: None,
    };
    let d = decide(&s, &restarting, o.clone());
    assert_eq!(d.reason(), WAITING_FOR_PODS);
    match &d {
        Decision::Stay { message, .. } => assert!(
            message.contains("waiting for pg-1, pg-2 to read the spec's settings"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }

    // Once every instance judged them, the ones that wait restart, replicas first.
    o.own.unjudged.clear();
    o.own.settings = (0..3)
        .map(|k| (k, reporting(&[], &["shared_buffers"])))
        .collect();
    let d = decide(&s, &ready(V1, 0), o.clone());
    assert_goes(&d, SETTINGS_NEED_RESTART, &restarting);
    assert_eq!(decide(&s, &restarting, o).reason(), POD_CHOSEN);
}

#[test]
fn a_pod_chosen_for_a_restart_that_restarted_in_place_is_not_deleted() {
    let s = with_work_mem();
    let o = at_rest(V1, 0);
    let chosen = PgState::Upgrading {
        cluster: cluster(V1, 0),
        pod: Some(PodRef {
            ordinal: 2,
            uid: o.pods[&2].uid.clone(),
        }),
    };
    let d = decide(&s, &chosen, o);
    assert_eq!(d.reason(), REPLANNED);
    assert!(deletes_in(&d).is_empty());
}

#[test]
fn the_settings_applied_condition_names_what_waits_for_a_restart_and_where() {
    let pg = object(with_work_mem());
    let condition = |o: &Observed| {
        crate::machines::postgres::status::settings_applied(&pg, o, t(5), Some(1))
            .map(|c| (c.status, c.reason, c.message))
    };
    let mut o = at_rest(V1, 0);
    assert_eq!(condition(&o), None, "no instance reports yet");
    o.own.settings = BTreeMap::from([
        (0, reporting(&[], &["shared_buffers"])),
        (1, reporting(&[], &["shared_buffers"])),
        (2, reporting(&[], &[])),
    ]);
    assert_eq!(
        condition(&o),
        Some((
            "False".to_owned(),
            "PendingRestart".to_owned(),
            "pending restart: shared_buffers (pg-0, pg-1) (each applies at the instance's next start)"
                .to_owned()
        ))
    );
    o.own
        .settings
        .insert(1, reporting(&["spec.postgresql.pgHba[0]"], &[]));
    let (_, why, message) = condition(&o).expect("a condition");
    assert_eq!(why, "Refused");
    assert!(
        message.starts_with(
            "refused: spec.postgresql.pgHba[0] (pg-1); pending restart: shared_buffers (pg-0)"
        ),
        "{message}"
    );
    o.own.settings = BTreeMap::from([(0, reporting(&[], &[]))]);
    assert_eq!(
        condition(&o).map(|(status, why, _)| (status, why)),
        Some(("True".to_owned(), "Applied".to_owned()))
    );
    // An instance whose report is about earlier settings is named until it reads them.
    o.own.unjudged = [1].into();
    assert_eq!(
        condition(&o),
        Some((
            "False".to_owned(),
            "Applying".to_owned(),
            "pg-1 yet to read the spec's settings".to_owned()
        ))
    );
}

#[test]
fn an_instance_pods_settings_condition_is_read_back_and_a_foreign_one_ignored() {
    let pod_with = |conditions: serde_json::Value| -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pg-0"},
            "status": {"conditions": conditions},
        }))
        .expect("a pod")
    };
    use crate::instance::run::report;
    let settings = reporting(
        &["spec.postgresql.parameters.work_mem"],
        &["shared_buffers"],
    );
    let written = report::patch(
        &report::report(&report::Round {
            settings: Some(&settings),
            ..report::Round::default()
        }),
        &["lockstep.dev/SettingsApplied"],
        t(5),
    );
    let pod = pod_with(written["status"]["conditions"].clone());
    assert_eq!(
        crate::machines::postgres::observe::settings_report(&pod),
        Some(reporting(
            &["spec.postgresql.parameters.work_mem"],
            &["shared_buffers"]
        ))
    );
    let foreign = pod_with(serde_json::json!([
        {"type": "lockstep.dev/SettingsApplied", "status": "False", "message": "something else"},
    ]));
    assert_eq!(
        crate::machines::postgres::observe::settings_report(&foreign),
        None
    );
}

#[test]
fn a_pod_whose_standby_says_it_does_not_stream_is_observed_lagging() {
    let pod = |k: i32, streams: &str| -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("pg-{k}"), "namespace": "db", "uid": format!("u{k}"),
                "labels": {"app.kubernetes.io/name": "postgrescluster",
                    "app.kubernetes.io/instance": "pg",
                    "app.kubernetes.io/managed-by": "lockstep",
                    "lockstep.dev/component": "database"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                    "name": "pg", "uid": "s1", "controller": true}]},
            "status": {"conditions": [
                {"type": "lockstep.dev/Streaming", "status": streams, "reason": "R"},
            ]},
        }))
        .expect("a pod")
    };
    let cache = crate::machines::common::testing::cache::<crate::machines::postgres::Postgres>(
        Vec::new(),
        vec![pod(1, "True"), pod(2, "False")],
    );
    let o = crate::machines::postgres::observe::observe(&object(spec("16.3")), &cache);
    assert_eq!(o.pods.len(), 2, "both pods are the cluster's");
    assert_eq!(o.own.lagging, [2].into());
}

#[test]
fn postgres_declares_the_annotations_it_writes_on_its_pods_and_the_variables_it_reads_back() {
    use crate::driver::Operator;
    let keep = crate::machines::postgres::Postgres::KEEP;
    assert!(
        keep.digested_annotations
            .contains(&crate::pod::settings::SETTINGS_ANNOTATION)
    );
    assert!(
        keep.digested_annotations
            .contains(&crate::pod::restore::RESTORE_ANNOTATION)
    );
    assert!(keep.keeps_env(render::LEASE_SECONDS_ENV));
}
