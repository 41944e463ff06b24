//! Unit tests of `decide` and of rendering, read as sentences.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use kube::CustomResourceExt;

use super::actions::{DdbAction, HookPhase, Shape, backup_key, hook_key};
use super::api::{
    BackupPolicy, DbPort, DistributedDB, DistributedDBSpec, Hook, Storage, UpgradePolicy,
};
use super::machine::DistributedDb;
use super::observe::{CronJobView, Observed, PodView, Requests, StatefulSetView};
use super::state::{DdbState, Upgrade, UpgradeStep};
use super::table::TABLE;
use super::table::reason::*;
use crate::engine::machine::is_declared;
use crate::engine::{Decision, Health, Machine, World};
use crate::machines::common::backup::BackupKind;
use crate::machines::common::jobs::{JobOutcome, JobView, Purpose};

fn t(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap_or_default()
}

fn spec(image: &str) -> DistributedDBSpec {
    DistributedDBSpec {
        replicas: 3,
        image: image.to_owned(),
        storage: Storage {
            storage_class_name: None,
            size: "1Gi".to_owned(),
        },
        backup_policy: None,
        upgrade: None,
        resources: None,
        ports: vec![DbPort {
            name: "db".to_owned(),
            port: 8080,
        }],
        env: Vec::new(),
        pod_labels: BTreeMap::new(),
        pod_annotations: BTreeMap::new(),
    }
}

fn hook(retry_limit: i32) -> Hook {
    Hook {
        image: None,
        command: vec!["true".to_owned()],
        args: Vec::new(),
        env: Vec::new(),
        timeout_seconds: 60,
        retry_limit,
        pod_labels: BTreeMap::new(),
        pod_annotations: BTreeMap::new(),
    }
}

fn with_hooks(mut s: DistributedDBSpec, retry_limit: i32) -> DistributedDBSpec {
    s.upgrade = Some(UpgradePolicy {
        pre_hook: Some(hook(retry_limit)),
        post_hook: Some(hook(retry_limit)),
    });
    s
}

fn policy() -> BackupPolicy {
    BackupPolicy {
        schedule: "0 3 * * *".to_owned(),
        suspend: false,
        s3_endpoint: "https://s3.example".to_owned(),
        s3_credentials_secret: "s3".to_owned(),
        bucket: "b".to_owned(),
        prefix: None,
        retention: None,
        image: "backup:1".to_owned(),
        command: Vec::new(),
        args: Vec::new(),
        timeout_seconds: 600,
        pod_labels: BTreeMap::new(),
        pod_annotations: BTreeMap::new(),
    }
}

fn with_backups(mut s: DistributedDBSpec) -> DistributedDBSpec {
    s.backup_policy = Some(policy());
    s
}

fn uid(k: i32, image: &str) -> String {
    format!("uid-{k}-{image}")
}

fn pod(k: i32, image: &str, ready: bool) -> PodView {
    PodView {
        uid: uid(k, image),
        image: Some(image.to_owned()),
        ready,
        terminating: false,
    }
}

/// Three pods Ready at `image`, every owned object in place.
fn at_rest(image: &str) -> Observed {
    Observed {
        name: "db".to_owned(),
        service_in_sync: true,
        statefulset: Some(StatefulSetView {
            conforms: true,
            image: Some(image.to_owned()),
            replicas: 3,
            caught_up: true,
            claim_size: Some("1Gi".to_owned()),
        }),
        pods: (0..3).map(|k| (k, pod(k, image, true))).collect(),
        jobs: Vec::new(),
        cronjob: None,
        volumes: BTreeMap::new(),
        requests: Requests::default(),
    }
}

fn world(observed: Observed) -> World<Observed> {
    World {
        observed,
        deleting: false,
        now: t(1000),
        entered_at: t(0),
    }
}

fn decide(
    spec: &DistributedDBSpec,
    state: &DdbState,
    o: Observed,
) -> Decision<DdbState, DdbAction> {
    let d = DistributedDb::decide(spec, state, &world(o));
    assert_declared(state, &d);
    d
}

fn assert_declared(from: &DdbState, d: &Decision<DdbState, DdbAction>) {
    if let Decision::Go { to, reason, .. } = d {
        assert!(
            is_declared::<DistributedDb>(from, to, reason),
            "undeclared: {from:?} -> {to:?} ({reason})"
        );
    }
}

fn ready(version: &str) -> DdbState {
    DdbState::Ready {
        version: version.to_owned(),
        replicas: 3,
    }
}

fn upgrading(to: &str, ordinal: i32, step: UpgradeStep, pod_uid: &str) -> DdbState {
    DdbState::Upgrading(Upgrade {
        from: "db:1".to_owned(),
        to: to.to_owned(),
        replicas: 3,
        ordinal,
        step,
        pod_uid: pod_uid.to_owned(),
        attempt: 1,
        round_start: 1,
        retry_ack: None,
        skip_ack: None,
    })
}

fn job(key: &str, purpose: Purpose, outcome: JobOutcome) -> JobView {
    JobView {
        name: format!("db-{key}"),
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
        message: "Job has reached the specified backoff limit".to_owned(),
    }
}

fn succeeded() -> JobOutcome {
    JobOutcome::Succeeded { at: t(0) }
}

fn target(d: &Decision<DdbState, DdbAction>) -> Option<&DdbState> {
    match d {
        Decision::Go { to, .. } => Some(to),
        Decision::Stay { .. } => None,
    }
}

fn deletes(d: &Decision<DdbState, DdbAction>) -> Vec<(i32, String)> {
    d.actions()
        .iter()
        .filter_map(|a| match a {
            DdbAction::DeletePod { ordinal, uid } => Some((*ordinal, uid.clone())),
            _ => None,
        })
        .collect()
}

fn is_degraded(d: &Decision<DdbState, DdbAction>) -> bool {
    matches!(
        d,
        Decision::Stay {
            health: Health::Degraded,
            ..
        }
    )
}

fn message(d: &Decision<DdbState, DdbAction>) -> &str {
    match d {
        Decision::Go { message, .. } | Decision::Stay { message, .. } => message,
    }
}

// --- Creating ---------------------------------------------------------------------

#[test]
fn creating_creates_the_service_and_the_statefulset_first() {
    let o = Observed {
        name: "db".to_owned(),
        ..Observed::default()
    };
    let d = decide(&spec("db:1"), &DdbState::Creating, o);
    assert_eq!(
        d.actions(),
        &[
            DdbAction::EnsureService,
            DdbAction::EnsureStatefulSet(Shape {
                image: "db:1".to_owned(),
                replicas: 3,
                claim_size: "1Gi".to_owned()
            })
        ]
    );
    assert!(target(&d).is_none());
}

#[test]
fn creating_becomes_ready_when_every_pod_is_ready_at_the_image() {
    let d = decide(&spec("db:1"), &DdbState::Creating, at_rest("db:1"));
    assert_eq!(target(&d), Some(&ready("db:1")));
    assert_eq!(d.reason(), ALL_REPLICAS_READY);
}

#[test]
fn creating_waits_while_a_pod_is_not_ready() {
    let mut o = at_rest("db:1");
    o.pods.insert(1, pod(1, "db:1", false));
    let d = decide(&spec("db:1"), &DdbState::Creating, o);
    assert!(target(&d).is_none());
    assert_eq!(message(&d), "2/3 pods Ready at db:1");
}

#[test]
fn creating_replaces_pods_that_never_came_up_at_an_earlier_image() {
    let mut o = at_rest("db:2");
    o.pods.insert(2, pod(2, "db:1", false));
    let d = decide(&spec("db:2"), &DdbState::Creating, o);
    assert_eq!(deletes(&d), vec![(2, uid(2, "db:1"))]);
}

#[test]
fn creating_upgrades_ready_pods_left_at_an_earlier_image() {
    let mut o = at_rest("db:2");
    o.pods.insert(0, pod(0, "db:1", true));
    let d = decide(&spec("db:2"), &DdbState::Creating, o);
    assert_eq!(d.reason(), MIXED_IMAGES);
    assert!(
        matches!(target(&d), Some(DdbState::Upgrading(u)) if u.ordinal == 0 && u.from == "db:1" && u.to == "db:2")
    );
}

// --- Ready, drift, scaling ----------------------------------------------------------

#[test]
fn an_idle_ready_cluster_does_nothing() {
    let d = decide(&spec("db:1"), &ready("db:1"), at_rest("db:1"));
    assert!(d.actions().is_empty());
    assert!(target(&d).is_none());
    assert_eq!(d.reason(), SERVING);
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
    o.service_in_sync = false;
    let d = decide(&spec("db:1"), &ready("db:1"), o);
    assert_eq!(d.actions().len(), 2);
}

#[test]
fn the_cronjob_follows_the_backup_policy() {
    let d = decide(&with_backups(spec("db:1")), &ready("db:1"), at_rest("db:1"));
    assert_eq!(d.actions(), &[DdbAction::EnsureCronJob]);
    let mut o = at_rest("db:1");
    o.cronjob = Some(CronJobView {
        uid: "cj".to_owned(),
        in_sync: true,
    });
    let d = decide(&spec("db:1"), &ready("db:1"), o);
    assert_eq!(
        d.actions(),
        &[DdbAction::DeleteCronJob {
            uid: "cj".to_owned()
        }]
    );
}

#[test]
fn a_replicas_change_is_tracked_in_scaling_until_every_new_pod_is_ready() {
    let mut s = spec("db:1");
    s.replicas = 5;
    let d = decide(&s, &ready("db:1"), at_rest("db:1"));
    let scaling = DdbState::Scaling {
        version: "db:1".to_owned(),
        from_replicas: 3,
        replicas: 5,
    };
    assert_eq!(target(&d), Some(&scaling));
    let d = decide(&s, &scaling, at_rest("db:1"));
    assert!(matches!(d.actions(), [DdbAction::EnsureStatefulSet(sh)] if sh.replicas == 5));
    let mut o = at_rest("db:1");
    for k in 3..5 {
        o.pods.insert(k, pod(k, "db:1", true));
    }
    if let Some(sts) = &mut o.statefulset {
        sts.replicas = 5;
    }
    let d = decide(&s, &scaling, o);
    assert_eq!(d.reason(), SCALING_COMPLETE);
}

#[test]
fn volumes_grow_when_the_storage_size_grows() {
    let mut s = spec("db:1");
    s.storage.size = "2Gi".to_owned();
    let mut o = at_rest("db:1");
    o.volumes.insert(
        0,
        super::observe::VolumeView {
            requested: Some("1Gi".to_owned()),
        },
    );
    o.volumes.insert(
        1,
        super::observe::VolumeView {
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

// --- Upgrading ----------------------------------------------------------------------

#[test]
fn an_image_change_starts_with_the_highest_ordinal_and_records_its_uid() {
    let d = decide(&spec("db:2"), &ready("db:1"), at_rest("db:1"));
    assert_eq!(d.reason(), IMAGE_CHANGED);
    assert_eq!(
        target(&d),
        Some(&upgrading("db:2", 2, UpgradeStep::PreHook, &uid(2, "db:1")))
    );
}

#[test]
fn an_upgrade_waits_while_another_pod_is_not_ready() {
    let mut o = at_rest("db:1");
    o.pods.insert(0, pod(0, "db:2", false));
    o.pods.insert(1, pod(1, "db:1", false));
    let d = decide(&spec("db:2"), &ready("db:1"), o);
    assert_eq!(d.reason(), UPGRADE_PENDING);
}

#[test]
fn a_pod_that_is_already_down_is_replaced_first() {
    let mut o = at_rest("db:1");
    o.pods.insert(0, pod(0, "db:1", false));
    let d = decide(&spec("db:2"), &ready("db:1"), o);
    assert!(matches!(target(&d), Some(DdbState::Upgrading(u)) if u.ordinal == 0));
}

#[test]
fn the_pre_hook_runs_before_the_pod_is_deleted() {
    let s = with_hooks(spec("db:2"), 1);
    let mut o = at_rest("db:1");
    if let Some(sts) = &mut o.statefulset {
        sts.image = Some("db:2".to_owned());
    }
    let state = upgrading("db:2", 2, UpgradeStep::PreHook, &uid(2, "db:1"));
    let d = decide(&s, &state, o.clone());
    let key = hook_key(HookPhase::Pre, 2, "db:2", &uid(2, "db:1"), 1);
    assert!(
        matches!(d.actions(), [DdbAction::RunHook { phase: HookPhase::Pre, ordinal: 2, key: k, .. }] if *k == key)
    );
    assert!(deletes(&d).is_empty());
    o.jobs.push(job(&key, Purpose::Hook, succeeded()));
    let d = decide(&s, &state, o);
    assert_eq!(d.reason(), PRE_HOOK_SUCCEEDED);
    assert_eq!(
        target(&d),
        Some(&upgrading("db:2", 2, UpgradeStep::Restart, &uid(2, "db:1")))
    );
    assert!(
        d.actions().is_empty(),
        "the delete comes after the uid is persisted"
    );
}

#[test]
fn the_statefulset_template_moves_to_the_target_before_any_pod_goes_down() {
    let state = upgrading("db:2", 2, UpgradeStep::Restart, &uid(2, "db:1"));
    let d = decide(&spec("db:2"), &state, at_rest("db:1"));
    assert!(matches!(d.actions(), [DdbAction::EnsureStatefulSet(s)] if s.image == "db:2"));
    assert!(deletes(&d).is_empty());
}

fn template_at(mut o: Observed, image: &str) -> Observed {
    if let Some(sts) = &mut o.statefulset {
        sts.image = Some(image.to_owned());
    }
    o
}

#[test]
fn the_pod_is_deleted_with_its_recorded_uid_only_while_the_others_are_ready() {
    let state = upgrading("db:2", 2, UpgradeStep::Restart, &uid(2, "db:1"));
    let d = decide(&spec("db:2"), &state, template_at(at_rest("db:1"), "db:2"));
    assert_eq!(deletes(&d), vec![(2, uid(2, "db:1"))]);
    // Pod 0 is down but already at the target: pod 2 waits for it.
    let mut o = template_at(at_rest("db:1"), "db:2");
    o.pods.insert(0, pod(0, "db:2", false));
    let d = decide(&spec("db:2"), &state, o);
    assert!(deletes(&d).is_empty());
    assert_eq!(d.reason(), WAITING_FOR_PODS);
}

#[test]
fn a_pod_that_goes_down_while_another_waits_is_replaced_first() {
    let state = upgrading("db:2", 2, UpgradeStep::Restart, &uid(2, "db:1"));
    let mut o = template_at(at_rest("db:1"), "db:2");
    o.pods.insert(0, pod(0, "db:1", false));
    let d = decide(&spec("db:2"), &state, o);
    assert!(deletes(&d).is_empty());
    assert_eq!(d.reason(), REPLANNED);
    assert_eq!(
        target(&d),
        Some(&upgrading("db:2", 0, UpgradeStep::PreHook, &uid(0, "db:1")))
    );
}

#[test]
fn a_down_pod_that_recovers_gives_the_highest_ordinal_its_turn_back() {
    let state = upgrading("db:2", 0, UpgradeStep::PreHook, &uid(0, "db:1"));
    let d = decide(&spec("db:2"), &state, template_at(at_rest("db:1"), "db:2"));
    assert_eq!(d.reason(), REPLANNED);
    assert_eq!(
        target(&d),
        Some(&upgrading("db:2", 2, UpgradeStep::PreHook, &uid(2, "db:1")))
    );
}

#[test]
fn upgrade_never_deletes_a_pod_twice_after_restart() {
    // The operator restarts after deleting pod 2: whatever it sees of ordinal 2 now —
    // terminating, gone, or recreated — it never deletes anything but the recorded uid.
    let state = upgrading("db:2", 2, UpgradeStep::Restart, &uid(2, "db:1"));
    let mut terminating = template_at(at_rest("db:1"), "db:2");
    if let Some(p) = terminating.pods.get_mut(&2) {
        p.terminating = true;
    }
    let mut gone = template_at(at_rest("db:1"), "db:2");
    gone.pods.remove(&2);
    let mut recreated = template_at(at_rest("db:1"), "db:2");
    recreated.pods.insert(2, pod(2, "db:2", false));
    for o in [terminating, gone, recreated.clone()] {
        let d = decide(&spec("db:2"), &state, o);
        assert!(deletes(&d).is_empty(), "{d:?}");
    }
    recreated.pods.insert(2, pod(2, "db:2", true));
    let d = decide(&spec("db:2"), &state, recreated);
    assert_eq!(d.reason(), POD_REPLACED);
    assert_eq!(
        target(&d),
        Some(&upgrading(
            "db:2",
            2,
            UpgradeStep::PostHook,
            &uid(2, "db:2")
        ))
    );
}

#[test]
fn the_post_hook_runs_before_the_next_pod() {
    let s = with_hooks(spec("db:2"), 1);
    let mut o = template_at(at_rest("db:1"), "db:2");
    o.pods.insert(2, pod(2, "db:2", true));
    let state = upgrading("db:2", 2, UpgradeStep::PostHook, &uid(2, "db:2"));
    let d = decide(&s, &state, o.clone());
    assert!(matches!(
        d.actions(),
        [DdbAction::RunHook {
            phase: HookPhase::Post,
            ordinal: 2,
            ..
        }]
    ));
    let key = hook_key(HookPhase::Post, 2, "db:2", &uid(2, "db:2"), 1);
    o.jobs.push(job(&key, Purpose::Hook, JobOutcome::Running));
    assert!(target(&decide(&s, &state, o.clone())).is_none());
    o.jobs = vec![job(&key, Purpose::Hook, succeeded())];
    let d = decide(&s, &state, o);
    assert_eq!(d.reason(), POD_UPGRADED);
    assert_eq!(
        target(&d),
        Some(&upgrading("db:2", 1, UpgradeStep::PreHook, &uid(1, "db:1")))
    );
}

#[test]
fn the_last_pod_completes_the_upgrade_and_sets_the_version() {
    let o = template_at(at_rest("db:2"), "db:2");
    let state = upgrading("db:2", 0, UpgradeStep::PostHook, &uid(0, "db:2"));
    let d = decide(&spec("db:2"), &state, o);
    assert_eq!(d.reason(), UPGRADE_COMPLETED);
    assert_eq!(target(&d), Some(&ready("db:2")));
    assert_eq!(super::version(target(&d)), Some("db:2".to_owned()));
    assert_eq!(super::version(Some(&state)), Some("db:1".to_owned()));
}

#[test]
fn a_failed_hook_is_degraded_naming_the_pod_and_the_hook_then_retried_after_backoff() {
    let s = with_hooks(spec("db:2"), 2);
    let mut o = template_at(at_rest("db:1"), "db:2");
    let key = hook_key(HookPhase::Pre, 2, "db:2", &uid(2, "db:1"), 1);
    o.jobs.push(job(&key, Purpose::Hook, failed(995)));
    let state = upgrading("db:2", 2, UpgradeStep::PreHook, &uid(2, "db:1"));
    let d = decide(&s, &state, o.clone());
    assert!(is_degraded(&d));
    assert_eq!(d.reason(), HOOK_FAILED);
    assert!(
        message(&d).contains("pre-upgrade hook of db-2"),
        "{}",
        message(&d)
    );
    assert!(message(&d).contains("BackoffLimitExceeded"));
    o.jobs = vec![job(&key, Purpose::Hook, failed(900))];
    let d = decide(&s, &state, o);
    assert_eq!(d.reason(), HOOK_RETRIED);
    assert!(matches!(target(&d), Some(DdbState::Upgrading(u)) if u.attempt == 2));
}

#[test]
fn an_exhausted_hook_waits_for_the_retry_annotation() {
    let s = with_hooks(spec("db:2"), 0);
    let mut o = template_at(at_rest("db:1"), "db:2");
    let key = hook_key(HookPhase::Pre, 2, "db:2", &uid(2, "db:1"), 1);
    o.jobs.push(job(&key, Purpose::Hook, failed(0)));
    let state = upgrading("db:2", 2, UpgradeStep::PreHook, &uid(2, "db:1"));
    let d = decide(&s, &state, o.clone());
    assert!(is_degraded(&d));
    assert!(message(&d).contains("lockstep.dev/retry-hook"));
    assert!(matches!(
        d,
        Decision::Stay {
            wait: crate::engine::Wait::Watch,
            ..
        }
    ));
    o.requests.retry_hook = Some("1".to_owned());
    let d = decide(&s, &state, o.clone());
    assert_eq!(d.reason(), HOOK_RETRY_REQUESTED);
    let Some(DdbState::Upgrading(next)) = target(&d) else {
        panic!("{d:?}")
    };
    assert_eq!((next.attempt, next.round_start), (2, 2));
    // The same token, seen again at the next failure, asks for nothing more.
    let key2 = hook_key(HookPhase::Pre, 2, "db:2", &uid(2, "db:1"), 2);
    o.jobs.push(job(&key2, Purpose::Hook, failed(0)));
    let d = decide(&s, &DdbState::Upgrading(next.clone()), o);
    assert_eq!(d.reason(), HOOK_FAILED);
}

#[test]
fn a_stale_retry_token_from_before_the_upgrade_is_not_acted_on() {
    let mut o = at_rest("db:1");
    o.requests.retry_hook = Some("old".to_owned());
    let d = decide(&spec("db:2"), &ready("db:1"), o);
    assert!(
        matches!(target(&d), Some(DdbState::Upgrading(u)) if u.retry_ack.as_deref() == Some("old"))
    );
}

#[test]
fn the_skip_annotation_moves_an_exhausted_hook_on() {
    let s = with_hooks(spec("db:2"), 0);
    let mut o = template_at(at_rest("db:1"), "db:2");
    let key = hook_key(HookPhase::Pre, 2, "db:2", &uid(2, "db:1"), 1);
    o.jobs.push(job(&key, Purpose::Hook, failed(0)));
    o.requests.skip_hook = Some("go".to_owned());
    let state = upgrading("db:2", 2, UpgradeStep::PreHook, &uid(2, "db:1"));
    let d = decide(&s, &state, o);
    assert_eq!(d.reason(), HOOK_SKIPPED);
    assert!(
        matches!(target(&d), Some(DdbState::Upgrading(u)) if u.step == UpgradeStep::Restart && u.skip_ack.as_deref() == Some("go"))
    );
}

#[test]
fn a_new_image_mid_upgrade_retargets_from_the_top_when_no_pod_is_in_flight() {
    let mut o = template_at(at_rest("db:1"), "db:2");
    o.pods.insert(2, pod(2, "db:2", true));
    let state = upgrading("db:2", 1, UpgradeStep::PreHook, &uid(1, "db:1"));
    let d = decide(&spec("db:3"), &state, o);
    assert_eq!(d.reason(), IMAGE_CHANGED);
    assert!(
        matches!(target(&d), Some(DdbState::Upgrading(u)) if u.to == "db:3" && u.ordinal == 2 && u.pod_uid == uid(2, "db:2"))
    );
}

#[test]
fn a_new_image_waits_while_a_pod_is_in_flight() {
    let mut o = template_at(at_rest("db:1"), "db:2");
    o.pods.remove(&2);
    let state = upgrading("db:2", 2, UpgradeStep::Restart, &uid(2, "db:1"));
    let d = decide(&spec("db:3"), &state, o.clone());
    assert!(target(&d).is_none());
    // The template keeps the image of the persisted target until the retarget is taken.
    assert!(
        !d.actions()
            .iter()
            .any(|a| matches!(a, DdbAction::EnsureStatefulSet(s) if s.image == "db:3"))
    );
    // Once the pod is back (even not Ready at a bad image), the retarget replaces it first.
    o.pods.insert(2, pod(2, "db:2", false));
    let d = decide(&spec("db:3"), &state, o);
    assert!(
        matches!(target(&d), Some(DdbState::Upgrading(u)) if u.to == "db:3" && u.ordinal == 2 && u.pod_uid == uid(2, "db:2"))
    );
}

#[test]
fn a_pod_recreated_at_a_stale_image_is_replaced_again() {
    let mut o = template_at(at_rest("db:1"), "db:2");
    o.pods.insert(2, pod(2, "db:0", true));
    let state = upgrading("db:2", 2, UpgradeStep::Restart, &uid(2, "db:1"));
    let d = decide(&spec("db:2"), &state, o);
    assert_eq!(d.reason(), RECREATED_AT_STALE_IMAGE);
    assert_eq!(
        target(&d),
        Some(&upgrading("db:2", 2, UpgradeStep::PreHook, &uid(2, "db:0")))
    );
}

#[test]
fn a_pod_that_is_down_skips_its_pre_hook() {
    let s = with_hooks(spec("db:2"), 1);
    let mut o = template_at(at_rest("db:1"), "db:2");
    o.pods.insert(2, pod(2, "db:1", false));
    let state = upgrading("db:2", 2, UpgradeStep::PreHook, &uid(2, "db:1"));
    let d = decide(&s, &state, o);
    assert_eq!(d.reason(), PRE_HOOK_SKIPPED);
}

// --- Backups ------------------------------------------------------------------------

#[test]
fn backup_now_runs_one_backup_per_token() {
    let s = with_backups(spec("db:1"));
    let mut o = at_rest("db:1");
    o.cronjob = Some(CronJobView {
        uid: "cj".to_owned(),
        in_sync: true,
    });
    o.requests.backup_now = Some("t1".to_owned());
    let d = decide(&s, &ready("db:1"), o.clone());
    assert_eq!(d.reason(), BACKUP_REQUESTED);
    let backing_up = target(&d).cloned().unwrap_or(DdbState::Creating);
    let d = decide(&s, &backing_up, o.clone());
    let key = backup_key("t1");
    assert_eq!(
        d.actions(),
        &[DdbAction::RunBackup {
            key: key.clone(),
            kind: BackupKind::OnDemand
        }]
    );
    o.jobs.push(job(&key, Purpose::Backup, succeeded()));
    let d = decide(&s, &backing_up, o.clone());
    assert_eq!(d.reason(), BACKUP_SUCCEEDED);
    // Back at rest, the served token asks for nothing more.
    let d = decide(&s, &ready("db:1"), o);
    assert_eq!(d.reason(), SERVING);
}

#[test]
fn backup_now_without_a_policy_does_nothing_and_is_reported_degraded() {
    let mut o = at_rest("db:1");
    o.requests.backup_now = Some("t1".to_owned());
    let d = decide(&spec("db:1"), &ready("db:1"), o);
    assert!(target(&d).is_none() && d.actions().is_empty());
    assert_eq!(d.reason(), BACKUP_NOT_CONFIGURED);
    assert!(
        is_degraded(&d),
        "the ignored request shows in the Degraded condition"
    );
    assert!(message(&d).contains("spec.backupPolicy is not set"));
}

#[test]
fn a_ready_cluster_with_a_pod_down_is_reported_degraded_naming_the_pod() {
    let mut o = at_rest("db:1");
    o.pods.insert(1, pod(1, "db:1", false));
    let d = decide(&spec("db:1"), &ready("db:1"), o);
    assert!(target(&d).is_none(), "a pod down at rest moves no state");
    assert_eq!(d.reason(), PODS_NOT_READY);
    assert!(is_degraded(&d));
    assert!(message(&d).contains("db-1"), "{}", message(&d));
}

#[test]
fn last_backup_comes_from_the_newest_finished_backup_job() {
    let mut o = at_rest("db:1");
    o.jobs = vec![
        job(
            "backup-a",
            Purpose::Backup,
            JobOutcome::Succeeded { at: t(10) },
        ),
        job("backup-b", Purpose::Backup, failed(20)),
        job("backup-c", Purpose::Backup, JobOutcome::Running),
        job("pre-x", Purpose::Hook, JobOutcome::Succeeded { at: t(30) }),
    ];
    let last = super::last_backup(&o, None);
    assert_eq!(last.as_ref().map(|l| l.job.as_str()), Some("db-backup-b"));
    assert!(last.is_some_and(|l| l.outcome.starts_with("Failed (BackoffLimitExceeded")));
}

// --- Finalizing -----------------------------------------------------------------------

fn deleting(
    spec: &DistributedDBSpec,
    state: &DdbState,
    o: Observed,
) -> Decision<DdbState, DdbAction> {
    let w = World {
        deleting: true,
        ..world(o)
    };
    let d = DistributedDb::decide(spec, state, &w);
    assert_declared(state, &d);
    d
}

#[test]
fn deleting_without_a_backup_policy_releases_at_once() {
    let d = deleting(&spec("db:1"), &ready("db:1"), at_rest("db:1"));
    assert_eq!(target(&d), Some(&DdbState::Finalized));
    assert_eq!(d.reason(), NO_BACKUP_POLICY);
}

#[test]
fn the_finalizer_is_held_until_the_final_backup_succeeds() {
    let s = with_backups(spec("db:1"));
    let d = deleting(&s, &ready("db:1"), at_rest("db:1"));
    assert_eq!(target(&d), Some(&DdbState::Finalizing { attempt: 1 }));
    let state = DdbState::Finalizing { attempt: 1 };
    let d = deleting(&s, &state, at_rest("db:1"));
    assert_eq!(
        d.actions(),
        &[DdbAction::RunBackup {
            key: "final-backup-1".to_owned(),
            kind: BackupKind::Final
        }]
    );
    let mut o = at_rest("db:1");
    o.jobs
        .push(job("final-backup-1", Purpose::FinalBackup, failed(995)));
    let d = deleting(&s, &state, o.clone());
    assert!(is_degraded(&d));
    assert!(message(&d).contains("BackoffLimitExceeded"));
    assert!(!DistributedDb::finalized(&state));
    o.requests.skip_final_backup = true;
    let d = deleting(&s, &state, o);
    assert_eq!(d.reason(), FINAL_BACKUP_SKIPPED);
    assert_eq!(target(&d), Some(&DdbState::Finalized));
}

#[test]
fn nothing_but_the_final_backup_is_created_while_deleting() {
    let s = with_backups(spec("db:2"));
    let mut o = at_rest("db:1");
    o.statefulset = None;
    o.service_in_sync = false;
    let state = DdbState::Finalizing { attempt: 1 };
    let d = deleting(&s, &state, o);
    assert!(d.actions().iter().all(|a| matches!(
        a,
        DdbAction::RunBackup {
            kind: BackupKind::Final,
            ..
        }
    )));
}

// --- The table, the schema, the CRD ----------------------------------------------------

#[test]
fn every_edge_reason_is_a_camel_case_constant() {
    for e in TABLE {
        assert!(
            e.reason.chars().next().is_some_and(char::is_uppercase) && !e.reason.contains(' '),
            "{}",
            e.reason
        );
    }
}

#[test]
fn every_state_round_trips_and_fits_the_schema() {
    let states = [
        DdbState::Creating,
        ready("db:1"),
        DdbState::Scaling {
            version: "v".to_owned(),
            from_replicas: 1,
            replicas: 2,
        },
        upgrading("db:2", 1, UpgradeStep::Restart, "u"),
        DdbState::BackingUp {
            version: "v".to_owned(),
            replicas: 3,
            request: "t".to_owned(),
        },
        DdbState::Finalizing { attempt: 2 },
        DdbState::Finalized,
    ];
    let schema = serde_json::to_value(schemars::schema_for!(DdbState)).unwrap_or_default();
    let properties = schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for state in states {
        let json = serde_json::to_value(&state).unwrap_or_default();
        let back: DdbState = serde_json::from_value(json.clone()).unwrap_or(DdbState::Finalized);
        assert_eq!(back, state);
        for key in json
            .as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
        {
            assert!(
                properties.contains_key(&key),
                "{key} of {json} is not in the schema"
            );
        }
    }
}

#[test]
fn the_crd_validates_fields_by_name() {
    let crd = serde_json::to_string(&DistributedDB::crd()).unwrap_or_default();
    for needle in [
        "storage.size cannot shrink",
        "storage.storageClassName is immutable",
        "backupPolicy.schedule must be a cron expression",
        "\"minimum\":1",
        "isQuantity(self)",
        "\"shortNames\":[\"ddb\"]",
    ] {
        assert!(crd.contains(needle), "the CRD lacks {needle}");
    }
}

#[test]
fn the_cron_pattern_accepts_schedules_and_rejects_nonsense() {
    let re = regex_lite(crate::machines::common::cron::CRON_PATTERN);
    for good in [
        "0 3 * * *",
        "*/15 * * * *",
        "0 0 1,15 * MON-FRI",
        "@daily",
        "5 4 * * sun",
    ] {
        assert!(re(good), "{good}");
    }
    for bad in [
        "every day",
        "61 * * * *",
        "* * * *",
        "0 24 * * *",
        "@often",
        "",
    ] {
        assert!(!re(bad), "{bad}");
    }
}

/// A tiny backtracking matcher for the subset of RE2 the cron pattern uses, so the test
/// needs no regex crate: literals, `.`-free classes, groups, `|`, `?`, `*`, `+`, `{n}`.
fn regex_lite(pattern: &str) -> impl Fn(&str) -> bool + '_ {
    move |text: &str| {
        let p: Vec<char> = pattern.chars().collect();
        let t: Vec<char> = text.chars().collect();
        lite::matches_all(&p, &t)
    }
}

mod lite {
    //! Just enough of a regular-expression engine for `CRON_PATTERN`.

    #[derive(Debug, Clone)]
    enum Node {
        Char(char),
        Class(Vec<(char, char)>),
        Group(Vec<Vec<Node>>),
        Start,
        End,
        Repeat(Box<Node>, usize, Option<usize>),
    }

    fn parse_alt(p: &[char], i: &mut usize) -> Vec<Vec<Node>> {
        let mut alts = vec![Vec::new()];
        while *i < p.len() && p[*i] != ')' {
            let c = p[*i];
            *i += 1;
            let node = match c {
                '|' => {
                    alts.push(Vec::new());
                    continue;
                }
                '(' => {
                    let inner = parse_alt(p, i);
                    *i += 1;
                    Node::Group(inner)
                }
                '[' => {
                    let mut ranges = Vec::new();
                    while p[*i] != ']' {
                        let lo = p[*i];
                        if p[*i + 1] == '-' && p[*i + 2] != ']' {
                            ranges.push((lo, p[*i + 2]));
                            *i += 3;
                        } else {
                            ranges.push((lo, lo));
                            *i += 1;
                        }
                    }
                    *i += 1;
                    Node::Class(ranges)
                }
                '^' => Node::Start,
                '$' => Node::End,
                c => Node::Char(c),
            };
            let node = match p.get(*i) {
                Some('?') => {
                    *i += 1;
                    Node::Repeat(Box::new(node), 0, Some(1))
                }
                Some('*') => {
                    *i += 1;
                    Node::Repeat(Box::new(node), 0, None)
                }
                Some('+') => {
                    *i += 1;
                    Node::Repeat(Box::new(node), 1, None)
                }
                Some('{') => {
                    let close = p[*i..].iter().position(|c| *c == '}').unwrap_or(0) + *i;
                    let n: usize = p[*i + 1..close]
                        .iter()
                        .collect::<String>()
                        .parse()
                        .unwrap_or(0);
                    *i = close + 1;
                    Node::Repeat(Box::new(node), n, Some(n))
                }
                _ => node,
            };
            if let Some(last) = alts.last_mut() {
                last.push(node);
            }
        }
        alts
    }

    /// Every position the sequence `nodes` can end at, starting at `at`.
    fn ends(nodes: &[Node], t: &[char], at: usize) -> Vec<usize> {
        let Some((first, rest)) = nodes.split_first() else {
            return vec![at];
        };
        let mut out = Vec::new();
        for mid in node_ends(first, t, at) {
            out.extend(ends(rest, t, mid));
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    fn node_ends(node: &Node, t: &[char], at: usize) -> Vec<usize> {
        match node {
            Node::Char(c) => (t.get(at) == Some(c))
                .then_some(at + 1)
                .into_iter()
                .collect(),
            Node::Class(r) => t
                .get(at)
                .filter(|c| r.iter().any(|(lo, hi)| lo <= *c && *c <= hi))
                .map(|_| at + 1)
                .into_iter()
                .collect(),
            Node::Start => (at == 0).then_some(at).into_iter().collect(),
            Node::End => (at == t.len()).then_some(at).into_iter().collect(),
            Node::Group(alts) => {
                let mut out: Vec<usize> = alts.iter().flat_map(|a| ends(a, t, at)).collect();
                out.sort_unstable();
                out.dedup();
                out
            }
            Node::Repeat(inner, min, max) => {
                let mut frontier = vec![at];
                let mut out = Vec::new();
                let mut count = 0;
                loop {
                    if count >= *min {
                        out.extend(frontier.iter().copied());
                    }
                    if max.is_some_and(|m| count >= m) || frontier.is_empty() {
                        break;
                    }
                    let mut next: Vec<usize> = frontier
                        .iter()
                        .flat_map(|f| node_ends(inner, t, *f))
                        .filter(|e| !out.contains(e) || count < *min)
                        .collect();
                    next.sort_unstable();
                    next.dedup();
                    if next == frontier {
                        break;
                    }
                    frontier = next;
                    count += 1;
                }
                out.sort_unstable();
                out.dedup();
                out
            }
        }
    }

    pub(super) fn matches_all(p: &[char], t: &[char]) -> bool {
        let mut i = 0;
        let alts = parse_alt(p, &mut i);
        let root = Node::Group(alts);
        node_ends(&root, t, 0).contains(&t.len())
    }
}

// --- Rendering and observation ------------------------------------------------------------

mod objects {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::Pod;
    use kube::ResourceExt;
    use kube::runtime::reflector::{self, Store};
    use kube::runtime::watcher;
    use serde_json::json;

    use super::super::actions::{HookPhase, Shape};
    use super::super::observe::observe;
    use super::super::render;
    use super::super::state::DdbState;
    use super::super::{DistributedDB, DistributedDb};
    use super::{spec, with_backups, with_hooks};
    use crate::driver::{Cache, Operator};
    use crate::machines::common::backup::BackupKind;

    fn store<K>(objects: Vec<K>) -> Store<K>
    where
        K: kube::Resource<DynamicType = ()> + Clone + 'static,
    {
        let (reader, mut writer) = reflector::store::<K>();
        for o in objects {
            writer.apply_watcher_event(&watcher::Event::Apply(o));
        }
        reader
    }

    fn cache(statefulsets: Vec<StatefulSet>, pods: Vec<Pod>) -> Cache {
        Cache {
            statefulsets: store(statefulsets),
            pods: store(pods),
            services: store(Vec::new()),
            jobs: store(Vec::new()),
            cronjobs: store(Vec::new()),
            configmaps: store(Vec::new()),
            pdbs: store(Vec::new()),
            pvcs: store(Vec::new()),
        }
    }

    fn db(spec: super::DistributedDBSpec) -> DistributedDB {
        let mut db = DistributedDB::new("db", spec);
        db.metadata.namespace = Some("ns".to_owned());
        db.metadata.uid = Some("uid-db".to_owned());
        db
    }

    fn shape(image: &str) -> Shape {
        Shape {
            image: image.to_owned(),
            replicas: 3,
            claim_size: "1Gi".to_owned(),
        }
    }

    /// What the API server would hand back: the object with defaults and a status.
    fn as_stored(sts: &StatefulSet) -> StatefulSet {
        let mut v = serde_json::to_value(sts).unwrap_or_default();
        v["metadata"]["uid"] = json!("uid-sts");
        v["metadata"]["generation"] = json!(1);
        v["spec"]["revisionHistoryLimit"] = json!(10);
        v["spec"]["template"]["spec"]["dnsPolicy"] = json!("ClusterFirst");
        v["spec"]["template"]["spec"]["containers"][0]["terminationMessagePath"] =
            json!("/dev/termination-log");
        v["spec"]["template"]["spec"]["containers"][0]["ports"][0]["protocol"] = json!("TCP");
        v["spec"]["volumeClaimTemplates"][0]["spec"]["volumeMode"] = json!("Filesystem");
        v["status"] = json!({"observedGeneration": 1, "replicas": 3});
        serde_json::from_value(v).unwrap_or_default()
    }

    #[test]
    fn the_statefulset_is_replaced_by_hand_with_claims_from_storage() {
        let mut s = spec("db:1");
        s.storage.storage_class_name = Some("fast".to_owned());
        s.pod_labels
            .insert("app.kubernetes.io/instance".to_owned(), "evil".to_owned());
        let sts = render::statefulset(&db(s), &shape("db:1")).unwrap_or_default();
        let spec = &sts.spec;
        assert_eq!(
            spec.update_strategy
                .as_ref()
                .and_then(|u| u.type_.as_deref()),
            Some("OnDelete")
        );
        assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
        assert_eq!(spec.service_name.as_deref(), Some("db"));
        let claim = &spec
            .volume_claim_templates
            .as_ref()
            .map(|v| v[0].clone())
            .unwrap_or_default();
        let claim_spec = claim.spec.clone().unwrap_or_default();
        assert_eq!(claim_spec.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(
            claim_spec
                .resources
                .and_then(|r| r.requests)
                .and_then(|r| r.get("storage").cloned())
                .map(|q| q.0),
            Some("1Gi".to_owned())
        );
        let owner = &sts.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("DistributedDB", Some(true))
        );
        let template_labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        assert_eq!(
            template_labels
                .get("app.kubernetes.io/instance")
                .map(String::as_str),
            Some("db"),
            "our labels win"
        );
        assert!(sts.annotations().contains_key("lockstep.dev/applied-hash"));
    }

    #[test]
    fn a_stored_statefulset_with_api_defaults_conforms_and_an_edited_one_does_not() {
        let d = db(spec("db:1"));
        let live = as_stored(&render::statefulset(&d, &shape("db:2")).unwrap_or_default());
        let o = observe(&d, &cache(vec![live.clone()], Vec::new()));
        let sts = o.statefulset.clone().unwrap_or_else(|| panic!("{o:?}"));
        assert!(sts.conforms && sts.caught_up, "{sts:?}");
        assert_eq!(sts.image.as_deref(), Some("db:2"));
        assert!(sts.holds(&shape("db:2")) && !sts.holds(&shape("db:1")));

        let mut edited = live;
        if let Some(c) = edited
            .spec
            .template
            .spec
            .as_mut()
            .map(|s| &mut s.containers[0])
        {
            c.env = None;
        }
        let o = observe(&d, &cache(vec![edited], Vec::new()));
        assert!(o.statefulset.is_some_and(|s| !s.conforms));
    }

    fn pod(name: &str, owner_kind: &str, owner: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                "labels": {
                    "app.kubernetes.io/managed-by": "lockstep",
                    "app.kubernetes.io/name": "distributeddb",
                    "app.kubernetes.io/instance": "db"
                },
                "ownerReferences": [{"apiVersion": "v1", "kind": owner_kind, "name": owner, "uid": "x"}]
            },
            "spec": {"containers": [{"name": "db", "image": "db:1"}]},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .unwrap_or_default()
    }

    #[test]
    fn observation_maps_database_pods_by_ordinal_and_ignores_job_pods() {
        let d = db(spec("db:1"));
        let pods = vec![
            pod("db-0", "StatefulSet", "db", true),
            pod("db-2", "StatefulSet", "db", false),
            pod(
                "db-pre-2-1a2b3c4d-1-xyz12",
                "Job",
                "db-pre-2-1a2b3c4d-1",
                true,
            ),
        ];
        let o = observe(&d, &cache(Vec::new(), pods));
        assert_eq!(o.pods.keys().copied().collect::<Vec<_>>(), vec![0, 2]);
        assert!(o.pods[&0].ready && !o.pods[&2].ready);
        assert_eq!(o.pods[&0].image.as_deref(), Some("db:1"));
    }

    #[test]
    fn a_hook_job_runs_once_at_the_target_image_about_its_pod() {
        let d = db(with_hooks(spec("db:2"), 1));
        let job = render::hook_job(&d, HookPhase::Pre, 2, "pre-2-abc-1", "db:1", "db:2")
            .ok()
            .flatten()
            .unwrap_or_default();
        assert_eq!(job.name_any(), "db-pre-2-abc-1");
        let spec = job.spec.unwrap_or_default();
        assert_eq!(spec.backoff_limit, Some(0));
        assert_eq!(spec.active_deadline_seconds, Some(60));
        let container = spec
            .template
            .spec
            .map(|s| s.containers[0].clone())
            .unwrap_or_default();
        assert_eq!(container.image.as_deref(), Some("db:2"));
        let env: Vec<(String, Option<String>)> = container
            .env
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.name, e.value))
            .collect();
        assert!(env.contains(&("TARGET_POD".to_owned(), Some("db-2".to_owned()))));
        assert!(env.contains(&("TARGET_HOST".to_owned(), Some("db-2.db.ns.svc".to_owned()))));
    }

    #[test]
    fn backups_get_s3_credentials_only_through_secret_references() {
        let d = db(with_backups(spec("db:1")));
        let job = render::backup_job(&d, "final-backup-1", BackupKind::Final)
            .ok()
            .flatten()
            .unwrap_or_default();
        let cron = d
            .spec
            .backup_policy
            .as_ref()
            .and_then(|p| render::cronjob(&d, p).ok())
            .unwrap_or_default();
        for text in [
            serde_json::to_string(&job).unwrap_or_default(),
            serde_json::to_string(&cron).unwrap_or_default(),
        ] {
            assert!(
                text.contains(r#""secretKeyRef":{"key":"accessKey","name":"s3""#),
                "{text}"
            );
            assert!(
                !text.contains(r#""name":"AWS_ACCESS_KEY_ID","value""#),
                "{text}"
            );
        }
        assert_eq!(
            job.labels().get("lockstep.dev/purpose").map(String::as_str),
            Some("final-backup")
        );
    }

    #[test]
    fn the_status_reports_the_version_the_pods_and_the_last_backup() {
        let d = db(spec("db:2"));
        let mut o = super::at_rest("db:1");
        o.jobs.push(super::job(
            "backup-x",
            crate::machines::common::jobs::Purpose::Backup,
            super::succeeded(),
        ));
        let state = super::upgrading("db:2", 2, super::UpgradeStep::Restart, "u");
        let status = DistributedDb::status(&d, Default::default(), Some(&state), &o);
        assert_eq!(
            status["version"],
            json!("db:1"),
            "the version moves only at the end"
        );
        assert_eq!(status["readyReplicas"], json!(3));
        assert_eq!(status["lastBackup"]["job"], json!("db-backup-x"));
        let ready = DdbState::Ready {
            version: "db:2".to_owned(),
            replicas: 3,
        };
        let status = DistributedDb::status(&d, Default::default(), Some(&ready), &o);
        assert_eq!(status["version"], json!("db:2"));
    }
}

#[test]
fn every_edge_is_taken_in_the_file_the_table_names() {
    let checked = crate::machines::common::table_sources::where_taken::<DistributedDb>(
        "src/machines/distributeddb/decide",
    );
    assert_eq!(checked, Ok(()));
}
