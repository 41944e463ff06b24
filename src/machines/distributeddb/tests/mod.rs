//! Unit tests of `decide` and of rendering, read as sentences: one file per state or
//! concern, sharing the fixtures here.

mod at_rest;
mod backups;
mod creating;
mod objects;
mod records;
mod scaling;
mod table;
mod tls;
mod upgrading;

use std::collections::BTreeMap;

use super::actions::{DdbAction, HookPhase, JobAction, Shape, backup_key, hook_key};
use super::api::{DistributedDB, DistributedDBSpec};
use super::fixtures::{self, policy, with_hooks};
use super::machine::DistributedDb;
use super::observe::{
    CronJobView, HookRequests, Observed, Own, PodView, Requests, StatefulSetView,
};
use super::state::{DdbState, Upgrade, UpgradeStep};
use super::table::TABLE;
use super::table::reason::*;
use crate::engine::{Decision, Wait};
use crate::machines::common::backup::BackupKind;
use crate::machines::common::jobs::{JobOutcome, JobView, Purpose};
use crate::machines::common::testing::{
    self, assert_degraded, assert_goes, assert_says, assert_stays, failed, has_action, is_degraded,
    message, picked, succeeded, t, target, wait_of,
};

fn with_backups(mut s: DistributedDBSpec) -> DistributedDBSpec {
    s.backup_policy = Some(policy());
    s
}

fn spec(image: &str) -> DistributedDBSpec {
    super::fixtures::spec(image, 3)
}

fn uid(k: i32, image: &str) -> String {
    format!("uid-{k}-{image}")
}

fn pod(k: i32, image: &str, ready: bool) -> PodView {
    testing::pod(uid(k, image), image, ready, false, ())
}

/// Three pods Ready at `image`, every owned object in place.
fn at_rest(image: &str) -> Observed {
    Observed {
        name: "db".to_owned(),
        statefulset: Some(StatefulSetView {
            conforms: true,
            image: Some(image.to_owned()),
            replicas: 3,
            caught_up: true,
        }),
        pods: (0..3).map(|k| (k, pod(k, image, true))).collect(),
        jobs: Vec::new(),
        cronjob: None,
        requests: Requests::default(),
        own: Own {
            service_in_sync: true,
            pdb_in_sync: true,
            volumes: crate::machines::distributeddb::observe::Volumes {
                template_size: Some("1Gi".to_owned()),
                claims: BTreeMap::new(),
            },
            requests: HookRequests::default(),
            certificates: None,
        },
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
        budget: crate::machines::common::retry::RetryBudget::begin(None),
        skip_ack: None,
        drained: false,
    })
}

fn evictions(d: &Decision<DdbState, DdbAction>) -> Vec<(i32, String)> {
    picked!(d.actions(), DdbAction::EvictPod { ordinal, uid } => (*ordinal, uid.clone()))
}

/// Decide with the persisted state entered `secs` seconds ago.
fn decide_after(
    spec: &DistributedDBSpec,
    state: &DdbState,
    o: Observed,
    secs: i64,
) -> Decision<DdbState, DdbAction> {
    testing::decide_at::<DistributedDb>(spec, state, o, 1000, 1000 - secs)
}

fn decide(
    spec: &DistributedDBSpec,
    state: &DdbState,
    o: Observed,
) -> Decision<DdbState, DdbAction> {
    decide_after(spec, state, o, 1000)
}

fn assert_declared(from: &DdbState, d: &Decision<DdbState, DdbAction>) {
    testing::assert_declared::<DistributedDb>(from, d);
}

fn job(key: &str, purpose: Purpose, outcome: JobOutcome) -> JobView {
    testing::job("db", key, purpose, outcome)
}

impl testing::OnJobs for DdbAction {
    fn on_jobs(&self) -> Option<&JobAction> {
        match self {
            DdbAction::Jobs(action) => Some(action),
            _ => None,
        }
    }
}

/// An observation changed the way a test tells it: `at_rest("db:1").with_pod(0, "db:2", false)`.
trait Seen {
    /// Pod `k` is seen at `image`, Ready or not.
    fn with_pod(self, k: i32, image: &str, ready: bool) -> Self;
    /// Pod `k` is not seen.
    fn without_pod(self, k: i32) -> Self;
    /// The StatefulSet's template is at `image`.
    fn with_template(self, image: &str) -> Self;
    /// `job` is seen too.
    fn with_job(self, job: JobView) -> Self;
}

impl Seen for Observed {
    fn with_pod(mut self, k: i32, image: &str, ready: bool) -> Self {
        self.pods.insert(k, pod(k, image, ready));
        self
    }

    fn without_pod(mut self, k: i32) -> Self {
        self.pods.remove(&k);
        self
    }

    fn with_template(mut self, image: &str) -> Self {
        if let Some(sts) = &mut self.statefulset {
            sts.image = Some(image.to_owned());
        }
        self
    }

    fn with_job(mut self, job: JobView) -> Self {
        self.jobs.push(job);
        self
    }
}
