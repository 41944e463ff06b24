//! Planted bugs the model check must find: machines that are Postgres except for one
//! decision, each run in the same world and expected to fail its invariant.

use std::time::Duration;

use super::*;
use crate::engine::check::try_check_machine;
use crate::engine::{Decision, Edge, World as Seen};
use crate::machines::postgres::state::{PgKind, SwitchStep};

/// Postgres, except that a switchover or failover takes the Lease holder for fenced at
/// once: the Lease is handed to the target (and the target promoted) while the old
/// primary may still run a writable server.
struct PromoteBeforeFenced;

impl Machine for PromoteBeforeFenced {
    const NAME: &'static str = "postgrescluster-promote-before-fenced";

    type Spec = PostgresClusterSpec;
    type State = PgState;
    type Kind = PgKind;
    type Observed = Observed;
    type Action = PgAction;

    fn initial() -> PgState {
        Postgres::initial()
    }

    fn table() -> &'static [Edge<PgKind>] {
        Postgres::table()
    }

    fn decide(
        spec: &PostgresClusterSpec,
        state: &PgState,
        world: &Seen<Observed>,
    ) -> Decision<PgState, PgAction> {
        if let PgState::SwitchingOver(s) = state
            && s.step == SwitchStep::Fence
        {
            // The bug: the holder is taken to have released the Lease.
            let mut lying = world.clone();
            if let Some(lease) = lying.observed.lease.as_mut() {
                lease.released_by.clone_from(&lease.holder);
            }
            return Postgres::decide(spec, state, &lying);
        }
        Postgres::decide(spec, state, world)
    }

    fn is_ready(state: &PgState) -> bool {
        Postgres::is_ready(state)
    }

    fn deadline(state: &PgState) -> Option<Duration> {
        Postgres::deadline(state)
    }

    fn finalized(state: &PgState) -> bool {
        Postgres::finalized(state)
    }

    fn acks(state: &PgState) -> Vec<(&'static str, String)> {
        Postgres::acks(state)
    }

    fn holds_data(o: &Observed) -> bool {
        Postgres::holds_data(o)
    }
}

#[test]
fn the_model_check_finds_a_promotion_before_the_old_primary_is_fenced() {
    let config = CheckConfig {
        cases: 256,
        max_events: 60,
        liveness_reconciles: 96,
        ..CheckConfig::default()
    };
    let failure = try_check_machine::<PromoteBeforeFenced, World>(&config)
        .expect_err("the planted bug is found");
    assert!(
        failure.reason.contains("still runs a writable server")
            || failure.reason.contains("all run a writable server"),
        "the one-writable-server invariant fails:\n{failure}"
    );
}
