//! Planted bugs the model check must find: machines that are Postgres except for one
//! decision, each run in the same world and expected to fail its invariant.

use std::time::Duration;

use super::scenarios::config;
use super::*;
use crate::engine::check::{CheckReport, Counterexample, check_scenario, try_check_machine};
use crate::engine::{Decision, Edge, World as Seen};
use crate::machines::postgres::state::{PgKind, SwitchStep};

/// One decision Postgres gets wrong, planted: the world that decision is shown
/// instead of the one observed (`None`: this state decides correctly).
trait Bug: 'static {
    /// The planted machine's name.
    const NAME: &'static str;
    /// The world as the buggy decision in `state` sees it.
    fn distort(state: &PgState, world: &Seen<Observed>) -> Option<Seen<Observed>>;
}

/// Postgres with bug `B` planted; everything but that one decision is Postgres's own.
struct Planted<B>(std::marker::PhantomData<B>);

impl<B: Bug> Machine for Planted<B> {
    const NAME: &'static str = B::NAME;

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
        match B::distort(state, world) {
            Some(lying) => Postgres::decide(spec, state, &lying),
            None => Postgres::decide(spec, state, world),
        }
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

/// A switchover or failover takes the Lease holder for fenced at once: the Lease is
/// handed to the target (and the target promoted) while the old primary may still run
/// a writable server.
struct TakeTheHolderForFenced;

impl Bug for TakeTheHolderForFenced {
    const NAME: &'static str = "postgrescluster-promote-before-fenced";

    fn distort(state: &PgState, world: &Seen<Observed>) -> Option<Seen<Observed>> {
        let PgState::SwitchingOver(s) = state else {
            return None;
        };
        if s.step != SwitchStep::Fence {
            return None;
        }
        // The bug: the holder is taken to have released the Lease.
        let mut lying = world.clone();
        if let Some(lease) = lying.observed.own.lease.as_mut() {
            lease.released_by.clone_from(&lease.holder);
        }
        Some(lying)
    }
}

/// A failover reads its survey as if every standby were equally advanced: it chooses
/// by ordinal.
struct ReadEveryPositionAsEqual;

impl Bug for ReadEveryPositionAsEqual {
    const NAME: &'static str = "postgrescluster-choose-by-ordinal";

    fn distort(_: &PgState, world: &Seen<Observed>) -> Option<Seen<Observed>> {
        // The bug: every surveyed position reads the same.
        let mut lying = world.clone();
        for result in lying.observed.own.job_results.values_mut() {
            if let Ok(serde_json::Value::Object(mut answers)) =
                serde_json::from_str::<serde_json::Value>(result)
            {
                for answer in answers.values_mut() {
                    answer["receive"] = "0/1".into();
                    answer["replay"] = "0/1".into();
                }
                *result = serde_json::Value::Object(answers).to_string();
            }
        }
        Some(lying)
    }
}

/// Promote before the old primary is fenced.
type PromoteBeforeFenced = Planted<TakeTheHolderForFenced>;
/// Choose the failover target by ordinal.
type ChooseByOrdinal = Planted<ReadEveryPositionAsEqual>;

/// What Postgres as it is does in the scenario (`world` and its `events`): every
/// invariant holds.
fn passes((world, events): (World, Vec<Event<Move, Edit>>)) -> CheckReport {
    check_scenario::<Postgres, World>(&config(), world, &events)
        .unwrap_or_else(|failure| panic!("{failure}"))
}

/// How the machine `M` with a planted bug fails in the scenario (`world` and its
/// `events`).
fn found<M>((world, events): (World, Vec<Event<Move, Edit>>)) -> Box<Counterexample>
where
    M: Machine,
    World: WorldModel<M, Move = Move, Edit = Edit>,
{
    check_scenario::<M, World>(&config(), world, &events).expect_err("the planted bug is found")
}

/// A running cluster of three pods (pod 0 primary), and `events` after three quiet
/// reconciles.
fn running_three(events: Vec<Event<Move, Edit>>) -> (World, Vec<Event<Move, Edit>>) {
    let mut world = World::fresh(3, false, 0);
    world.running();
    let r = || Event::Reconcile(Reconcile::FRESH);
    (world, [r(), r(), r()].into_iter().chain(events).collect())
}

/// Pod 2 has received a commit pod 1 has not when pod 0, the primary, fails; the
/// failover runs to its promotion.
fn lagging_replica_failover() -> (World, Vec<Event<Move, Edit>>) {
    use Move::*;
    let r = || Event::Reconcile(Reconcile::FRESH);
    let env = Event::Env;
    running_three(vec![
        env(Write),
        env(Replicate(2)),
        env(BecomesUnready(0)),
        r(),
        Event::Tick(60),
        r(),
        r(),
        env(Terminated(0)),
        r(),
        r(),
        env(JobFinishes { nth: 0, ok: true }),
        r(),
        r(),
        env(Recreate(0)),
        r(),
        r(),
        env(JobFinishes { nth: 0, ok: true }),
        r(),
    ])
}

#[test]
fn a_failover_promotes_the_replica_that_received_the_most() {
    let report = passes(lagging_replica_failover());
    assert!(
        report
            .trace
            .iter()
            .any(|l| l.contains("HandLease { holder: Some(\"pg-2/")),
        "{}",
        report.trace.join("\n")
    );
}

#[test]
fn the_model_check_finds_a_failover_that_chooses_by_ordinal() {
    let failure = found::<ChooseByOrdinal>(lagging_replica_failover());
    assert!(
        failure.reason.contains("failover promoted pod 1"),
        "the most-advanced invariant fails:\n{failure}"
    );
}

/// Pod 0, the primary, fails; its pod lingers Terminating (its server may still run)
/// while the failover goes on.
fn lingering_primary_failover() -> (World, Vec<Event<Move, Edit>>) {
    use Move::*;
    let r = || Event::Reconcile(Reconcile::FRESH);
    let env = Event::Env;
    running_three(vec![
        env(BecomesUnready(0)),
        r(),
        Event::Tick(60),
        r(),
        r(),
        r(),
        r(),
        env(JobFinishes { nth: 0, ok: true }),
        r(),
        r(),
    ])
}

#[test]
fn a_failover_waits_for_a_lingering_primary() {
    let report = passes(lingering_primary_failover());
    assert!(
        report
            .transitions
            .contains_key("SwitchingOver -> Ready (FailoverCompleted)")
    );
}

#[test]
fn the_model_check_finds_a_promotion_before_the_old_primary_is_fenced() {
    let failure = found::<PromoteBeforeFenced>(lingering_primary_failover());
    assert!(
        failure.reason.contains("still runs a writable server")
            || failure.reason.contains("all run a writable server"),
        "the one-writable-server invariant fails:\n{failure}"
    );
    // Generated runs find it too.
    let failure = try_check_machine::<PromoteBeforeFenced, World>(&CheckConfig {
        cases: 1024,
        ..config()
    })
    .expect_err("generated runs find the planted bug");
    assert!(
        failure.reason.contains("writable server")
            || failure.reason.contains("failover promoted pod"),
        "{failure}"
    );
}
