//! Unit tests of `decide`, of rendering and of the status projection, read as sentences:
//! one file per concern, sharing the fixtures here.

mod app_user;
mod archiving;
mod at_rest;
mod deletion;
mod endpoint_token;
mod failover;
mod fencing;
mod fencing_lease;
mod fencing_survey;
mod hibernation;
mod managed;
mod network_policy;
mod parameters;
mod planned_release;
mod records;
mod rendering;
mod requested;
mod restoring;
mod synchronous_failover;
mod synchronous_terms;
mod tls;
mod upgrades;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Container;
use kube::ResourceExt;

use super::actions::{DeleteCause, JobAction, PgAction, Role, ServiceKind, backup_key};
use super::api::{BackupSpec, PostgresCluster, PostgresClusterSpec};
use super::machine::Postgres;
use super::observe::{
    CronJobView, InSync, LeaseView, Observed, Own, PgRequests, PodView, Requests, StatefulSetView,
};
use super::render;
use super::state::{PgState, PodRef, SwitchCause, SwitchStep, Switchover, Topology};
use super::table::reason::*;
use crate::engine::{Decision, Machine};
use crate::machines::common::backup::BackupKind;
use crate::machines::common::jobs::{JobOutcome, JobView, Purpose};
use crate::machines::common::testing::{
    self, assert_degraded, assert_goes, assert_says, assert_stays, failed, has_action, is_degraded,
    message, picked, requeue_secs, t, target,
};
use crate::pod::applied::SettingsReport;
use crate::pod::settings;

// The default images of `spec("16.3")` and `spec("16.4")` (no `spec.image`): the
// default repository's, `DEFAULT_POSTGRES_IMAGE_REPOSITORY`.
const V1: &str = "ghcr.io/lockstep-dev/postgres:16.3";
const V2: &str = "ghcr.io/lockstep-dev/postgres:16.4";

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
        certificates: None,
        synchronous: None,
        bootstrap: None,
        restore: None,
        network_policy: Default::default(),
        hibernate: false,
        database: Some("app".to_owned()),
        roles: Vec::new(),
        databases: Vec::new(),
        backup_schedule: None,
        backup: None,
        fencing: Default::default(),
        placement: None,
        spread: Default::default(),
        postgresql: Default::default(),
    }
}

pub(crate) fn backup() -> BackupSpec {
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
        wal_archive: None,
        method: None,
        retention: None,
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
    testing::pod(uid(k, image), image, ready, false, role)
}

/// Change the observed pod `k`, if there is one.
fn edit(o: &mut Observed, k: i32, change: impl FnOnce(&mut PodView)) {
    if let Some(p) = o.pods.get_mut(&k) {
        change(p);
    }
}

/// Change the observed primary Lease, if there is one.
fn edit_lease(o: &mut Observed, change: impl FnOnce(&mut LeaseView)) {
    if let Some(l) = o.own.lease.as_mut() {
        change(l);
    }
}

/// The spec at 16.3 with `replicas` instances.
fn scaled_to(replicas: i32) -> PostgresClusterSpec {
    PostgresClusterSpec {
        replicas,
        ..spec("16.3")
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
        own: Own {
            in_sync: InSync::ALL,
            certificates: None,
            lease: Some(lease_of(primary, image)),
            network_policy_uid: None,
            job_results: BTreeMap::new(),
            answers: BTreeMap::new(),
            requests: PgRequests::default(),
            lease_seconds: BTreeMap::new(),
            // A status that has seen the default `L` and no longer one.
            longest_lease_seconds: Some(15),
            unconfigured: Default::default(),
            unjudged: Default::default(),
            // Every member runs the spec's settings (and so its synchronous terms).
            judged: (0..3).collect(),
            synchronous_terms: None,
            settings: BTreeMap::new(),
            lagging: Default::default(),
            archiving: BTreeMap::new(),
            archived: BTreeMap::new(),
            objects: None,
            instances: BTreeMap::new(),
            synchronous: BTreeMap::new(),
            recovery_failed: BTreeMap::new(),
            empty: BTreeSet::new(),
            older_managers: BTreeSet::new(),
            claims: (0..3).map(|k| (k, format!("claim-{k}"))).collect(),
            restore_annotated: BTreeMap::new(),
        },
    }
}

/// The primary Lease naming pod `k` (UID at `image`), renewed at `t(995)`: just before
/// [`decide`]'s clock, as a holder that renews every `R` leaves it.
fn lease_of(k: i32, image: &str) -> LeaseView {
    LeaseView {
        holder: Some(format!("pg-{k}/{}", uid(k, image))),
        renewed: Some(t(995)),
        renewal_seen: None,
        duration: 15,
        transitions: 0,
        released_by: None,
        released_lsn: None,
        survey: None,
        never_held: false,
        uid: "lease-uid".to_owned(),
        version: "7".to_owned(),
    }
}

fn decide_at(
    spec: &PostgresClusterSpec,
    state: &PgState,
    o: Observed,
    now: i64,
    entered: i64,
) -> Decision<PgState, PgAction> {
    testing::decide_at::<Postgres>(spec, state, o, now, entered)
}

/// A failover of `pg-0` to `pg-1` at `step`, at its first attempt, nothing surveyed.
fn failover_at(step: SwitchStep) -> PgState {
    PgState::SwitchingOver(Switchover {
        cluster: cluster(V1, 0),
        old_uid: Some(uid(0, V1)),
        target: PodRef {
            ordinal: 1,
            uid: uid(1, V1),
        },
        step,
        attempt: 1,
        cause: SwitchCause::Failover,
        budget: crate::machines::common::retry::RetryBudget::begin(None),
        survey_attempt: None,
        surveyed: None,
        request: None,
    })
}

/// An upgrade to `V2` with no pod in flight, `pg-<primary>` primary.
fn upgrading_to_v2(primary: i32) -> PgState {
    PgState::Upgrading {
        cluster: cluster(V2, primary),
        pod: None,
    }
}

/// An upgrade's switchover from `pg-0` to `pg-1` at `step`, at its first attempt.
fn upgrade_switchover(step: SwitchStep) -> PgState {
    switching(step, 1, SwitchCause::Upgrade)
}

/// `o` once the Lease names `pg-1` (at `image`) and `pg-0` is labelled demoted.
fn hand_over_to_1(o: &mut Observed, image: &str) {
    o.own.lease = Some(lease_of(1, image));
    edit(o, 0, |p| p.role = Some(Role::Demoted));
}

/// `o` once `pg-<k>`'s manager reports a writable server holding Lease term `term`.
fn reports_primary(o: &mut Observed, k: i32, term: Option<i32>) {
    use crate::machines::postgres::instances::{Reported, ServerRole};
    o.own.instances.insert(
        k,
        Reported {
            server: Some(ServerRole {
                primary: true,
                timeline: 2,
                term,
            }),
            streaming: None,
        },
    );
}

/// `o` once `pg-1` reports itself promoted under the Lease `o` holds.
fn promoted_1(o: &mut Observed) {
    let term = o.own.lease.as_ref().map(|l| l.transitions);
    reports_primary(o, 1, term);
}

fn job(key: &str, purpose: Purpose, outcome: JobOutcome) -> JobView {
    testing::job("pg", key, purpose, outcome)
}

/// A new cluster whose generated Secrets (its certificates, and passwords unless given)
/// are created: the first step of every cluster.
fn issued() -> PgState {
    PgState::Creating {
        credentials_created: true,
        served_restore: None,
    }
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
        budget: crate::machines::common::retry::RetryBudget::begin(None),
        survey_attempt: None,
        surveyed: None,
        request: None,
    })
}

fn labels_in(d: &Decision<PgState, PgAction>) -> Vec<(i32, Role)> {
    picked!(d.actions(), PgAction::Label { ordinal, role, .. } => (*ordinal, *role))
}

fn deletes_in(d: &Decision<PgState, PgAction>) -> Vec<(i32, String, DeleteCause)> {
    picked!(d.actions(), PgAction::DeletePod { ordinal, uid, cause } => (*ordinal, uid.clone(), *cause))
}

impl testing::OnJobs for PgAction {
    fn on_jobs(&self) -> Option<&JobAction> {
        match self {
            PgAction::Jobs(action) => Some(action),
            _ => None,
        }
    }
}
