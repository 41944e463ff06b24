//! The model check: the machine against a simulated namespace, under every fault the
//! engine's checker injects ([`lockstep::engine::check`]), and a planted bug the checker
//! must find.
//!
//! The world: a StatefulSet controller that creates missing pods, removes extra ones
//! and replaces an outdated pod one at a time (each a separate move), pods that become
//! Ready (unless their template is broken) or flake back to not Ready, a garbage
//! collector that removes the pods of a deleted StatefulSet (until it does, a new set
//! of the same name cannot create a pod of that name), and someone deleting the
//! Service. Crashes, stale caches, 409s, lost writes, failing actions, spec edits,
//! deletion and the clock come from the checker.
//!
//! Invariant, after every event: **the stable StatefulSet only ever gets a template
//! whose canary pod was Ready** (or the first one, created before anything served).
//! The broken template's pods are never Ready, so it never reaches a stable pod.
//!
//! Assumption: the first template is a working one (an edit to the broken template
//! before the stable set exists is a no-op): a first rollout has nothing to roll back
//! to, and stays in `Creating` (reported by its deadline) until fixed by hand.

use std::collections::BTreeSet;
use std::fmt;

use lockstep::engine::check::proptest::prelude::*;
use lockstep::engine::check::{
    CheckConfig, Event, Reconcile, Scenario, WorldModel, assert_every_edge_taken, check_machine,
    try_check_machine,
};
use lockstep::engine::planted::{Bug, Planted};
use lockstep::engine::{Decision, Machine};

use crate::actions::CanaryAction;
use crate::api::{CanaryAppSpec, CanaryPolicy, Template};
use crate::machine::CanaryRollout;
use crate::observe::{Observed, PodView, SetView};
use crate::render::Track;
use crate::state::CanaryState;

/// The templates a spec edit picks from; the last one's pods are never Ready.
const IMAGES: [&str; 3] = ["app:1", "app:2", "app:3-broken"];

fn template(i: usize) -> Template {
    Template {
        image: IMAGES[i % IMAGES.len()].to_owned(),
        labels: Default::default(),
    }
}

fn broken(template: &Template) -> bool {
    template.image.ends_with("-broken")
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Set {
    uid: u64,
    template: Template,
    replicas: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pod {
    track: Track,
    ordinal: i32,
    /// The StatefulSet that made it.
    owner: u64,
    template: Template,
    ready: bool,
}

/// The simulated namespace of one `CanaryApp`.
#[derive(Clone)]
pub(crate) struct Cluster {
    spec: CanaryAppSpec,
    stable: Option<Set>,
    canary: Option<Set>,
    pods: Vec<Pod>,
    service: bool,
    /// Revisions whose canary pod was Ready, and the first stable one.
    proven: BTreeSet<String>,
    next_uid: u64,
    /// What broke the invariant, when something did.
    violation: Option<String>,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |s: &Option<Set>| {
            s.as_ref().map_or("-".to_owned(), |s| {
                format!("{}x{}", s.template.image, s.replicas)
            })
        };
        let pods: Vec<String> = self
            .pods
            .iter()
            .map(|p| {
                let track = if p.track == Track::Stable { "s" } else { "c" };
                let ready = if p.ready { "R" } else { "-" };
                format!("{track}{}:{}{ready}", p.ordinal, p.template.image)
            })
            .collect();
        write!(
            f,
            "spec {}x{}, stable {}, canary {}, pods [{}]{}",
            self.spec.template.image,
            self.spec.replicas,
            set(&self.stable),
            set(&self.canary),
            pods.join(" "),
            if self.service { "" } else { ", no Service" }
        )
    }
}

/// What happens in the namespace on its own.
#[derive(Debug, Clone)]
pub(crate) enum Move {
    /// The StatefulSet controller takes one step for each set.
    Controller,
    /// Pod `n` (modulo the pods) becomes Ready, unless its template is broken.
    PodReady(u8),
    /// Pod `n` stops being Ready.
    PodFlakes(u8),
    /// The garbage collector removes the pods of deleted StatefulSets.
    Collect,
    /// Someone deletes the Service.
    DeleteService,
}

/// A change the user makes.
#[derive(Debug, Clone)]
pub(crate) enum Edit {
    /// `spec.template` gets this image.
    Template(&'static str),
    /// `spec.replicas` becomes `n`.
    Replicas(i32),
}

impl Cluster {
    fn new(replicas: i32) -> Self {
        Self {
            spec: CanaryAppSpec {
                replicas,
                template: template(0),
                canary: CanaryPolicy::default(),
            },
            stable: None,
            canary: None,
            pods: Vec::new(),
            service: false,
            proven: BTreeSet::new(),
            next_uid: 1,
            violation: None,
        }
    }

    fn set_mut(&mut self, track: Track) -> &mut Option<Set> {
        match track {
            Track::Stable => &mut self.stable,
            Track::Canary => &mut self.canary,
        }
    }

    /// Create or update the set of `track`.
    fn apply_set(&mut self, track: Track, template: &Template, replicas: i32) {
        let uid = self.next_uid;
        let set = self.set_mut(track);
        match set {
            Some(s) => {
                s.template = template.clone();
                s.replicas = replicas;
            }
            None => {
                *set = Some(Set {
                    uid,
                    template: template.clone(),
                    replicas,
                });
                self.next_uid += 1;
            }
        }
    }

    /// One step of the StatefulSet controller for `track`: remove a pod beyond the
    /// replicas, create the missing ones, replace the highest outdated one. Whether it
    /// changed anything.
    fn controller(&mut self, track: Track) -> bool {
        let Some(set) = self.set_mut(track).clone() else {
            return false;
        };
        let before = self.pods.clone();
        self.pods
            .retain(|p| !(p.owner == set.uid && p.ordinal >= set.replicas));
        for ordinal in 0..set.replicas {
            let taken = self
                .pods
                .iter()
                .any(|p| p.track == track && p.ordinal == ordinal);
            if !taken {
                self.pods.push(Pod {
                    track,
                    ordinal,
                    owner: set.uid,
                    template: set.template.clone(),
                    ready: false,
                });
            }
        }
        let outdated = self
            .pods
            .iter_mut()
            .filter(|p| p.owner == set.uid && p.template != set.template)
            .max_by_key(|p| p.ordinal);
        if let Some(pod) = outdated {
            pod.template = set.template.clone();
            pod.ready = false;
        }
        self.pods != before
    }

    /// Remove the pods whose StatefulSet is gone.
    fn collect(&mut self) {
        let live: Vec<u64> = [&self.stable, &self.canary]
            .into_iter()
            .flatten()
            .map(|s| s.uid)
            .collect();
        self.pods.retain(|p| live.contains(&p.owner));
    }

    fn make_ready(&mut self, i: usize) {
        let pod = &mut self.pods[i];
        if broken(&pod.template) {
            return;
        }
        pod.ready = true;
        if pod.track == Track::Canary {
            self.proven.insert(pod.template.revision());
        }
    }
}

/// Any machine with the canary's types runs in this world: the real one, and the one
/// with the planted bug.
impl<M> WorldModel<M> for Cluster
where
    M: Machine<
            Spec = CanaryAppSpec,
            State = CanaryState,
            Observed = Observed,
            Action = CanaryAction,
        >,
{
    type Move = Move;
    type Edit = Edit;

    fn initial() -> BoxedStrategy<Self> {
        (1..=3i32).prop_map(Cluster::new).boxed()
    }

    fn spec(&self) -> CanaryAppSpec {
        self.spec.clone()
    }

    fn spec_edits() -> BoxedStrategy<Edit> {
        prop_oneof![
            3 => (0..IMAGES.len()).prop_map(|i| Edit::Template(IMAGES[i])),
            1 => (1..=3i32).prop_map(Edit::Replicas),
        ]
        .boxed()
    }

    fn edit_spec(&mut self, edit: &Edit) {
        match edit {
            Edit::Template(image) => {
                let wanted = Template {
                    image: (*image).to_owned(),
                    labels: Default::default(),
                };
                if broken(&wanted) && self.stable.is_none() {
                    return; // The first template works (see the module's assumption).
                }
                self.spec.template = wanted;
            }
            Edit::Replicas(n) => self.spec.replicas = *n,
        }
    }

    fn observe(&self) -> Observed {
        let view = |s: &Option<Set>| {
            s.as_ref().map(|s| SetView {
                uid: s.uid.to_string(),
                template: s.template.clone(),
                replicas: s.replicas,
            })
        };
        Observed {
            stable: view(&self.stable),
            canary: view(&self.canary),
            pods: self
                .pods
                .iter()
                .map(|p| PodView {
                    track: p.track,
                    revision: p.template.revision(),
                    ready: p.ready,
                    terminating: false,
                })
                .collect(),
            service: self.service,
        }
    }

    fn apply(&mut self, action: &CanaryAction) {
        match action {
            CanaryAction::CreateStable { template, replicas } => {
                if self.stable.is_none() {
                    self.proven.insert(template.revision());
                    self.apply_set(Track::Stable, template, *replicas);
                }
            }
            CanaryAction::ApplyStable { template, replicas } => {
                if !self.proven.contains(&template.revision()) && self.violation.is_none() {
                    self.violation = Some(format!(
                        "the stable StatefulSet got {} although no canary pod of it was Ready",
                        template.image
                    ));
                }
                self.apply_set(Track::Stable, template, *replicas);
            }
            CanaryAction::ApplyCanary { template } => self.apply_set(Track::Canary, template, 1),
            CanaryAction::DeleteCanary { uid } => {
                if self
                    .canary
                    .as_ref()
                    .is_some_and(|s| s.uid.to_string() == *uid)
                {
                    self.canary = None;
                }
            }
            CanaryAction::ApplyService => self.service = true,
        }
    }

    fn environment_moves() -> BoxedStrategy<Move> {
        prop_oneof![
            4 => Just(Move::Controller),
            4 => (0..8u8).prop_map(Move::PodReady),
            1 => (0..8u8).prop_map(Move::PodFlakes),
            2 => Just(Move::Collect),
            1 => Just(Move::DeleteService),
        ]
        .boxed()
    }

    fn step_environment(&mut self, mv: &Move) {
        let pick = |n: u8, len: usize| (len > 0).then(|| usize::from(n) % len);
        match mv {
            Move::Controller => {
                self.controller(Track::Stable);
                self.controller(Track::Canary);
            }
            Move::PodReady(n) => {
                if let Some(i) = pick(*n, self.pods.len()) {
                    self.make_ready(i);
                }
            }
            Move::PodFlakes(n) => {
                if let Some(i) = pick(*n, self.pods.len()) {
                    self.pods[i].ready = false;
                }
            }
            Move::Collect => self.collect(),
            Move::DeleteService => self.service = false,
        }
    }

    fn invariants(&self, _state: &CanaryState) -> Result<(), String> {
        match &self.violation {
            Some(violation) => Err(violation.clone()),
            None => Ok(()),
        }
    }

    fn converged(&self, state: &CanaryState) -> bool {
        let CanaryState::Stable { stable, rejected } = state else {
            return false;
        };
        let o = <Self as WorldModel<M>>::observe(self);
        let wanted = self.spec.template.revision();
        o.stable_at_rest(stable, self.spec.replicas)
            && !o.canary_left()
            && o.service
            && (wanted == stable.revision() || rejected.as_deref() == Some(wanted.as_str()))
    }

    fn settle(&mut self) {
        self.collect();
        while self.controller(Track::Stable) | self.controller(Track::Canary) {}
        for i in 0..self.pods.len() {
            self.make_ready(i);
        }
    }
}

// ANCHOR: check
#[test]
fn the_canary_machine_is_safe_and_live_under_faults() {
    // Longer sequences than the default 40 events: a canary needs a template edit, the
    // StatefulSet controller, a Ready pod and the bake before its faults can bite.
    let config = CheckConfig {
        max_events: 80,
        ..CheckConfig::default()
    };
    let report = check_machine::<CanaryRollout, Cluster>(config.clone());
    assert_every_edge_taken::<CanaryRollout, Cluster>(&config, &report, scenarios());
}
// ANCHOR_END: check

/// Fixed sequences for the edges generated ones seldom take: deletion in the middle of
/// a canary, of a promotion and of a rollback.
fn scenarios() -> Vec<Scenario<Cluster, Move, Edit>> {
    use Event::{Delete, Edit as Change, Env, Tick};
    let reconcile = || Event::Reconcile(Reconcile::FRESH);
    // Created, Stable at app:1 with one pod, then app:2 (or the broken one) canaried.
    let canary_of = |image: &'static str| {
        vec![
            reconcile(),
            reconcile(),
            Env(Move::Controller),
            Env(Move::PodReady(0)),
            reconcile(),
            Change(Edit::Template(image)),
            reconcile(),
            Env(Move::Controller),
        ]
    };
    let deleted = |mut events: Vec<Event<Move, Edit>>| {
        events.extend([Delete, reconcile()]);
        events
    };
    let mut promoting = canary_of("app:2");
    promoting.extend([Env(Move::PodReady(1)), reconcile(), Tick(60), reconcile()]);
    let mut rolling_back = canary_of("app:3-broken");
    rolling_back.extend([Tick(300), reconcile()]);
    vec![
        (
            "Canary -> Deleted (DeleteRequested)",
            Cluster::new(1),
            deleted(canary_of("app:2")),
        ),
        (
            "Promoting -> Deleted (DeleteRequested)",
            Cluster::new(1),
            deleted(promoting),
        ),
        (
            "RollingBack -> Deleted (DeleteRequested)",
            Cluster::new(1),
            deleted(rolling_back),
        ),
    ]
}

// ANCHOR: planted
/// The planted bug: the rollback forgets its verdict. The canary is removed, but the
/// failed revision is not recorded in `Stable { rejected }`, so the next reconcile
/// starts a canary of the same broken template again, and again.
struct ForgetTheVerdict;

impl Bug<CanaryRollout> for ForgetTheVerdict {
    const NAME: &'static str = "canaryapp-forget-the-verdict";

    fn alter(
        _state: &CanaryState,
        decision: Decision<CanaryState, CanaryAction>,
    ) -> Decision<CanaryState, CanaryAction> {
        match decision {
            Decision::Go {
                to:
                    CanaryState::Stable {
                        stable,
                        rejected: Some(_),
                    },
                reason,
                message,
                actions,
            } => {
                let to = CanaryState::Stable {
                    stable,
                    rejected: None,
                };
                Decision::Go {
                    to,
                    reason,
                    message,
                    actions,
                }
            }
            other => other,
        }
    }
}

#[test]
fn the_checker_finds_a_rollback_that_forgets_its_verdict_and_shrinks_it() {
    let found = try_check_machine::<Planted<CanaryRollout, ForgetTheVerdict>, Cluster>(
        &CheckConfig::default(),
    )
    .expect_err("the checker finds the planted bug");
    println!("{found}");
    assert!(
        found.reason.contains("did not converge"),
        "{}",
        found.reason
    );
    assert!(
        found.events.len() <= 4,
        "shrunk to a handful of events: {:#?}",
        found.events
    );
    assert!(
        found.events.iter().any(|e| e.contains("app:3-broken")),
        "the counterexample asks for the broken template: {:#?}",
        found.events
    );
}
// ANCHOR_END: planted
