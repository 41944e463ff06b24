//! The model-checking harness against a rolling restart over three pods, in a correct
//! variant and in one with a planted bug.
//!
//! The user requests a restart round by bumping `spec.epoch`; the machine replaces the
//! pods one ordinal at a time, and the StatefulSet controller (the world) recreates each
//! deleted pod under a new UID.
//!
//! - [`Correct`] records the pod's UID in its state (`victim`) *before* deleting, and then
//!   deletes with that UID as a precondition, so a repeated or stale delete is a no-op.
//! - [`Buggy`] deletes by name in the same step that records the victim. When the status
//!   write after the delete is lost, the next reconcile decides the same thing again and
//!   deletes the pod the StatefulSet controller just recreated.
//!
//! The world's invariant: no ordinal is successfully deleted twice in one restart round.
//! (Convergence only asks for rest in the requested round with every pod ready; it does
//! not ask that each pod was actually recycled.)

use std::collections::BTreeMap;
use std::fmt;

use proptest::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use strum::{EnumDiscriminants, EnumIter, IntoStaticStr};

use crate::engine::check::{CheckConfig, WorldModel, check_machine, try_check_machine};
use crate::engine::{Deadline, Decision, Edge, Machine, World};

/// The pods the machine restarts.
const PODS: u8 = 3;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, EnumDiscriminants)]
#[strum_discriminants(name(RestartKind), derive(IntoStaticStr, EnumIter))]
#[serde(tag = "name", rename_all_fields = "camelCase")]
pub(super) enum Restart {
    /// At rest after the round `epoch`.
    Idle { epoch: u32 },
    /// Replacing pod `ordinal` for round `epoch`; `victim` is the UID being replaced.
    Restarting {
        epoch: u32,
        ordinal: u8,
        victim: Option<u64>,
    },
    /// Deleted; nothing to clean up (pods are garbage-collected through owner references).
    Released,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct RestartSpec {
    epoch: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PodView {
    uid: u64,
    ready: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum PodAction {
    /// Delete pod `ordinal` (only if it still has `uid`, when given) for restart `round`.
    Delete {
        ordinal: u8,
        uid: Option<u64>,
        round: u32,
    },
}

pub(super) struct RollingRestart<const UID_PRECONDITION: bool>;
pub(super) type Correct = RollingRestart<true>;
pub(super) type Buggy = RollingRestart<false>;

const RESTART_REQUESTED: &str = "RestartRequested";
const VICTIM_CHOSEN: &str = "VictimChosen";
const POD_REPLACED: &str = "PodReplaced";
const RESTART_COMPLETE: &str = "RestartComplete";
const DELETE_REQUESTED: &str = "DeleteRequested";

static TABLE: &[Edge<RestartKind>] = crate::edges![RestartKind;
    Idle -> Restarting: RESTART_REQUESTED, "spec.epoch is ahead of the last round", file!();
    Restarting -> {
        Restarting: VICTIM_CHOSEN, "the pod at the ordinal is ready; its UID is recorded", file!();
        Restarting: POD_REPLACED, "a ready pod with a new UID replaced the victim", file!();
        Idle: RESTART_COMPLETE, "the last ordinal was replaced", file!();
    }
    [Idle, Restarting] -> Released: DELETE_REQUESTED, "deleted", file!();
];

impl<const UID_PRECONDITION: bool> Machine for RollingRestart<UID_PRECONDITION> {
    const NAME: &'static str = if UID_PRECONDITION {
        "rolling-restart"
    } else {
        "rolling-restart-buggy"
    };
    type Spec = RestartSpec;
    type State = Restart;
    type Kind = RestartKind;
    type Observed = Vec<Option<PodView>>;
    type Action = PodAction;

    fn initial() -> Restart {
        Restart::Idle { epoch: 0 }
    }

    fn table() -> &'static [Edge<RestartKind>] {
        TABLE
    }

    fn decide(
        spec: &RestartSpec,
        state: &Restart,
        world: &World<Vec<Option<PodView>>>,
    ) -> Decision<Restart, PodAction> {
        if world.deleting {
            return match state {
                Restart::Released => Decision::stay("Released", "deleted"),
                _ => Decision::go(Restart::Released, DELETE_REQUESTED, "deleted"),
            };
        }
        let (epoch, ordinal, victim) = match *state {
            Restart::Idle { epoch } if spec.epoch > epoch => {
                return Decision::go(
                    Restart::Restarting {
                        epoch: spec.epoch,
                        ordinal: 0,
                        victim: None,
                    },
                    RESTART_REQUESTED,
                    format!("restart round {}", spec.epoch),
                );
            }
            Restart::Idle { epoch } => {
                return Decision::stay("Serving", format!("round {epoch} done"));
            }
            Restart::Released => return Decision::stay("Released", "deleted"),
            Restart::Restarting {
                epoch,
                ordinal,
                victim,
            } => (epoch, ordinal, victim),
        };
        let pod = world.observed.get(usize::from(ordinal)).copied().flatten();
        match (victim, pod) {
            (None, Some(pod)) if pod.ready => {
                let next = Restart::Restarting {
                    epoch,
                    ordinal,
                    victim: Some(pod.uid),
                };
                let message = format!("pod-{ordinal} (uid {}) is next", pod.uid);
                if UID_PRECONDITION {
                    // Record the UID first; delete it on the next reconcile.
                    Decision::go(next, VICTIM_CHOSEN, message)
                } else {
                    // The planted bug: delete by name, before the choice is persisted.
                    Decision::go(next, VICTIM_CHOSEN, message).with_actions([PodAction::Delete {
                        ordinal,
                        uid: None,
                        round: epoch,
                    }])
                }
            }
            (None, _) => Decision::stay("WaitingForPod", format!("pod-{ordinal} is not ready")),
            (Some(uid), Some(pod)) if pod.uid == uid => {
                if UID_PRECONDITION {
                    Decision::stay("DeletingPod", format!("deleting pod-{ordinal} (uid {uid})"))
                        .with_actions([PodAction::Delete {
                            ordinal,
                            uid: Some(uid),
                            round: epoch,
                        }])
                } else {
                    Decision::stay("WaitingForDeletion", format!("pod-{ordinal} (uid {uid})"))
                }
            }
            (Some(_), Some(pod)) if pod.ready => {
                if ordinal + 1 < PODS {
                    Decision::go(
                        Restart::Restarting {
                            epoch,
                            ordinal: ordinal + 1,
                            victim: None,
                        },
                        POD_REPLACED,
                        format!("pod-{ordinal} replaced"),
                    )
                } else {
                    Decision::go(
                        Restart::Idle { epoch },
                        RESTART_COMPLETE,
                        format!("restart round {epoch} done"),
                    )
                }
            }
            (Some(_), _) => Decision::stay(
                "WaitingForReplacement",
                format!("pod-{ordinal} is being replaced"),
            ),
        }
    }

    fn is_ready(state: &Restart) -> bool {
        matches!(state, Restart::Idle { .. })
    }

    fn deadline(state: &Restart) -> Deadline {
        match state {
            Restart::Restarting { .. } => Deadline::minutes(10, "fix the pod being replaced"),
            _ => Deadline::None,
        }
    }

    fn finalized(state: &Restart) -> bool {
        matches!(state, Restart::Released)
    }

    fn step_label(state: &Restart) -> Option<String> {
        match state {
            Restart::Restarting { ordinal, .. } => Some(format!("{}/{PODS}", ordinal + 1)),
            _ => None,
        }
    }
}

/// The pods of one StatefulSet, and every successful delete.
#[derive(Clone)]
pub(super) struct Pods {
    /// `spec.epoch`: the restart round requested.
    epoch: u32,
    pods: Vec<Option<PodView>>,
    next_uid: u64,
    /// UIDs successfully deleted, by (round, ordinal).
    deleted: BTreeMap<(u32, u8), Vec<u64>>,
}

impl fmt::Debug for Pods {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "epoch {}; ", self.epoch)?;
        for (i, pod) in self.pods.iter().enumerate() {
            match pod {
                Some(p) => write!(
                    f,
                    "pod-{i} uid {}{}, ",
                    p.uid,
                    if p.ready { " ready" } else { "" }
                )?,
                None => write!(f, "pod-{i} missing, ")?,
            }
        }
        write!(f, "deleted {:?}", self.deleted)
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) enum PodMove {
    /// The StatefulSet controller creates the missing pod at this ordinal.
    Recreate(u8),
    /// The pod at this ordinal passes its readiness probe.
    BecomesReady(u8),
    /// The pod at this ordinal fails its readiness probe.
    BecomesUnready(u8),
}

#[derive(Debug, Clone, Copy)]
pub(super) enum PodEdit {
    /// `kubectl rollout restart`: bump `spec.epoch`.
    RequestRestart,
}

impl Pods {
    fn pod(&mut self, ordinal: u8) -> &mut Option<PodView> {
        &mut self.pods[usize::from(ordinal % PODS)]
    }

    fn recreate(&mut self, ordinal: u8, ready: bool) {
        let uid = self.next_uid;
        let slot = self.pod(ordinal);
        if slot.is_none() {
            *slot = Some(PodView { uid, ready });
            self.next_uid += 1;
        }
    }
}

impl<const UID_PRECONDITION: bool> WorldModel<RollingRestart<UID_PRECONDITION>> for Pods {
    type Move = PodMove;
    type Edit = PodEdit;

    fn initial() -> BoxedStrategy<Self> {
        Just(Pods {
            epoch: 0,
            pods: (1..=u64::from(PODS))
                .map(|uid| Some(PodView { uid, ready: true }))
                .collect(),
            next_uid: u64::from(PODS) + 1,
            deleted: BTreeMap::new(),
        })
        .boxed()
    }

    fn spec(&self) -> RestartSpec {
        RestartSpec { epoch: self.epoch }
    }

    fn spec_edits() -> BoxedStrategy<PodEdit> {
        Just(PodEdit::RequestRestart).boxed()
    }

    fn edit_spec(&mut self, edit: &PodEdit) {
        match edit {
            PodEdit::RequestRestart => self.epoch += 1,
        }
    }

    fn observe(&self) -> Vec<Option<PodView>> {
        self.pods.clone()
    }

    fn apply(&mut self, action: &PodAction) {
        let PodAction::Delete {
            ordinal,
            uid,
            round,
        } = *action;
        let slot = self.pod(ordinal);
        // NotFound and a failed UID precondition are no-ops, as in the driver.
        if let Some(pod) = *slot
            && uid.is_none_or(|uid| uid == pod.uid)
        {
            *slot = None;
            self.deleted
                .entry((round, ordinal % PODS))
                .or_default()
                .push(pod.uid);
        }
    }

    fn environment_moves() -> BoxedStrategy<PodMove> {
        prop_oneof![
            (0..PODS).prop_map(PodMove::Recreate),
            (0..PODS).prop_map(PodMove::BecomesReady),
            (0..PODS).prop_map(PodMove::BecomesUnready),
        ]
        .boxed()
    }

    fn step_environment(&mut self, mv: &PodMove) {
        match *mv {
            PodMove::Recreate(ordinal) => self.recreate(ordinal, false),
            PodMove::BecomesReady(ordinal) => {
                if let Some(pod) = self.pod(ordinal) {
                    pod.ready = true;
                }
            }
            PodMove::BecomesUnready(ordinal) => {
                if let Some(pod) = self.pod(ordinal) {
                    pod.ready = false;
                }
            }
        }
    }

    fn invariants(&self, _state: &Restart) -> Result<(), String> {
        match self.deleted.iter().find(|(_, uids)| uids.len() > 1) {
            Some(((round, ordinal), uids)) => Err(format!(
                "pod-{ordinal} was deleted {} times in restart round {round} (uids {uids:?})",
                uids.len()
            )),
            None => Ok(()),
        }
    }

    fn converged(&self, state: &Restart) -> bool {
        *state == Restart::Idle { epoch: self.epoch }
            && self.pods.iter().all(|p| p.is_some_and(|p| p.ready))
    }

    fn settle(&mut self) {
        for ordinal in 0..PODS {
            self.recreate(ordinal, true);
            if let Some(pod) = self.pod(ordinal) {
                pod.ready = true;
            }
        }
    }
}

fn config() -> CheckConfig {
    CheckConfig::default()
}

#[test]
fn a_rolling_restart_with_uid_preconditioned_deletes_passes_the_model_check() {
    let report = check_machine::<Correct, Pods>(config());
    assert!(report.reconciles > 0 && report.lost_writes > 0 && report.actions > 0);
    assert!(
        report.unexercised.is_empty(),
        "every declared edge is exercised:\n{report}"
    );
}

#[test]
fn the_model_check_catches_a_delete_by_name_that_hits_the_recreated_pod() {
    let failure =
        try_check_machine::<Buggy, Pods>(&config()).expect_err("the planted bug is found");
    assert!(
        failure.reason.contains("deleted 2 times in restart round"),
        "the no-double-delete invariant fails:\n{failure}"
    );
    assert!(
        failure.events.len() <= 8,
        "the counterexample is shrunk to a few events:\n{failure}"
    );
    assert!(!failure.trace.is_empty());
    println!("{failure}");
}

#[test]
#[should_panic(expected = "model check of `rolling-restart-buggy` failed")]
fn check_machine_panics_with_the_counterexample() {
    check_machine::<Buggy, Pods>(CheckConfig {
        cases: 64,
        ..config()
    });
}
