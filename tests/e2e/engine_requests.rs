//! The driver's promises, counted rather than timed: an idle reconcile makes no mutating
//! request, and every transition makes exactly one status write.
//!
//! A tiny machine, `Beacon`, owns one ConfigMap that holds its `spec.message`:
//!
//! ```text
//!   Creating --ConfigMapReady--> Ready --SpecChanged--> Updating --Updated--> Ready
//!   (any) --Deleting--> Finalizing --CleanedUp--> Finalized (finalizer released)
//! ```
//!
//! The operator runs in-process with a client whose every request is recorded by a
//! tower layer, and with hooks that count reconciles and transitions; reconciles are
//! forced through `Config::reconcile_all_on`.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::channel::mpsc;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, CustomResource, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use strum::{EnumDiscriminants, EnumIter, IntoStaticStr};
use tokio::sync::watch;

use lockstep::driver::{self, Cache, DriverHooks, Error, Finished, Op, Operator, Target, labels};
use lockstep::engine::RawRecord;
use lockstep::engine::{Deadline, Decision, Edge, EngineStatus, Machine, World, conditions};

use crate::support::{
    DEADLINE, Env, InProcessOperator, RequestLog, counted_client, install_crd_of, wait_for,
    wait_gone,
};

// ---------------------------------------------------------------- the resource

/// A beacon shines its message through a ConfigMap. A message starting with `!` cannot
/// be rendered (a reconcile error, for the error path).
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "lockstep.dev",
    version = "v1alpha1",
    kind = "Beacon",
    namespaced,
    status = "BeaconStatus"
)]
pub struct BeaconSpec {
    /// What the ConfigMap holds.
    pub message: String,
}

/// The beacon's status: the engine's part, and the ConfigMap it observed.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BeaconStatus {
    /// Phase, conditions, observedGeneration and the machine record.
    #[serde(flatten)]
    pub engine: EngineStatus<BeaconState>,
    /// The ConfigMap's name, once it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<String>,
}

/// Where a beacon's lifecycle stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema, EnumDiscriminants)]
#[strum_discriminants(name(BeaconKind), derive(EnumIter, IntoStaticStr))]
pub enum BeaconState {
    /// Making the ConfigMap.
    Creating,
    /// The ConfigMap holds the message.
    Ready,
    /// Rewriting the ConfigMap after a spec change.
    Updating,
    /// Deleting the ConfigMap.
    Finalizing,
    /// Nothing is left; the finalizer may go.
    Finalized,
}

// ---------------------------------------------------------------- the machine

/// The ConfigMap as observed.
#[derive(Clone, Debug, PartialEq)]
pub struct Shining {
    uid: String,
    message: Option<String>,
}

/// What a beacon does.
#[derive(Clone, Debug, PartialEq)]
pub enum BeaconAction {
    /// Apply the ConfigMap with the spec's message.
    ApplyConfigMap,
    /// Delete the ConfigMap with this UID.
    DeleteConfigMap(String),
}

/// The Beacon machine.
pub struct BeaconMachine;

const EDGES: &[Edge<BeaconKind>] = &[
    Edge::new(
        BeaconKind::Creating,
        BeaconKind::Ready,
        "ConfigMapReady",
        "the ConfigMap holds the message",
    ),
    Edge::new(
        BeaconKind::Ready,
        BeaconKind::Updating,
        "SpecChanged",
        "the message changed",
    ),
    Edge::new(
        BeaconKind::Updating,
        BeaconKind::Ready,
        "Updated",
        "the ConfigMap holds the new message",
    ),
    Edge::new(
        BeaconKind::Creating,
        BeaconKind::Finalizing,
        "Deleting",
        "the beacon is deleted",
    ),
    Edge::new(
        BeaconKind::Ready,
        BeaconKind::Finalizing,
        "Deleting",
        "the beacon is deleted",
    ),
    Edge::new(
        BeaconKind::Updating,
        BeaconKind::Finalizing,
        "Deleting",
        "the beacon is deleted",
    ),
    Edge::new(
        BeaconKind::Finalizing,
        BeaconKind::Finalized,
        "CleanedUp",
        "the ConfigMap is gone",
    ),
];

impl Machine for BeaconMachine {
    const NAME: &'static str = "beacon";
    type Spec = BeaconSpec;
    type State = BeaconState;
    type Kind = BeaconKind;
    type Observed = Option<Shining>;
    type Action = BeaconAction;

    fn initial() -> BeaconState {
        BeaconState::Creating
    }

    fn table() -> &'static [Edge<BeaconKind>] {
        EDGES
    }

    fn decide(
        spec: &BeaconSpec,
        state: &BeaconState,
        world: &World<Option<Shining>>,
    ) -> Decision<BeaconState, BeaconAction> {
        use BeaconState::*;
        let shining = world.observed.as_ref();
        let current = shining.is_some_and(|s| s.message.as_deref() == Some(spec.message.as_str()));
        let delete = || shining.map(|s| BeaconAction::DeleteConfigMap(s.uid.clone()));
        if world.deleting {
            return match state {
                Finalized => Decision::stay("Finalized", "nothing left"),
                Finalizing if shining.is_none() => {
                    Decision::go(Finalized, "CleanedUp", "the ConfigMap is gone")
                }
                Finalizing => {
                    Decision::stay("DeletingConfigMap", "waiting for the ConfigMap to go")
                        .with_actions(delete())
                }
                _ => Decision::go(Finalizing, "Deleting", "the beacon is deleted")
                    .with_actions(delete()),
            };
        }
        let apply = [BeaconAction::ApplyConfigMap];
        match state {
            Creating if current => {
                Decision::go(Ready, "ConfigMapReady", "the ConfigMap holds the message")
            }
            Creating => {
                Decision::stay("CreatingConfigMap", "writing the ConfigMap").with_actions(apply)
            }
            Ready if current => Decision::stay("Shining", "the ConfigMap holds the message"),
            Ready => {
                Decision::go(Updating, "SpecChanged", "the message changed").with_actions(apply)
            }
            Updating if current => {
                Decision::go(Ready, "Updated", "the ConfigMap holds the new message")
            }
            Updating => {
                Decision::stay("UpdatingConfigMap", "rewriting the ConfigMap").with_actions(apply)
            }
            Finalizing | Finalized => Decision::stay("Finalizing", "the beacon is going away"),
        }
    }

    fn is_ready(state: &BeaconState) -> bool {
        *state == BeaconState::Ready
    }

    fn finalized(state: &BeaconState) -> bool {
        *state == BeaconState::Finalized
    }

    fn deadline(state: &BeaconState) -> Deadline {
        match state {
            BeaconState::Ready | BeaconState::Finalized => Deadline::None,
            _ => Deadline::minutes(5, "fix what refuses the ConfigMap"),
        }
    }
}

fn config_map_name(beacon: &Beacon) -> String {
    format!("{}-beacon", beacon.name_any())
}

impl Operator for BeaconMachine {
    type Resource = Beacon;
    const KIND_LABEL: &'static str = "beacon";

    fn spec(beacon: &Beacon) -> BeaconSpec {
        beacon.spec.clone()
    }

    fn engine_status(beacon: &Beacon) -> EngineStatus<BeaconState> {
        beacon
            .status
            .as_ref()
            .map(|s| s.engine.clone())
            .unwrap_or_default()
    }

    fn observe(beacon: &Beacon, _state: Option<&BeaconState>, cache: &Cache) -> Option<Shining> {
        let name = config_map_name(beacon);
        Cache::owned_by(&cache.configmaps, beacon, Self::KIND_LABEL)
            .into_iter()
            .find(|cm| cm.name_any() == name)
            .map(|cm| Shining {
                uid: cm.uid().unwrap_or_default(),
                message: cm.data.as_ref().and_then(|d| d.get("message").cloned()),
            })
    }

    fn render(beacon: &Beacon, action: &BeaconAction) -> Result<Vec<Op>, Error> {
        if beacon.spec.message.starts_with('!') {
            return Err(Error::Render(format!(
                "a message may not start with '!' (the spec of {})",
                beacon.name_any()
            )));
        }
        let name = config_map_name(beacon);
        Ok(vec![match action {
            BeaconAction::ApplyConfigMap => Op::apply(&ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name),
                    labels: Some(BTreeMap::from([
                        (
                            labels::MANAGED_BY.to_owned(),
                            labels::MANAGED_BY_VALUE.to_owned(),
                        ),
                        (labels::NAME.to_owned(), Self::KIND_LABEL.to_owned()),
                        (labels::INSTANCE.to_owned(), beacon.name_any()),
                    ])),
                    owner_references: beacon.controller_owner_ref(&()).map(|r| vec![r]),
                    ..ObjectMeta::default()
                },
                data: Some(BTreeMap::from([(
                    "message".to_owned(),
                    beacon.spec.message.clone(),
                )])),
                ..ConfigMap::default()
            })?,
            BeaconAction::DeleteConfigMap(uid) => Op::delete::<ConfigMap>(name, uid.clone()),
        }])
    }

    fn status(
        beacon: &Beacon,
        engine: EngineStatus<BeaconState>,
        _state: Option<&BeaconState>,
        observed: &Option<Shining>,
        _now: chrono::DateTime<chrono::Utc>,
    ) -> serde_json::Value {
        let status = BeaconStatus {
            engine,
            config_map: observed.as_ref().map(|_| config_map_name(beacon)),
        };
        serde_json::to_value(status).unwrap_or_default()
    }
}

// ---------------------------------------------------------------- the probe

/// What the hooks counted so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Counts {
    started: u64,
    finished: u64,
    idle: u64,
    transitions: Vec<(String, String, String)>,
}

/// Hooks that publish [`Counts`] on a watch channel, so the test can wait for them.
struct Probe(watch::Sender<Counts>);

impl DriverHooks for Probe {
    fn reconcile_started(&self, _: &Target<'_>) {
        self.0.send_modify(|c| c.started += 1);
    }

    fn reconcile_finished(&self, _: &Target<'_>, _: Duration, finished: Finished) {
        self.0.send_modify(|c| {
            c.finished += 1;
            if finished == Finished::Idle {
                c.idle += 1;
            }
        });
    }

    fn transitioned(&self, _: &Target<'_>, from: &str, to: &str, reason: &str) {
        self.0.send_modify(|c| {
            c.transitions
                .push((from.to_owned(), to.to_owned(), reason.to_owned()))
        });
    }
}

// ---------------------------------------------------------------- the world

/// A namespace with the Beacon operator running in it, counted.
struct BeaconWorld {
    env: Env,
    requests: RequestLog,
    counts: watch::Receiver<Counts>,
    force: mpsc::UnboundedSender<()>,
    operator: InProcessOperator,
    beacons: Api<Beacon>,
}

impl BeaconWorld {
    async fn start(prefix: &str) -> Self {
        let mut env = Env::new(prefix).await;
        env.ns.track::<Beacon>();
        install_crd_of::<Beacon>(&env.client).await;
        let requests = RequestLog::default();
        let counted = counted_client(&requests).await;
        let (probe, counts) = watch::channel(Counts::default());
        let (force, forced) = mpsc::unbounded();
        let config = driver::Config::namespaced(env.namespace())
            .hooks(Probe(probe))
            .reconcile_all_on(forced);
        let operator = InProcessOperator::start::<BeaconMachine>(counted, config);
        let beacons = env.api::<Beacon>();
        Self {
            env,
            requests,
            counts,
            force,
            operator,
            beacons,
        }
    }

    /// Wait until the hooks' counts satisfy `condition`.
    async fn until(&mut self, what: &str, condition: impl FnMut(&Counts) -> bool) -> Counts {
        let waited = match tokio::time::timeout(DEADLINE, self.counts.wait_for(condition)).await {
            Ok(Ok(counts)) => Some(counts.clone()),
            Ok(Err(_)) => panic!("the operator stopped while waiting for {what}"),
            Err(_) => None,
        };
        waited.unwrap_or_else(|| {
            panic!(
                "timed out after {DEADLINE:?} waiting for {what}; counts: {:?}",
                *self.counts.borrow()
            )
        })
    }

    /// Wait until no reconcile is running.
    async fn settled(&mut self) -> Counts {
        self.until("reconciles to finish", |c| c.started == c.finished)
            .await
    }

    fn transitions(&self) -> usize {
        self.counts.borrow().transitions.len()
    }

    async fn create(&self, name: &str, message: &str) -> Beacon {
        let beacon = Beacon::new(
            name,
            BeaconSpec {
                message: message.into(),
            },
        );
        self.beacons
            .create(&PostParams::default(), &beacon)
            .await
            .expect("the beacon is created")
    }

    /// Wait until `name` is Ready for its current generation.
    async fn ready(&self, name: &str, generation: i64) -> Beacon {
        wait_for(
            &self.beacons,
            name,
            "the beacon to be Ready",
            move |b: Option<&Beacon>| {
                b.and_then(|b| b.status.as_ref()).is_some_and(|s| {
                    s.engine.phase.as_deref() == Some("Ready")
                        && s.engine.observed_generation == Some(generation)
                })
            },
        )
        .await
        .expect("the beacon exists")
    }

    /// The status writes to `name` among `requests`.
    fn status_writes(&self, name: &str, since: usize) -> Vec<String> {
        let path = format!("/beacons/{name}/status");
        self.requests
            .since(since)
            .iter()
            .filter(|r| r.is_status_write() && r.path.ends_with(&path))
            .map(ToString::to_string)
            .collect()
    }

    async fn finish(self) {
        self.operator.stop().await;
        self.env.finish().await;
    }
}

fn history(beacon: &Beacon) -> Vec<(String, String, String)> {
    let machine = beacon
        .status
        .as_ref()
        .and_then(|s| s.engine.machine.as_ref())
        .map(RawRecord::to_value)
        .unwrap_or_default();
    machine["history"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .map(|e| {
                    let field = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
                    (field("from"), field("to"), field("reason"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn entry(from: &str, to: &str, reason: &str) -> (String, String, String) {
    (from.to_owned(), to.to_owned(), reason.to_owned())
}

fn condition<'a>(beacon: &'a Beacon, type_: &str) -> &'a lockstep::engine::Condition {
    beacon
        .status
        .as_ref()
        .and_then(|s| s.engine.condition(type_))
        .unwrap_or_else(|| panic!("the status has a {type_} condition: {:?}", beacon.status))
}

// ---------------------------------------------------------------- the tests

#[tokio::test]
async fn creating_a_beacon_writes_status_once_to_initialize_and_once_per_transition() {
    let mut world = BeaconWorld::start("requests-create").await;
    let mark = world.requests.mark();
    world.create("b", "hello").await;
    world.ready("b", 1).await;
    world.settled().await;

    assert_eq!(world.transitions(), 1, "one transition: Creating -> Ready");
    let writes = world.status_writes("b", mark);
    assert_eq!(
        writes.len(),
        2,
        "one write for the initial state, one for the transition: {writes:#?}"
    );
    let finalizer_patches: Vec<_> = world
        .requests
        .since(mark)
        .into_iter()
        .filter(|r| r.method == http::Method::PATCH && r.path.ends_with("/beacons/b"))
        .collect();
    assert_eq!(
        finalizer_patches.len(),
        1,
        "one patch adds the finalizer: {finalizer_patches:#?}"
    );
    world.finish().await;
}

#[tokio::test]
async fn an_idle_reconcile_makes_no_mutating_request() {
    let mut world = BeaconWorld::start("requests-idle").await;
    world.create("b", "hello").await;
    world.ready("b", 1).await;
    let settled = world.settled().await;

    let mark = world.requests.mark();
    for forced in 1..=5 {
        world
            .force
            .unbounded_send(())
            .expect("the operator listens");
        world
            .until("a forced reconcile to finish", |c| {
                c.finished >= settled.finished + forced
            })
            .await;
    }
    let after = world.settled().await;

    assert!(
        after.idle >= settled.idle + 5,
        "the forced reconciles were idle: {after:?}"
    );
    let requests: Vec<String> = world
        .requests
        .since(mark)
        .into_iter()
        .filter(|r| !r.is_watch())
        .map(|r| r.to_string())
        .collect();
    assert_eq!(
        requests,
        Vec::<String>::new(),
        "idle reconciles make no request at all, mutating or not"
    );
    world.finish().await;
}

#[tokio::test]
async fn a_spec_change_makes_exactly_one_status_write_per_transition() {
    let mut world = BeaconWorld::start("requests-update").await;
    world.create("b", "hello").await;
    world.ready("b", 1).await;
    world.settled().await;
    let before = world.transitions();

    let mark = world.requests.mark();
    let patch = serde_json::json!({"spec": {"message": "world"}});
    world
        .beacons
        .patch("b", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("the message is changed");
    let beacon = world.ready("b", 2).await;
    world.settled().await;

    assert_eq!(
        world.transitions() - before,
        2,
        "Ready -> Updating -> Ready"
    );
    let writes = world.status_writes("b", mark);
    assert_eq!(
        writes.len(),
        2,
        "one status write per transition: {writes:#?}"
    );
    let tail: Vec<_> = history(&beacon).into_iter().rev().take(2).rev().collect();
    assert_eq!(
        tail,
        [
            entry("Ready", "Updating", "SpecChanged"),
            entry("Updating", "Ready", "Updated")
        ]
    );
    let cm = world
        .env
        .api::<ConfigMap>()
        .get("b-beacon")
        .await
        .expect("the ConfigMap exists");
    assert_eq!(
        cm.data.and_then(|d| d.get("message").cloned()).as_deref(),
        Some("world")
    );
    world.finish().await;
}

#[tokio::test]
async fn deleting_a_beacon_writes_status_once_per_transition_then_releases_the_finalizer() {
    let mut world = BeaconWorld::start("requests-delete").await;
    let beacon = world.create("b", "hello").await;
    world.ready("b", 1).await;
    world.settled().await;
    let before = world.transitions();
    let cm = world
        .env
        .api::<ConfigMap>()
        .get("b-beacon")
        .await
        .expect("the ConfigMap exists");

    let mark = world.requests.mark();
    world
        .beacons
        .delete("b", &DeleteParams::default())
        .await
        .expect("the beacon is deleted");
    wait_gone(
        &world.beacons,
        "b",
        &beacon.uid().unwrap_or_default(),
        "the beacon to be finalized",
    )
    .await;
    wait_gone(
        &world.env.api::<ConfigMap>(),
        "b-beacon",
        &cm.uid().unwrap_or_default(),
        "the ConfigMap to be deleted",
    )
    .await;
    world.settled().await;

    let transitions: Vec<_> = world.counts.borrow().transitions[before..].to_vec();
    assert_eq!(
        transitions,
        [
            entry("Ready", "Finalizing", "Deleting"),
            entry("Finalizing", "Finalized", "CleanedUp")
        ]
    );
    let writes = world.status_writes("b", mark);
    assert_eq!(
        writes.len(),
        2,
        "one status write per transition: {writes:#?}"
    );
    world.finish().await;
}

#[tokio::test]
async fn the_status_carries_observed_generation_conditions_and_history() {
    let mut world = BeaconWorld::start("requests-status").await;
    world.create("b", "hello").await;
    let beacon = world.ready("b", 1).await;
    world.settled().await;

    let status = beacon.status.clone().expect("a status");
    assert_eq!(status.engine.observed_generation, beacon.meta().generation);
    assert_eq!(
        status.config_map.as_deref(),
        Some("b-beacon"),
        "the kind's own projection"
    );
    assert_eq!(condition(&beacon, conditions::READY).status, "True");
    assert_eq!(condition(&beacon, conditions::PROGRESSING).status, "False");
    assert_eq!(condition(&beacon, conditions::DEGRADED).status, "False");
    assert_eq!(
        history(&beacon),
        [
            entry("", "Creating", "Initialized"),
            entry("Creating", "Ready", "ConfigMapReady")
        ]
    );
    let events = crate::support::events_about(&world.env.client, world.env.namespace(), "b").await;
    let reasons: Vec<_> = events.iter().filter_map(|e| e.reason.clone()).collect();
    assert_eq!(
        reasons,
        ["Initialized", "ConfigMapReady"],
        "one event per recorded step"
    );
    world.finish().await;
}

fn last_error(beacon: &Beacon) -> Option<String> {
    let machine = beacon
        .status
        .as_ref()
        .and_then(|s| s.engine.machine.as_ref())
        .map(RawRecord::to_value)?;
    machine["lastError"].as_str().map(str::to_owned)
}

#[tokio::test]
async fn a_failing_reconcile_records_its_error_and_the_next_transition_clears_it() {
    let mut world = BeaconWorld::start("requests-error").await;
    world.create("b", "hello").await;
    world.ready("b", 1).await;
    world.settled().await;

    let patch = serde_json::json!({"spec": {"message": "!bad"}});
    world
        .beacons
        .patch("b", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("the message is changed");
    let failed = wait_for(
        &world.beacons,
        "b",
        "lastError to be recorded",
        |b: Option<&Beacon>| {
            b.and_then(last_error)
                .is_some_and(|e| e.contains("may not start with '!'"))
        },
    )
    .await
    .expect("the beacon exists");
    assert_eq!(
        failed
            .status
            .as_ref()
            .and_then(|s| s.engine.phase.as_deref()),
        Some("Ready"),
        "nothing was persisted but the error"
    );

    let patch = serde_json::json!({"spec": {"message": "fixed"}});
    world
        .beacons
        .patch("b", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("the message is fixed");
    let fixed = world.ready("b", 3).await;
    assert_eq!(last_error(&fixed), None, "a transition clears lastError");
    world.finish().await;
}

#[tokio::test]
async fn writes_fenced_on_a_stale_resource_version_are_refused_as_conflicts() {
    let mut world = BeaconWorld::start("requests-fence").await;
    world.create("b", "hello").await;
    let stale = world.ready("b", 1).await;
    world.settled().await;
    // Someone else changes the object: what we read is now stale.
    let patch = serde_json::json!({"metadata": {"annotations": {"touched": "yes"}}});
    world
        .beacons
        .patch("b", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("the beacon is annotated");

    let status = lockstep::driver::status::fenced_status_patch(
        &stale.resource_version().unwrap_or_default(),
        serde_json::json!({"phase": "Bogus"}),
    );
    let written =
        lockstep::driver::execute::write_status(&world.beacons, "b", &status, "lockstep").await;
    assert!(
        matches!(written, Err(Error::Conflict)),
        "a stale status write is a conflict: {written:?}"
    );

    let removed = lockstep::driver::execute::remove_finalizer(
        &world.beacons,
        &stale,
        "lockstep.dev/finalizer",
    )
    .await;
    assert!(
        matches!(removed, Err(Error::Conflict)),
        "a stale finalizer removal is a conflict: {removed:?}"
    );

    let mut unfinalized = stale.clone();
    unfinalized.metadata.finalizers = None;
    let added = lockstep::driver::execute::add_finalizer(
        &world.beacons,
        &unfinalized,
        "lockstep.dev/other",
    )
    .await;
    assert!(
        matches!(added, Err(Error::Conflict)),
        "a stale finalizer addition is a conflict: {added:?}"
    );

    let now = world.beacons.get("b").await.expect("the beacon exists");
    assert_eq!(
        now.status.and_then(|s| s.engine.phase),
        Some("Ready".to_owned()),
        "nothing stale was written"
    );
    assert_eq!(
        now.metadata.finalizers,
        Some(vec!["lockstep.dev/finalizer".to_owned()])
    );
    world.finish().await;
}
