//! The planted bug of timelines: a failover that ranks the standbys' answers by LSN
//! alone. After a first failover, a standby that streamed the old primary's last
//! writes (past the new timeline's fork) stands at a higher LSN than the new primary's
//! standbys while holding less of the cluster's history; promoted, it would lose every
//! commit of the new timeline (the most-advanced invariant, by [`World::held`]).

use super::planted::{assert_handed_to, found, passes};
use super::scenarios::story::{asked, expired, fail_over, r};
use super::*;
use crate::engine::World as Seen;
use crate::engine::planted::{Bug, Planted};

/// A failover reads every answer as on one timeline: it compares LSNs only.
struct ReadEveryAnswerOnOneTimeline;

impl Bug<Postgres> for ReadEveryAnswerOnOneTimeline {
    const NAME: &'static str = "postgrescluster-compare-lsns-only";

    fn distort(_: &PgState, world: &Seen<Observed>) -> Option<Seen<Observed>> {
        // The bug: the timeline each standby answered is dropped.
        let mut lying = world.clone();
        for answer in lying.observed.own.answers.values_mut() {
            answer.timeline = 1;
        }
        Some(lying)
    }
}

/// Choose the failover target by LSN alone.
type CompareLsnsOnly = Planted<Postgres, ReadEveryAnswerOnOneTimeline>;

/// Three pods, pod 0 primary. Pod 2 receives two commits pod 1 does not, then stops
/// being Ready as pod 0 fails: pod 1 is promoted (timeline 2 forks at commit 1) and pod
/// 2 keeps commits 2 and 3 of timeline 1, which nobody else has. Pod 0 comes back,
/// rewinds and follows timeline 2, receiving its commit 2; pod 2 is Ready again. Then
/// pod 1 fails: pod 0 answers timeline 2 at 2, pod 2 timeline 1 at 3.
fn second_failover_with_a_standby_past_the_first_fork() -> (World, Vec<Event<Move, Edit>>) {
    use Move::*;
    let env = Event::Env;
    let mut world = World::fresh(3, false, 0);
    world.running();
    let events = [
        vec![r(), r(), r()],
        vec![env(Write), env(Replicate(1)), env(Replicate(2))],
        vec![env(Write), env(Write), env(Replicate(2))],
        vec![env(BecomesUnready(2))],
        fail_over(),
        asked(),
        // Pod 2 never answers: after three surveys the failover goes on without it.
        (0..4)
            .flat_map(|_| [env(AgentTick(1)), Event::Tick(15), r(), r()])
            .collect(),
        vec![r(), env(Recreate(0)), r(), r(), env(AgentTick(1))],
        vec![env(PromotionEnds(1)), env(AgentTick(1)), r()],
        // Pod 0 rewinds and follows timeline 2.
        vec![
            env(AgentTick(0)),
            env(AgentTick(0)),
            env(BecomesReady(0)),
            r(),
            r(),
        ],
        vec![env(Write), env(Replicate(0)), env(BecomesReady(2)), r()],
        // Pod 1, the new primary, fails.
        vec![env(BecomesUnready(1)), r(), Event::Tick(60), r()],
        vec![r(), env(Terminated(1)), Event::Tick(expired()), r(), r()],
        vec![env(AgentTick(0)), env(AgentTick(2)), r()],
        vec![r(), r(), env(AgentTick(0)), env(AgentTick(2)), r()],
    ]
    .concat();
    (world, events)
}

#[test]
fn a_second_failover_promotes_the_standby_on_the_newest_timeline_over_a_higher_lsn_on_an_old_one() {
    let report = passes(second_failover_with_a_standby_past_the_first_fork());
    assert_handed_to(&report, 0);
}

#[test]
fn the_model_check_finds_a_failover_that_compares_lsns_without_timelines() {
    let failure = found::<CompareLsnsOnly>(second_failover_with_a_standby_past_the_first_fork());
    assert!(
        failure
            .reason
            .contains("promoted pod 2 at WAL 1 while pod 0 had received 2"),
        "the most-advanced invariant fails:\n{failure}"
    );
}
