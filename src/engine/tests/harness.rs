//! The model-checking harness against the toy machine: it passes a correct machine with
//! deadlines and requeues, and reports a machine that attempts an undeclared edge and a
//! world in which the machine cannot converge.

use proptest::prelude::*;

use super::toy::{Misbehave, Toy, ToyAction, ToyObserved, ToySpec, ToyState};
use crate::engine::check::{CheckConfig, WorldModel, check_machine, try_check_machine};

/// A scalable set of pods. `MISBEHAVE` makes the spec ask the toy to take an undeclared
/// edge; `SETTLES` is false for a world in which pods never become ready.
#[derive(Debug, Clone)]
struct Cluster<const MISBEHAVE: bool, const SETTLES: bool> {
    /// `spec.replicas`.
    replicas: u32,
    /// The scale last applied.
    scaled_to: u32,
    /// Ready pods, at most `scaled_to`.
    ready: u32,
    /// The pods' StatefulSet was deleted by the cleanup: a later scale (a patch of its
    /// `scale` subresource, from a reconcile that read a stale view) finds nothing.
    cleaned: bool,
}

#[derive(Debug, Clone, Copy)]
enum ClusterMove {
    PodReady,
    PodLost,
}

impl<const MISBEHAVE: bool, const SETTLES: bool> WorldModel<Toy> for Cluster<MISBEHAVE, SETTLES> {
    type Move = ClusterMove;
    type Edit = u32;

    fn initial() -> BoxedStrategy<Self> {
        (1u32..4)
            .prop_map(|replicas| Cluster {
                replicas,
                scaled_to: 0,
                ready: 0,
                cleaned: false,
            })
            .boxed()
    }

    fn spec(&self) -> ToySpec {
        ToySpec {
            replicas: self.replicas,
            misbehave: if MISBEHAVE {
                Misbehave::WrongKind
            } else {
                Misbehave::No
            },
        }
    }

    fn spec_edits() -> BoxedStrategy<u32> {
        (1u32..4).boxed()
    }

    fn edit_spec(&mut self, replicas: &u32) {
        self.replicas = *replicas;
    }

    fn observe(&self) -> ToyObserved {
        ToyObserved {
            ready: self.ready,
            scaled: Some(self.scaled_to),
        }
    }

    fn apply(&mut self, action: &ToyAction) {
        match action {
            ToyAction::Scale(n) if !self.cleaned => self.scaled_to = *n,
            ToyAction::Scale(_) => {}
            ToyAction::Cleanup => {
                self.scaled_to = 0;
                self.cleaned = true;
            }
        }
        self.ready = self.ready.min(self.scaled_to);
    }

    fn environment_moves() -> BoxedStrategy<ClusterMove> {
        prop_oneof![Just(ClusterMove::PodReady), Just(ClusterMove::PodLost)].boxed()
    }

    fn step_environment(&mut self, mv: &ClusterMove) {
        match mv {
            ClusterMove::PodReady => self.ready = (self.ready + 1).min(self.scaled_to),
            ClusterMove::PodLost => self.ready = self.ready.saturating_sub(1),
        }
    }

    fn invariants(&self, state: &ToyState) -> Result<(), String> {
        if self.ready > self.scaled_to {
            return Err(format!("{} ready of {} pods", self.ready, self.scaled_to));
        }
        match state {
            ToyState::Gone if self.scaled_to > 0 => {
                Err(format!("finalized with {} pods left", self.scaled_to))
            }
            _ => Ok(()),
        }
    }

    fn converged(&self, state: &ToyState) -> bool {
        *state
            == ToyState::Running {
                replicas: self.replicas,
            }
            && self.ready == self.replicas
    }

    fn settle(&mut self) {
        if SETTLES {
            self.ready = self.scaled_to;
        }
    }
}

fn config() -> CheckConfig {
    CheckConfig {
        cases: 128,
        ..CheckConfig::default()
    }
}

#[test]
fn a_correct_machine_with_deadlines_and_requeues_passes_the_model_check() {
    let report = check_machine::<Toy, Cluster<false, true>>(config());
    assert!(report.unexercised.is_empty(), "{report}");
}

#[test]
fn the_model_check_reports_a_machine_that_attempts_an_undeclared_transition() {
    let failure = try_check_machine::<Toy, Cluster<true, true>>(&config())
        .expect_err("the undeclared edge is reported");
    assert!(
        failure
            .reason
            .contains("UndeclaredTransition: refused undeclared transition Running -> Gone"),
        "{failure}"
    );
    assert!(failure.events.len() <= 2, "{failure}");
}

#[test]
fn the_model_check_reports_a_machine_that_cannot_converge() {
    let failure = try_check_machine::<Toy, Cluster<false, false>>(&config())
        .expect_err("no convergence without ready pods");
    assert!(
        failure
            .reason
            .contains("did not converge within 64 reconciles"),
        "{failure}"
    );
    assert!(failure.events.is_empty(), "{failure}");
}
