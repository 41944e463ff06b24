//! Planted bugs the model check must find: machines that are Postgres except for one
//! decision, each run in the same world and expected to fail its invariant.

use super::scenarios::config;
use super::scenarios::story::{fail_over, r, surveyed};
use super::*;
use crate::engine::World as Seen;
use crate::engine::check::{CheckReport, Counterexample, check_scenario, try_check_machine};
use crate::engine::planted::{Bug, Planted};
use crate::machines::postgres::state::SwitchStep;
use crate::pod::Lsn;

/// A switchover or failover takes the Lease holder for fenced at once: the Lease is
/// handed to the target (and the target promoted) while the old primary may still run
/// a writable server.
struct TakeTheHolderForFenced;

impl Bug<Postgres> for TakeTheHolderForFenced {
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

impl Bug<Postgres> for ReadEveryPositionAsEqual {
    const NAME: &'static str = "postgrescluster-choose-by-ordinal";

    fn distort(_: &PgState, world: &Seen<Observed>) -> Option<Seen<Observed>> {
        // The bug: every position answered reads the same.
        let mut lying = world.clone();
        for answer in lying.observed.own.answers.values_mut() {
            answer.received = Lsn(1);
            answer.replayed = Lsn(1);
        }
        Some(lying)
    }
}

/// A failover counts every member as read: with synchronous replication it promotes the
/// most advanced standby that answered, though the one that has the last acknowledged
/// commits did not (the behaviour before the quorum rule); without, it does not survey
/// again for a member whose answer timed out (the behaviour before the bounded wait).
struct CountEveryMemberAsRead;

impl Bug<Postgres> for CountEveryMemberAsRead {
    const NAME: &'static str = "postgrescluster-ignore-the-synchronous-quorum";

    fn distort(_: &PgState, world: &Seen<Observed>) -> Option<Seen<Observed>> {
        // The bug: a member that did not answer the survey asked is taken as read (at
        // no position).
        let mut lying = world.clone();
        let token = lying.observed.own.lease.as_ref()?.survey.clone()?;
        let unread = Answer {
            token: token.clone(),
            timeline: 0,
            received: Lsn(0),
            replayed: Lsn(0),
        };
        for k in 0..MAX_PODS {
            let said = lying
                .observed
                .own
                .answers
                .entry(k)
                .or_insert_with(|| unread.clone());
            if said.token != token {
                *said = unread.clone();
            }
        }
        Some(lying)
    }
}

/// `spec.synchronous` with one standby, `Required`.
pub(super) fn required_one() -> SynchronousSpec {
    SynchronousSpec {
        number: 1,
        method: SyncMethod::Any,
        data_durability: DataDurability::Required,
    }
}

/// `scenario` under `Required` durability ([`required_one`]): a planned switchover whose
/// old primary released no position surveys the standbys, as these stories need,
/// where asynchronously it goes back to the old primary or waits for a person.
pub(super) fn required(
    (mut world, events): (World, Vec<Event<Move, Edit>>),
) -> (World, Vec<Event<Move, Edit>>) {
    world.synchronous = Some(required_one());
    (world, events)
}

/// Promote before the old primary is fenced.
type PromoteBeforeFenced = Planted<Postgres, TakeTheHolderForFenced>;
/// Promote without reading the synchronous quorum.
type IgnoreTheQuorum = Planted<Postgres, CountEveryMemberAsRead>;
/// Choose the failover target by ordinal.
type ChooseByOrdinal = Planted<Postgres, ReadEveryPositionAsEqual>;

/// What Postgres as it is does in the scenario (`world` and its `events`): every
/// invariant holds.
pub(super) fn passes((world, events): (World, Vec<Event<Move, Edit>>)) -> CheckReport {
    check_scenario::<Postgres, World>(&config(), world, &events)
        .unwrap_or_else(|failure| panic!("{failure}"))
}

/// How the machine `M` with a planted bug fails in the scenario (`world` and its
/// `events`).
pub(super) fn found<M>((world, events): (World, Vec<Event<Move, Edit>>)) -> Box<Counterexample>
where
    M: Machine,
    World: WorldModel<M, Move = Move, Edit = Edit>,
{
    check_scenario::<M, World>(&config(), world, &events).expect_err("the planted bug is found")
}

/// Assert that the run took `edge` (`From -> To (Reason)`), showing its trace if not.
pub(super) fn assert_took(report: &CheckReport, edge: &str) {
    assert!(
        report.transitions.contains_key(edge),
        "{edge} not taken:\n{}",
        report.trace.join("\n")
    );
}

/// A running cluster of three pods (pod 0 primary), and `events` after three quiet
/// reconciles.
pub(super) fn running_three(events: Vec<Event<Move, Edit>>) -> (World, Vec<Event<Move, Edit>>) {
    running_n(3, events)
}

/// A running cluster of `n` pods (pod 0 primary), and `events` after three quiet
/// reconciles.
pub(super) fn running_n(n: i32, events: Vec<Event<Move, Edit>>) -> (World, Vec<Event<Move, Edit>>) {
    let mut world = World::fresh(n, false, 0);
    world.running();
    (world, [r(), r(), r()].into_iter().chain(events).collect())
}

/// Pod 2 has received a commit pod 1 has not when pod 0, the primary, fails; the
/// failover runs to its promotion.
pub(super) fn lagging_replica_failover() -> (World, Vec<Event<Move, Edit>>) {
    lagging_replica_failover_with(vec![], vec![])
}

/// [`lagging_replica_failover`] with `before` the survey's end and `after` it.
fn lagging_replica_failover_with(
    before: Vec<Event<Move, Edit>>,
    after: Vec<Event<Move, Edit>>,
) -> (World, Vec<Event<Move, Edit>>) {
    use Move::*;
    let env = Event::Env;
    running_three(
        [
            vec![env(Write), env(Replicate(2))],
            fail_over(),
            before,
            surveyed(),
            after,
            vec![r(), env(Recreate(0)), r(), r(), env(AgentTick(2)), r()],
        ]
        .concat(),
    )
}

/// Assert that the run handed the Lease to pod 2.
pub(super) fn assert_handed_to_pod_2(report: &CheckReport) {
    assert_handed_to(report, 2);
}

/// Assert that the run handed the Lease to pod `k`.
pub(super) fn assert_handed_to(report: &CheckReport, k: i32) {
    let to = format!("HandLease {{ holder: Some(\"pg-{k}/");
    assert!(
        report.trace.iter().any(|l| l.contains(&to)),
        "{}",
        report.trace.join("\n")
    );
}

#[test]
fn a_failover_promotes_the_replica_that_received_the_most() {
    assert_handed_to_pod_2(&passes(lagging_replica_failover()));
}

#[test]
fn the_model_check_finds_a_failover_that_chooses_by_ordinal() {
    let failure = found::<ChooseByOrdinal>(lagging_replica_failover());
    assert!(
        failure.reason.contains("promoted pod 1 at WAL"),
        "the most-advanced invariant fails:\n{failure}"
    );
}

/// Pod 2 has received a commit pod 1 has not when pod 0, the primary, fails, and pod
/// 2 never answers the first survey. The failover runs on, with a second survey that
/// pod 2 answers.
fn failover_whose_survey_misses_the_most_advanced() -> (World, Vec<Event<Move, Edit>>) {
    lagging_replica_failover_with(
        vec![Event::Env(Move::AnswerLost(2))],
        vec![
            Event::Tick(15),
            r(),
            r(),
            Event::Env(Move::AgentTick(1)),
            Event::Env(Move::AgentTick(2)),
        ],
    )
}

#[test]
fn a_failover_surveys_again_for_a_member_whose_answer_timed_out_and_promotes_it() {
    let report = passes(failover_whose_survey_misses_the_most_advanced());
    assert_took(&report, "SwitchingOver -> SwitchingOver (SurveyRetried)");
    assert_handed_to_pod_2(&report);
}

#[test]
fn the_model_check_finds_a_failover_that_does_not_wait_for_a_member_that_did_not_answer() {
    // The behaviour before the bounded wait (the survey could miss the most advanced member): one answer is enough.
    let failure = found::<IgnoreTheQuorum>(failover_whose_survey_misses_the_most_advanced());
    assert!(
        failure
            .reason
            .contains("promoted pod 1 at WAL 0 while pod 2 had received 1"),
        "the most-advanced invariant fails:\n{failure}"
    );
}

/// With `spec.synchronous` (one standby, Required): pod 2 has received (and so
/// acknowledged) a commit pod 1 has not, then goes NotReady, and pod 0, the primary,
/// fails. The survey reads pod 1 alone.
fn synchronous_failover_with_the_acknowledging_standby_down() -> (World, Vec<Event<Move, Edit>>) {
    use Move::*;
    let env = Event::Env;
    let (mut world, events) = running_three(
        [
            vec![env(Write), env(Replicate(2)), env(BecomesUnready(2))],
            fail_over(),
            surveyed(),
            vec![r(), r()],
        ]
        .concat(),
    );
    world.synchronous = Some(required_one());
    (world, events)
}

/// A failover waiting for pod `k`: after a while it surveys again, `k` is Ready again,
/// and both standbys answer.
pub(super) fn ready_again_and_surveyed(k: i32) -> [Event<Move, Edit>; 8] {
    [
        Event::Tick(15),
        r(),
        Event::Env(Move::BecomesReady(k)),
        r(),
        Event::Env(Move::AgentTick(1)),
        Event::Env(Move::AgentTick(2)),
        r(),
        r(),
    ]
}

#[test]
fn with_synchronous_replication_a_failover_waits_for_the_member_it_did_not_read() {
    let (world, mut events) = synchronous_failover_with_the_acknowledging_standby_down();
    // It waits, then surveys again; pod 2 comes back, is read, and is promoted.
    events.extend(ready_again_and_surveyed(2));
    let report = passes((world, events));
    assert_took(&report, "SwitchingOver -> SwitchingOver (SurveyRetried)");
    assert_handed_to_pod_2(&report);
}

#[test]
fn the_model_check_finds_a_failover_that_ignores_the_synchronous_quorum() {
    let failure =
        found::<IgnoreTheQuorum>(synchronous_failover_with_the_acknowledging_standby_down());
    assert!(
        failure
            .reason
            .contains("short of the 1 a standby had acknowledged"),
        "the synchronous invariant fails:\n{failure}"
    );
}

/// Pod 0, the primary, fails; its pod lingers Terminating (its server may still run)
/// while the failover goes on.
fn lingering_primary_failover() -> (World, Vec<Event<Move, Edit>>) {
    running_three(
        [
            fail_over(),
            vec![
                r(),
                r(),
                r(),
                Event::Env(Move::AgentTick(1)),
                Event::Env(Move::AgentTick(2)),
                r(),
                r(),
            ],
        ]
        .concat(),
    )
}

#[test]
fn a_failover_waits_for_a_lingering_primary() {
    let report = passes(lingering_primary_failover());
    assert_took(&report, "SwitchingOver -> Ready (FailoverCompleted)");
}

#[test]
fn the_model_check_finds_a_promotion_before_the_old_primary_is_fenced() {
    let failure = found::<PromoteBeforeFenced>(lingering_primary_failover());
    assert!(
        failure.reason.contains("still runs a writable server")
            || failure.reason.contains("all run a writable server"),
        "the one-writable-server invariant fails:\n{failure}"
    );
    // Generated runs find it too, though not from every seed: the run needs a failover
    // or switchover while the old primary's agent has not looked yet. Of the seeds
    // `...seed 000N` for N = 1..=4 (the last byte), 1024 runs find it from 3 and 4 (and
    // from the default seed before the partition and skew moves were added).
    // (Since the agent's own decide runs in the model, with its non-atomic steps, the
    // seeds that find it changed: the first of these that does is taken. Since surveys
    // can time out (`Move::AnswerLost`), seed 8 found it first; since every run may draw
    // a hung WAL volume, of the bytes 0 to 15 only 9 and 13 do; the real machine passes
    // 1024 runs from 9.)
    let failure = [9u8, 13]
        .into_iter()
        .find_map(|n| {
            let mut seed = *b"lockstep/engine/check: seed 0001";
            seed[31] = n;
            try_check_machine::<PromoteBeforeFenced, World>(&CheckConfig {
                cases: 1024,
                seed,
                ..config()
            })
            .err()
            // A seed whose first failure is another consequence of the bug (a cluster
            // left with nobody writable to clone from) is passed over.
            .filter(|f| f.reason.contains("writable server") || f.reason.contains("promoted pod"))
        })
        .expect("generated runs find the planted bug");
    assert!(
        failure.reason.contains("writable server") || failure.reason.contains("promoted pod"),
        "{failure}"
    );
}

/// The operator trusts `renewTime + L` for the holder's expiry and leaves the clock
/// skew `S` out, and its own sighting of the renewal too: a holder whose clock runs
/// behind the operator's looks expired before it has certainly fenced itself (by
/// `renewTime + T + R + 1` on its own clock).
struct LeaveTheSkewOut;

impl Bug<Postgres> for LeaveTheSkewOut {
    const NAME: &'static str = "postgrescluster-expiry-without-skew";

    fn distort(_: &PgState, world: &Seen<Observed>) -> Option<Seen<Observed>> {
        // The bug: the expiry is `renewTime + L`; the machine adds the spec's `S`, so
        // the lie takes it off first.
        let mut lying = world.clone();
        let lease = lying.observed.own.lease.as_mut()?;
        lease.renewal_seen = None;
        let renewed = lease.renewed.as_mut()?;
        *renewed -= chrono::Duration::seconds(SKEW_SECONDS);
        Some(lying)
    }
}

/// Expire the Lease at `renewTime + L`, without the clock-skew bound.
type ExpiryWithoutSkew = Planted<Postgres, LeaveTheSkewOut>;

/// Pod 0, the primary, fails; the failover starts and labels it demoted, but before its
/// agent sees that, it is cut off from the API server (alive, writable, replicating,
/// unable to renew), its clock `skew × S` from the operator's. The old primary fences
/// itself within `T + R + 1` of its last renewal; the operator may hand the Lease over
/// only after `renewTime + L + S` by its own clock, and `L` after it saw that renewal.
fn partitioned_holder_failover_skewed(skew: i8) -> (World, Vec<Event<Move, Edit>>) {
    use Move::*;
    let env = Event::Env;
    // Two reconciles, the Job of the step finishes, three reconciles.
    let job_step = || {
        vec![
            r(),
            r(),
            env(AgentTick(1)),
            env(AgentTick(2)),
            r(),
            r(),
            r(),
        ]
    };
    running_three(
        [
            fail_over(),
            vec![
                r(),
                env(ClockSkew(skew)),
                // Its agent renews once more, by its slow clock, and is cut off.
                env(AgentTick(0)),
                env(Partition(0)),
                env(Write),
                // Within T of its last renewal: its agent keeps it writable.
                env(AgentTick(0)),
                // renewTime + L has passed by the operator's clock (the holder's runs
                // S behind), but not T since the renewal began: it may still write.
                Event::Tick(u32::try_from(LEASE_SECONDS - SKEW_SECONDS + 1).unwrap_or(6)),
            ],
            job_step(),
            // renewTime + L + S (by the operator's clock) has passed; so has the old
            // holder's own deadline, T + R + 1.
            vec![Event::Tick(16)],
            job_step(),
            vec![env(AgentTick(1)), env(AgentTick(2)), r(), r()],
        ]
        .concat(),
    )
}

/// The operator judges the holder's expiry by the holder's `renewTime + L + S` alone,
/// not by when it saw the renewal: a holder whose clock runs more than `S` behind looks
/// expired while it may still write.
struct TrustTheHoldersClock;

impl Bug<Postgres> for TrustTheHoldersClock {
    const NAME: &'static str = "postgrescluster-expiry-by-the-holders-clock";

    fn distort(_: &PgState, world: &Seen<Observed>) -> Option<Seen<Observed>> {
        let mut lying = world.clone();
        lying.observed.own.lease.as_mut()?.renewal_seen = None;
        Some(lying)
    }
}

/// `M`'s check of the partitioned holder's failover, its clock `skew × S` behind, fails
/// on the one-writable-server invariant.
fn finds_two_writers<M>(skew: i8)
where
    M: crate::engine::Machine<Observed = Observed, Action = PgAction, Spec = PostgresClusterSpec>,
    World: WorldModel<M, Move = Move, Edit = Edit>,
{
    let (world, events) = partitioned_holder_failover_skewed(skew);
    let failure = check_scenario::<M, World>(&config(), world, &events)
        .expect_err("the planted bug is found");
    assert!(
        failure.reason.contains("still runs a writable server")
            || failure.reason.contains("all run a writable server"),
        "the one-writable-server invariant fails:\n{failure}"
    );
}

/// The real machine's check of the same story completes the failover, and takes the old
/// primary for fenced only once the clock passed its expiry (16 s after the story's
/// first wait).
fn waits_for_the_partitioned_holder(skew: i8) {
    let (world, events) = partitioned_holder_failover_skewed(skew);
    let report = check_scenario::<Postgres, World>(&config(), world, &events)
        .unwrap_or_else(|failure| panic!("{failure}"));
    assert_took(&report, "SwitchingOver -> Ready (FailoverCompleted)");
    let at = |needle: &str| report.trace.iter().position(|l| l.contains(needle));
    assert!(
        at("clock +16s") < at("(OldPrimaryFenced)") && at("(OldPrimaryFenced)").is_some(),
        "{}",
        report.trace.join("\n")
    );
}

#[test]
fn the_model_check_finds_an_expiry_by_the_holders_clock_beyond_the_skew_bound() {
    finds_two_writers::<Planted<Postgres, TrustTheHoldersClock>>(-2);
}

/// A holder whose clock runs `2S` behind: the operator takes it for fenced only `L`
/// after it saw its last renewal, by which time the holder's own deadline has passed.
#[test]
fn a_failover_waits_for_a_partitioned_holder_whose_clock_runs_beyond_the_skew_bound() {
    waits_for_the_partitioned_holder(-2);
}

/// The old primary counts as fenced only once the clock passed `renewTime + L + S`.
#[test]
fn a_failover_waits_for_a_partitioned_holder_with_a_slow_clock() {
    waits_for_the_partitioned_holder(-1);
}

#[test]
fn the_model_check_finds_an_expiry_that_leaves_the_clock_skew_out() {
    finds_two_writers::<ExpiryWithoutSkew>(-1);
}

/// A failover's target, handed the Lease and labelled primary, is cut off from the API
/// server before its agent promotes it, then stops being Ready: the operator moves on to
/// another target once the Lease expires. The first target is never promoted (only its
/// own agent promotes it, right after a renewal it cannot make; the operator only
/// waits for its report), so the hand-over to the second makes no second writable server, even after
/// the first reaches the API server again.
#[test]
fn a_target_cut_off_before_it_promotes_is_never_promoted_once_the_lease_moved_on() {
    use super::scenarios::story::adopt;
    use Move::*;
    let env = Event::Env;
    let mut world = World::fresh(3, false, 0);
    world.running();
    let story = vec![
        r(),
        // The Lease names pod 1; before its agent looks, it is cut off.
        env(Partition(1)),
        env(Recreate(0)),
        r(),
        r(),
        env(AgentTick(1)),
        env(BecomesUnready(1)),
        env(AgentTick(0)),
        env(AgentTick(2)),
        r(),
        r(),
        Event::Tick(u32::try_from(LEASE_SECONDS + SKEW_SECONDS + 1).unwrap_or(60)),
        r(),
        r(),
        r(),
        env(AgentTick(2)),
        env(Heal(1)),
        env(AgentTick(1)),
        env(AgentTick(0)),
        env(AgentTick(2)),
        r(),
        r(),
    ];
    let events = [adopt(), fail_over(), surveyed(), story].concat();
    let report = check_scenario::<Postgres, World>(&config(), world, &events)
        .unwrap_or_else(|failure| panic!("{failure}"));
    let trace = report.trace.join("\n");
    assert_took(&report, "SwitchingOver -> SwitchingOver (TargetChanged)");
    assert_took(&report, "SwitchingOver -> Ready (FailoverCompleted)");
    assert!(trace.contains("primary: 2"), "{trace}");
}

/// A planned switchover (pod 2 must go: a scale-down) whose target, pod 0, is not Ready
/// when the old primary stops cleanly, so it misses the old primary's last commits, and
/// is Ready again when the Lease is handed to it: it does not promote short of the
/// position the old primary released the Lease at.
#[test]
fn a_switchover_target_that_missed_the_old_primarys_last_commits_does_not_promote() {
    use Move::*;
    let r = || Event::Reconcile(Reconcile::FRESH);
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
        r(),
        env(BecomesUnready(0)),
        env(BecomesUnready(1)),
        env(Write),
        env(AgentTick(2)),
        // The clean stop finishes; the agent releases the Lease.
        env(ServerStops(2)),
        env(AgentTick(2)),
        env(BecomesReady(0)),
        env(BecomesReady(1)),
        r(),
        r(),
        r(),
        env(AgentTick(0)),
        env(AgentTick(1)),
    ];
    let report = check_scenario::<Postgres, World>(&config(), world, &events)
        .unwrap_or_else(|failure| panic!("{failure}"));
    let trace = report.trace.join("\n");
    // Held back (its manager promotes only once it has the released position), it is
    // promoted only once a person removed the position from the Lease (the settling
    // world's escape hatch).
    let at = |needle: &str| report.trace.iter().position(|l| l.contains(needle));
    assert!(at("faults stop").is_some(), "{trace}");
    assert!(
        at("faults stop") < at("(SwitchoverCompleted)"),
        "promoted short of the released position: {trace}"
    );
}

// --- fencing, the operator's side: a lowered L, a vanished pod, a hung primary, a deleted Lease ---

/// The old operator (a lowered `L`): the holder's expiry counts only the spec's `L`, not
/// the longer one a pod created before `spec.fencing.leaseDurationSeconds` was lowered
/// fences itself by (nor the one the Lease carries).
struct ForgetTheLongerLease;

impl Bug<Postgres> for ForgetTheLongerLease {
    const NAME: &'static str = "postgrescluster-expiry-by-the-spec-alone";

    fn distort(_: &PgState, world: &Seen<Observed>) -> Option<Seen<Observed>> {
        // The bug: nothing but the spec says how long a holder may run.
        let mut lying = world.clone();
        lying.observed.own.lease_seconds.clear();
        lying.observed.own.lease.as_mut()?.duration = 0;
        Some(lying)
    }
}

/// The old operator (a vanished pod): a holder whose pod is no longer observed counts as
/// fenced (as if it had released the Lease).
struct TakeTheVanishedForFenced;

impl Bug<Postgres> for TakeTheVanishedForFenced {
    const NAME: &'static str = "postgrescluster-vanished-pod-is-fenced";

    fn distort(_: &PgState, world: &Seen<Observed>) -> Option<Seen<Observed>> {
        let holder = world.observed.own.lease.as_ref()?.holder.clone()?;
        if world.observed.holder_ordinal(&holder).is_some() {
            return None;
        }
        // The bug: "the pod is gone" reads as a release.
        let mut lying = world.clone();
        lying.observed.own.lease.as_mut()?.released_by = Some(holder);
        Some(lying)
    }
}

/// Expire the Lease by the spec's `L` alone.
type ExpiryBySpecAlone = Planted<Postgres, ForgetTheLongerLease>;
/// Take a vanished pod for fenced.
type VanishedPodIsFenced = Planted<Postgres, TakeTheVanishedForFenced>;

/// A cluster running with `L` = 120 s (its pods created with it) whose user lowers it
/// to 15 s; then the primary, pod 0, is cut off from the API server and stops being
/// Ready; a failover follows. The old primary fences itself only `T + R + 1` = 63 s
/// after its last renewal; the spec's `L + S` = 45 s is too short a wait.
fn lowered_lease_failover() -> (World, Vec<Event<Move, Edit>>) {
    use Move::*;
    let env = Event::Env;
    let mut world = World::fresh(3, false, 0);
    world.lease_seconds = LONG_LEASE_SECONDS;
    world.running();
    let events = vec![
        r(),
        r(),
        r(),
        Event::Edit(Edit::LeaseSeconds(LEASE_SECONDS)),
        r(),
        env(Partition(0)),
        env(Write),
        env(BecomesUnready(0)),
        r(),
        Event::Tick(31),
        r(),
        r(),
        // 47 s after the last renewal: past the spec's L + S, short of the pod's T + R + 1.
        Event::Tick(16),
        r(),
        r(),
        env(AgentTick(1)),
        env(AgentTick(2)),
        r(),
        r(),
        env(AgentTick(1)),
        env(AgentTick(2)),
        r(),
    ];
    (world, events)
}

#[test]
fn a_failover_waits_for_the_longest_lease_any_living_holder_may_use() {
    let report = passes(lowered_lease_failover());
    assert_took(&report, "SwitchingOver -> Ready (FailoverCompleted)");
}

#[test]
fn the_model_check_finds_an_expiry_by_the_lowered_spec_alone() {
    let failure = found::<ExpiryBySpecAlone>(lowered_lease_failover());
    assert!(
        failure.reason.contains("still runs a writable server")
            || failure.reason.contains("all run a writable server"),
        "the one-writable-server invariant fails:\n{failure}"
    );
}

/// A planned switchover (pod 2 must go: a scale-down) whose old primary's pod is
/// force-deleted while its node is partitioned, before its agent saw the demotion: the
/// pod object is gone, its server runs on until its own fence stops it.
fn force_deleted_switchover() -> (World, Vec<Event<Move, Edit>>) {
    use Move::*;
    let env = Event::Env;
    let mut world = World::fresh(3, false, 0);
    world.running();
    world.primary_moved_to(2);
    // Required, so that a switchover whose old primary released no position surveys
    // the standbys (asynchronously it would wait for a person).
    world.synchronous = Some(required_one());
    let events = vec![
        r(),
        r(),
        r(),
        r(),
        Event::Edit(Edit::Replicas(2)),
        r(),
        r(),
        env(ForceDeleted(2)),
        env(Write),
        r(),
        r(),
        r(),
        // Pod 2 released no position: the standbys are surveyed before the hand-over.
        env(AgentTick(0)),
        env(AgentTick(1)),
        r(),
        r(),
        env(AgentTick(0)),
        env(Write),
        r(),
    ];
    (world, events)
}

#[test]
fn a_switchover_does_not_take_a_force_deleted_pod_for_fenced() {
    let report = passes(force_deleted_switchover());
    assert_took(&report, "SwitchingOver -> Ready (SwitchoverCompleted)");
    // Nothing was handed over while pod 2's server ran on: only once the settling
    // world's person said it is down.
    let at = |needle: &str| report.trace.iter().position(|l| l.contains(needle));
    assert!(
        at("faults stop") < at("(LeaseHandedOver)") && at("(LeaseHandedOver)").is_some(),
        "{}",
        report.trace.join("\n")
    );
}

#[test]
fn the_model_check_finds_a_vanished_pod_taken_for_fenced() {
    let failure = found::<VanishedPodIsFenced>(force_deleted_switchover());
    assert!(
        failure.reason.contains("writable server"),
        "the one-writable-server invariant fails:\n{failure}"
    );
}

/// Generated runs find the vanished-pod bug too (from the seed `...seed 0003`; of the
/// last bytes 1..=12, 1024 runs find it from 3, 4, 5, 8 and 11, and other failures from
/// the rest), and shrink it to a short story. From seeds 2 and 7 the unplanted machine
/// fails too: an open finding, see `docs/fencing.md` (Known gaps).
/// The planted bug of a lowered `L` is found by its scenario
/// ([`the_model_check_finds_an_expiry_by_the_lowered_spec_alone`]): what generated runs
/// of it found from these seeds were other failures.
#[test]
fn generated_runs_find_a_vanished_pod_taken_for_fenced_and_shrink_it() {
    let mut seed = *b"lockstep/engine/check: seed 0001";
    seed[31] = 3;
    let failure = try_check_machine::<VanishedPodIsFenced, World>(&CheckConfig {
        cases: 1024,
        seed,
        ..config()
    })
    .expect_err("generated runs find a vanished pod taken for fenced");
    assert!(
        failure.reason.contains("handed from pod") && failure.reason.contains("writable server"),
        "{failure}"
    );
    assert!(failure.events.len() <= 20, "shrunk: {failure}");
}
