//! A small machine for the engine's unit tests: it scales a set of pods, waits for them,
//! and drains them on deletion. Its spec can make it misbehave, to test refusals.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use strum::{EnumDiscriminants, EnumIter, IntoStaticStr};

use crate::engine::{Deadline, Decision, Edge, EngineStatus, Input, Machine, Outcome, World, step};

/// The toy's persisted state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, EnumDiscriminants)]
#[strum_discriminants(name(ToyKind), derive(IntoStaticStr, EnumIter))]
#[serde(tag = "name", rename_all_fields = "camelCase")]
pub(super) enum ToyState {
    Pending,
    Scaling { to: u32 },
    Running { replicas: u32 },
    Draining,
    Gone,
}

/// How the toy should misbehave, if at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Misbehave {
    #[default]
    No,
    /// From Running, go to Gone: an edge the table does not have.
    WrongKind,
    /// From Running, go to Scaling with the reason of another edge.
    WrongReason,
}

#[derive(Debug, Clone, Default)]
pub(super) struct ToySpec {
    pub replicas: u32,
    pub misbehave: Misbehave,
}

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ToyObserved {
    pub ready: u32,
    /// The scale last applied, as a StatefulSet's `spec.replicas` shows it (`None`: not
    /// observed): an applied scale whose transition was never recorded is found here.
    pub scaled: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum ToyAction {
    Scale(u32),
    Cleanup,
}

pub(super) struct Toy;

pub(super) const CREATED: &str = "Created";
pub(super) const SCALED: &str = "Scaled";
pub(super) const SCALE_REQUESTED: &str = "ScaleRequested";
pub(super) const DELETE_REQUESTED: &str = "DeleteRequested";
pub(super) const CLEANED_UP: &str = "CleanedUp";

/// How long Scaling may last.
pub(super) const SCALING_DEADLINE: Duration = Duration::from_secs(600);
/// How often Scaling looks again on its own.
pub(super) const SCALING_POLL: Duration = Duration::from_secs(30);

static TABLE: &[Edge<ToyKind>] = crate::edges![ToyKind;
    Pending -> Scaling: CREATED, "first decision", file!();
    Scaling -> Running: SCALED, "all pods ready", file!();
    Running -> Scaling: SCALE_REQUESTED, "spec.replicas changed", file!();
    [Pending, Scaling, Running] -> Draining: DELETE_REQUESTED, "deleted", file!();
    Draining -> Gone: CLEANED_UP, "no pod left", file!();
];

impl Machine for Toy {
    const NAME: &'static str = "toy";
    type Spec = ToySpec;
    type State = ToyState;
    type Kind = ToyKind;
    type Observed = ToyObserved;
    type Action = ToyAction;

    fn initial() -> ToyState {
        ToyState::Pending
    }

    fn table() -> &'static [Edge<ToyKind>] {
        TABLE
    }

    fn decide(
        spec: &ToySpec,
        state: &ToyState,
        world: &World<ToyObserved>,
    ) -> Decision<ToyState, ToyAction> {
        let ready = world.observed.ready;
        if world.deleting {
            return match state {
                ToyState::Pending | ToyState::Scaling { .. } | ToyState::Running { .. } => {
                    Decision::go(ToyState::Draining, DELETE_REQUESTED, "deleting")
                        .with_actions([ToyAction::Cleanup])
                }
                ToyState::Draining if ready == 0 => {
                    Decision::go(ToyState::Gone, CLEANED_UP, "all pods removed")
                }
                ToyState::Draining => Decision::stay("Draining", format!("{ready} pods left"))
                    .with_actions([ToyAction::Cleanup]),
                ToyState::Gone => Decision::stay("Gone", "finalized"),
            };
        }
        match state {
            ToyState::Pending => Decision::go(
                ToyState::Scaling { to: spec.replicas },
                CREATED,
                format!("scaling to {}", spec.replicas),
            )
            .with_actions([ToyAction::Scale(spec.replicas)]),
            ToyState::Scaling { to } if ready == *to => Decision::go(
                ToyState::Running { replicas: *to },
                SCALED,
                format!("{to} pods ready"),
            ),
            ToyState::Scaling { to } => {
                Decision::stay("WaitingForPods", format!("{ready}/{to} pods ready"))
                    .requeue(SCALING_POLL)
            }
            ToyState::Running { .. } if spec.misbehave == Misbehave::WrongKind => {
                Decision::go(ToyState::Gone, CLEANED_UP, "misbehaving")
                    .with_actions([ToyAction::Cleanup])
            }
            ToyState::Running { replicas } if spec.misbehave == Misbehave::WrongReason => {
                Decision::go(
                    ToyState::Scaling { to: *replicas + 1 },
                    SCALED,
                    "misbehaving",
                )
                .with_actions([ToyAction::Scale(*replicas + 1)])
            }
            ToyState::Running { replicas } if *replicas != spec.replicas => Decision::go(
                ToyState::Scaling { to: spec.replicas },
                SCALE_REQUESTED,
                format!("scaling from {replicas} to {}", spec.replicas),
            )
            .with_actions([ToyAction::Scale(spec.replicas)]),
            // A scale applied by a reconcile whose status write was lost, then undone in
            // the spec: the state matches the spec, the world does not.
            ToyState::Running { replicas }
                if world.observed.scaled.is_some_and(|n| n != *replicas) =>
            {
                Decision::stay("Drifted", format!("scaling back to {replicas}"))
                    .with_actions([ToyAction::Scale(*replicas)])
            }
            ToyState::Running { replicas } => {
                Decision::stay("Serving", format!("{replicas} pods ready"))
            }
            // Only reachable while deleting, handled above; stay put if deletion was undone.
            ToyState::Draining | ToyState::Gone => Decision::stay("Draining", "draining"),
        }
    }

    fn is_ready(state: &ToyState) -> bool {
        matches!(state, ToyState::Running { .. })
    }

    fn deadline(state: &ToyState) -> Deadline {
        match state {
            ToyState::Pending | ToyState::Scaling { .. } | ToyState::Draining => Deadline::Within {
                limit: SCALING_DEADLINE,
                way_out: "fix the pods",
            },
            _ => Deadline::None,
        }
    }

    fn finalized(state: &ToyState) -> bool {
        matches!(state, ToyState::Gone)
    }

    fn holds_data(observed: &ToyObserved) -> bool {
        observed.ready > 0
    }

    fn step_label(state: &ToyState) -> Option<String> {
        match state {
            ToyState::Scaling { to } => Some(format!("to {to}")),
            _ => None,
        }
    }
}

/// The start of every test's clock.
pub(super) fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 29, 18, 0, 0)
        .single()
        .expect("a valid time")
}

/// The API server's copy of a toy object: its status as JSON, so every reconcile reads
/// what a round trip through the API server would give it.
pub(super) struct Api {
    pub status: String,
    pub generation: i64,
    pub now: DateTime<Utc>,
    pub deleting: bool,
    pub writes: usize,
}

impl Api {
    pub fn new() -> Self {
        Self::with_status(&EngineStatus::default())
    }

    pub fn with_status(status: &EngineStatus<ToyState>) -> Self {
        Self {
            status: serde_json::to_string(status).expect("status serializes"),
            generation: 1,
            now: t0(),
            deleting: false,
            writes: 0,
        }
    }

    /// The status as read from the server.
    pub fn read(&self) -> EngineStatus<ToyState> {
        serde_json::from_str(&self.status).expect("status deserializes")
    }

    /// One reconcile: read, step, write if changed.
    pub fn reconcile(&mut self, spec: &ToySpec, ready: u32) -> Outcome<Toy> {
        let status = self.read();
        let out = step::<Toy>(Input {
            spec,
            status: &status,
            observed: ToyObserved {
                ready,
                scaled: None,
            },
            generation: self.generation,
            deleting: self.deleting,
            now: self.now,
        });
        if out.changed {
            self.status = serde_json::to_string(&out.status).expect("status serializes");
            self.writes += 1;
        }
        out
    }

    /// Advance the clock.
    pub fn wait(&mut self, secs: i64) {
        self.now += chrono::Duration::seconds(secs);
    }

    /// Reconcile from a fresh object until it runs `replicas` pods, all ready.
    pub fn running(replicas: u32) -> (Self, ToySpec) {
        let spec = ToySpec {
            replicas,
            misbehave: Misbehave::No,
        };
        let mut api = Self::new();
        api.reconcile(&spec, 0); // Initialized
        api.reconcile(&spec, 0); // Pending -> Scaling
        api.reconcile(&spec, replicas); // Scaling -> Running
        assert_eq!(api.state(), Some(ToyState::Running { replicas }));
        (api, spec)
    }

    /// The persisted state.
    pub fn state(&self) -> Option<ToyState> {
        crate::engine::step::decode::<Toy>(&self.read())
            .expect("record decodes")
            .map(|r| r.state)
    }
}
