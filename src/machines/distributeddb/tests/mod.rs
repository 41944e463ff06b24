//! Unit tests of `decide` and of rendering, read as sentences: one file per state or
//! concern, sharing the fixtures here.

mod at_rest;
mod backups;
mod creating;
mod objects;
mod records;
mod scaling;
mod table;
mod upgrading;

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
        placement: None,
        readiness_probe: None,
        liveness_probe: None,
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
        created: None,
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
        acks: BTreeMap::new(),
    }
}

/// Decide with the persisted state entered `secs` seconds ago.
fn decide_after(
    spec: &DistributedDBSpec,
    state: &DdbState,
    o: Observed,
    secs: i64,
) -> Decision<DdbState, DdbAction> {
    let w = World {
        entered_at: t(1000 - secs),
        ..world(o)
    };
    let d = DistributedDb::decide(spec, state, &w);
    assert_declared(state, &d);
    d
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
        drained: false,
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
