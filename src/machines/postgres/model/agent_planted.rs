//! The planted agent bug behind the released position (`docs/decisions/0002-zero-loss.md`): the old bash agent's clean stop. It renews
//! nothing while `pg_ctl stop -m fast -t 120` runs, checks neither the Lease nor its
//! fence deadline meanwhile (only the stop's own 120 s bound ends it), and so lets the
//! operator hand the Lease over by expiry while its walsenders still send. The model
//! check must find it, and shrink it; the real agent passes the same runs.
//!
//! The lost tail is fixed on both sides, each alone enough: the agent renews while its
//! clean stop runs, and the operator never hands a planned switchover over by expiry
//! without the old primary's released position ([`HandOverByExpiry`] plants the old
//! operator's side). The old agent is found against the old operator, and each fix
//! alone passes the same story.

use super::focused::{Focus, Focused};
use super::scenarios::config;
use super::scenarios::story::r;
use super::*;
use crate::engine::Decision;
use crate::engine::World as Seen;
use crate::engine::check::{CheckReport, check_scenario, shrink_scenario};
use crate::engine::planted::{Bug, Planted};
use crate::instance::{self, AgentAction, AgentSpec, LeaseRead, Observation};
use crate::machines::postgres::state::SwitchCause;

/// The old agent: while a clean stop runs it sees neither the Lease nor how long ago it
/// renewed (so it renews nothing, and never escalates before the stop's own bound).
fn stop_without_renewing(
    spec: &AgentSpec,
    state: &AgentState,
    seen: &Observation,
    signalled: bool,
) -> Decision<AgentState, AgentAction> {
    if let AgentState::Stopping { .. } = state {
        let blind = Observation {
            lease: LeaseRead::Unreadable,
            renewed: Some(seen.now),
            ..seen.clone()
        };
        return instance::decide(spec, state, &blind, signalled);
    }
    instance::decide(spec, state, seen, signalled)
}

/// The old operator's side of the lost tail: a planned switchover hands the Lease over once
/// it expires, though the old primary never released it with its last WAL position.
struct ExpiryEndsAPlannedSwitchover;

impl Bug<Postgres> for ExpiryEndsAPlannedSwitchover {
    const NAME: &'static str = "postgrescluster-switchover-by-expiry";

    fn distort(state: &PgState, world: &Seen<Observed>) -> Option<Seen<Observed>> {
        let PgState::SwitchingOver(s) = state else {
            return None;
        };
        if s.cause == SwitchCause::Failover {
            return None;
        }
        // The bug: a Lease that expired reads as if a position had been released.
        let mut lying = world.clone();
        let lease = lying.observed.own.lease.as_mut()?;
        lease.released_lsn.get_or_insert_with(|| "0/0".to_owned());
        Some(lying)
    }
}

/// The operator that hands a planned switchover over by expiry.
type HandOverByExpiry = Planted<Postgres, ExpiryEndsAPlannedSwitchover>;

/// The PostgresCluster world whose every pod runs the old agent's clean stop.
#[derive(Clone, Debug)]
struct OldCleanStopFocus;

impl Focus for OldCleanStopFocus {
    /// A running cluster of three whose primary is pod 2: most edits of the replicas,
    /// and every upgrade, begin with a switchover.
    fn initial() -> BoxedStrategy<World> {
        Just(())
            .prop_map(|()| {
                let mut w = World::fresh(3, false, 0);
                w.running();
                w.primary_moved_to(2);
                w.agent_decide = stop_without_renewing;
                w
            })
            .boxed()
    }
    /// Nothing weighed up: the world's own moves.
    fn moves() -> BoxedStrategy<Move> {
        <World as WorldModel<Postgres>>::environment_moves()
    }
}

/// The world of [`OldCleanStopFocus`].
type OldCleanStop = Focused<OldCleanStopFocus>;

/// A planned switchover (pod 2, the primary, must go: a scale-down) whose clean stop
/// runs for a minute (its walsenders still send a standby that is far behind), then
/// finishes.
fn slow_clean_stop() -> (World, Vec<Event<Move, Edit>>) {
    use Move::*;
    let env = Event::Env;
    let mut world = World::fresh(3, false, 0);
    world.running();
    world.primary_moved_to(2);
    let events = vec![
        r(),
        r(),
        r(),
        r(),
        Event::Edit(Edit::Replicas(2)),
        r(),
        r(),
        env(Write),
        // Its agent sees the label `demoted`: a clean stop begins.
        env(AgentTick(2)),
        r(),
        Event::Tick(60),
        r(),
        r(),
        r(),
        env(AgentTick(0)),
        env(AgentTick(1)),
        r(),
        env(ServerStops(2)),
        env(AgentTick(2)),
        r(),
        r(),
        env(AgentTick(0)),
        env(AgentTick(1)),
        r(),
        r(),
    ];
    (world, events)
}

fn passes((world, events): (World, Vec<Event<Move, Edit>>)) -> CheckReport {
    passes_with::<Postgres>((world, events))
}

/// What the operator `M` does in the story: every invariant holds.
fn passes_with<M>((world, events): (World, Vec<Event<Move, Edit>>)) -> CheckReport
where
    M: Machine,
    World: WorldModel<M, Move = Move, Edit = Edit>,
{
    check_scenario::<M, World>(&config(), world, &events)
        .unwrap_or_else(|failure| panic!("{failure}"))
}

#[test]
fn the_operator_alone_keeps_the_old_clean_stop_safe() {
    // The old agent, the new operator: the switchover waits for the release.
    let (mut world, events) = slow_clean_stop();
    world.agent_decide = stop_without_renewing;
    let report = passes((world, events));
    // Past renewTime + L + S, it handed nothing over until the stop ended and the old
    // primary released the Lease with its position.
    let at = |needle: &str| report.trace.iter().position(|l| l.contains(needle));
    assert!(
        at("ServerStops(2)") < at("(LeaseHandedOver)") && at("(LeaseHandedOver)").is_some(),
        "{}",
        report.trace.join("\n")
    );
}

#[test]
fn the_agent_alone_keeps_a_switchover_by_expiry_safe() {
    // The real agent, the old operator: the stop renews, so the Lease never expires.
    let report = passes_with::<HandOverByExpiry>(slow_clean_stop());
    assert!(
        report
            .transitions
            .contains_key("SwitchingOver -> Ready (SwitchoverCompleted)"),
        "{}",
        report.trace.join("\n")
    );
}

#[test]
fn a_clean_stop_that_outlasts_the_lease_hands_over_only_once_released() {
    let report = passes(slow_clean_stop());
    let trace = report.trace.join("\n");
    assert!(
        report
            .transitions
            .contains_key("SwitchingOver -> Ready (SwitchoverCompleted)"),
        "{trace}"
    );
    assert!(slow_clean_stop().0.agent_decide_is_real());
}

#[test]
fn the_model_check_finds_and_shrinks_a_clean_stop_that_renews_nothing() {
    let (mut world, events) = slow_clean_stop();
    world.agent_decide = stop_without_renewing;
    let two_writers = |reason: &str| {
        reason.contains("still runs a writable server")
            || reason.contains("all run a writable server")
    };
    let failure = shrink_scenario::<HandOverByExpiry, OldCleanStop>(
        &config(),
        OldCleanStop::new(world),
        &events,
        two_writers,
    )
    .expect_err("the planted bug is found");
    assert!(two_writers(&failure.reason), "{failure}");
    // Shrunk to the story of the bug: the scale-down demotes pod 2, whose agent begins
    // its clean stop on its next round; a minute passes (renewTime + L + S) while it
    // runs; the operator hands the Lease over by expiry.
    assert!(failure.events.len() <= 8, "{failure}");
    assert!(
        failure.events.iter().any(|e| e.contains("Replicas(2)"))
            && failure.events.iter().any(|e| e.contains("clock")),
        "{failure}"
    );
}

/// An agent blind to the Lease's `initialized` mark (the agent before it): labelled
/// primary with an empty volume and named by the Lease, it bootstraps a new database.
fn bootstrap_blind_to_the_mark(
    spec: &AgentSpec,
    state: &AgentState,
    seen: &Observation,
    signalled: bool,
) -> Decision<AgentState, AgentAction> {
    let mut blind = seen.clone();
    if let LeaseRead::Seen(l) = &mut blind.lease {
        l.initialized = false;
    }
    instance::decide(spec, state, &blind, signalled)
}

/// The primary's pod and volume are lost at rest (a claim deleted with its pod); the
/// StatefulSet makes pod 0 again with an empty volume, and the operator, still at rest
/// with pod 0 as its primary, hands the Lease to it once the old holder is certainly
/// fenced (L + S later).
fn primary_volume_lost() -> (World, Vec<Event<Move, Edit>>) {
    use Move::*;
    let env = Event::Env;
    let mut world = World::fresh(3, false, 0);
    world.running();
    let events = vec![
        r(),
        r(),
        env(VolumeLost(0)),
        r(),
        env(Recreate(0)),
        r(),
        r(),
        Event::Tick(46),
        r(),
        r(),
        env(AgentTick(0)),
        env(AgentTick(0)),
        env(AgentTick(0)),
        r(),
    ];
    (world, events)
}

#[test]
fn the_model_check_finds_an_agent_that_bootstraps_over_a_lost_volume() {
    let (mut world, events) = primary_volume_lost();
    world.agent_decide = bootstrap_blind_to_the_mark;
    let failure = check_scenario::<Postgres, World>(&config(), world, &events)
        .expect_err("the planted bug is found");
    assert!(
        failure.reason.contains("bootstrapped an empty database"),
        "{failure}"
    );
}

#[test]
fn the_real_agent_passes_the_same_story_without_bootstrapping() {
    // Invariant 15 is checked at every step of it, and the world settles Ready.
    let (world, events) = primary_volume_lost();
    assert!(world.agent_decide_is_real());
    passes((world, events));
}

/// The agent before standbys followed the Lease: a standby streams from the `-rw` Service for
/// as long as its server runs, whoever holds the Lease (its replication connection
/// outlives the Service's move to another pod, and a frozen server's kernel keeps the
/// connection open).
fn follow_the_service_forever(
    spec: &AgentSpec,
    state: &AgentState,
    seen: &Observation,
    signalled: bool,
) -> Decision<AgentState, AgentAction> {
    let unfollowed = |actions: Vec<AgentAction>| -> Vec<AgentAction> {
        actions
            .into_iter()
            .filter(|a| !matches!(a, AgentAction::Follow { .. }))
            .collect()
    };
    match instance::decide(spec, state, seen, signalled) {
        Decision::Stay {
            reason,
            message,
            actions,
            wait,
            health,
        } => Decision::Stay {
            reason,
            message,
            actions: unfollowed(actions),
            wait,
            health,
        },
        Decision::Go {
            to,
            reason,
            message,
            actions,
        } => Decision::Go {
            to,
            reason,
            message,
            actions: unfollowed(actions),
        },
    }
}

/// The primary, pod 0, freezes (every process of its pod stopped at once). Its Lease
/// runs out, the failover surveys the standbys, hands the Lease to pod 1 and promotes
/// it. Then pod 0 thaws, before pod 2's stream from it breaks: its backends finish the
/// commits they had in flight as its fence thread stops the server.
fn frozen_primary_thaws_after_the_failover() -> (World, Vec<Event<Move, Edit>>) {
    use Move::*;
    let env = Event::Env;
    let mut world = World::fresh(3, false, 0);
    world.running();
    let events = vec![
        r(),
        r(),
        r(),
        env(Write),
        env(AgentTick(1)),
        env(AgentTick(2)),
        env(Pause(0)),
        Event::Tick(60),
        r(),
        r(),
        Event::Tick(60),
        r(),
        r(),
        r(),
        r(),
        env(AgentTick(1)),
        env(AgentTick(2)),
        r(),
        r(),
        env(AgentTick(1)),
        r(),
        r(),
        env(Resume(0)),
    ];
    (world, events)
}

#[test]
fn the_model_check_finds_a_standby_still_streaming_from_a_primary_that_lost_the_lease() {
    let (mut world, events) = frozen_primary_thaws_after_the_failover();
    world.agent_decide = follow_the_service_forever;
    world.answer_gate = answer_whomever_it_follows;
    let failure = check_scenario::<Postgres, World>(&config(), world, &events)
        .expect_err("the planted bug is found");
    assert!(
        failure.reason.contains("still streamed from pod 0"),
        "{failure}"
    );
}

/// The gate before a standby waited to leave the old holder: it answers a survey while
/// it still streams from it.
fn answer_whomever_it_follows(_: &AgentSpec, _: &Observation) -> bool {
    true
}

/// With the real gate, a standby that never leaves the old primary never answers the
/// survey, so the failover promotes nobody it counted, and no commit the thawed primary
/// finishes is acknowledged and lost: the second defense behind the agent's own.
#[test]
fn a_standby_still_streaming_from_the_old_primary_answers_no_survey_so_nothing_acknowledged_is_lost()
 {
    let (mut world, events) = frozen_primary_thaws_after_the_failover();
    world.agent_decide = follow_the_service_forever;
    let report = passes((world, events));
    assert!(
        !report
            .transitions
            .contains_key("SwitchingOver -> Ready (FailoverCompleted)"),
        "{}",
        report.trace.join("\n")
    );
}

#[test]
fn the_real_agent_stops_streaming_from_a_primary_whose_tenure_ran_out() {
    let (world, events) = frozen_primary_thaws_after_the_failover();
    assert!(world.agent_decide_is_real());
    let report = passes((world, events));
    assert!(
        report
            .transitions
            .contains_key("SwitchingOver -> Ready (FailoverCompleted)"),
        "{}",
        report.trace.join("\n")
    );
}
