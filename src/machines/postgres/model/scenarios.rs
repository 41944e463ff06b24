//! The model check itself: generated runs, and scenarios for the edges they seldom reach.

use super::*;
use crate::engine::check::check_scenario;

/// How long a survey waits after its answers were read before it asks again, as a
/// clock step.
const RESURVEY: u32 =
    crate::machines::postgres::decide::switching_over::surveying::RESURVEY_SECONDS as u32 + 1;

/// How long a survey waits for answers, as a clock step.
const WAIT_FOR_ANSWERS: u32 =
    crate::machines::postgres::decide::switching_over::surveying::SURVEY_WAIT_SECONDS as u32 + 1;

/// The bound of one promote attempt, as a clock step: past it, the attempt failed.
const PROMOTE_WAIT: u32 =
    crate::machines::postgres::decide::switching_over::promote::PROMOTE_WAIT_SECONDS as u32;

/// The model check's configuration (the planted bugs run under it too).
pub(super) fn config() -> CheckConfig {
    CheckConfig {
        cases: 512,
        max_events: 80,
        liveness_reconciles: 96,
        ..CheckConfig::default()
    }
}

/// A running cluster of `replicas` at version 0 (`backup`: with a destination).
pub(super) fn running(replicas: i32, backup: bool) -> World {
    let mut world = World::fresh(replicas, backup, 0);
    world.running();
    world
}

/// Pieces of the stories the scenarios (and the planted bugs' and fencing checks) tell.
pub(super) mod story {
    use super::*;

    /// Seconds after which a Lease renewed now has certainly expired (`L + S + 1`).
    pub(crate) fn expired() -> u32 {
        u32::try_from(LEASE_SECONDS + SKEW_SECONDS + 1).unwrap_or(u32::MAX)
    }

    /// A reconcile with fresh caches.
    pub(crate) fn r() -> Event<Move, Edit> {
        Event::Reconcile(Reconcile::FRESH)
    }

    /// From adoption to Ready (the extra reconciles are quiet).
    pub(crate) fn adopt() -> Vec<Event<Move, Edit>> {
        vec![r(), r(), r(), r()]
    }

    /// Pod 0, the primary, stops being Ready; after failoverDelaySeconds a failover to
    /// pod 1 begins.
    pub(crate) fn fail_over() -> Vec<Event<Move, Edit>> {
        vec![
            Event::Env(Move::BecomesUnready(0)),
            r(),
            Event::Tick(60),
            r(),
        ]
    }

    /// The failover runs up to its survey: demote and delete pod 0, which goes (a
    /// vanished pod is not proof that its server stopped: the Lease it renewed until
    /// then expires `L + S` later); the survey is asked on the Lease.
    pub(crate) fn asked() -> Vec<Event<Move, Edit>> {
        vec![
            r(),
            Event::Env(Move::Terminated(0)),
            Event::Tick(expired()),
            r(),
            r(),
        ]
    }

    /// [`asked`], then pods 1 and 2's agents answer at their rounds and the answers
    /// are read.
    pub(crate) fn surveyed() -> Vec<Event<Move, Edit>> {
        [
            asked(),
            vec![
                Event::Env(Move::AgentTick(1)),
                Event::Env(Move::AgentTick(2)),
                r(),
            ],
        ]
        .concat()
    }

    /// [`asked`], but neither pod 1 nor pod 2 answers; the survey's wait runs out.
    pub(crate) fn unanswered() -> Vec<Event<Move, Edit>> {
        [
            vec![
                Event::Env(Move::AnswerLost(1)),
                Event::Env(Move::AnswerLost(2)),
            ],
            asked(),
            vec![Event::Tick(WAIT_FOR_ANSWERS), r()],
        ]
        .concat()
    }
}

/// The primary's pod is evicted, a failover starts, and the only standby's volume is
/// lost: no standby can be promoted (`BackToOldPrimary`).
pub(super) fn failover_losing_the_only_standby() -> (World, Vec<Event<Move, Edit>>) {
    use Move::*;
    use story::r;
    let env = Event::Env;
    let mut world = World::fresh(2, false, 0);
    world.running();
    let events = vec![
        r(),
        r(),
        r(),
        env(Evicted(0)),
        r(),
        Event::Tick(30),
        r(),
        env(VolumeLost(1)),
    ];
    (world, events)
}

/// A switchover to pod 2 is requested in a three-instance cluster, and the volumes of
/// pods 1 and 2 are lost as it begins: the target comes back empty, and no replica can
/// be promoted (`BackToOldPrimary`).
pub(super) fn switchover_losing_every_standby() -> (World, Vec<Event<Move, Edit>>) {
    use Move::*;
    use story::r;
    let env = Event::Env;
    let mut world = World::fresh(3, false, 0);
    world.running();
    let events = vec![
        r(),
        r(),
        r(),
        env(RequestSwitchover(2)),
        r(),
        env(VolumeLost(1)),
        env(VolumeLost(2)),
    ];
    (world, events)
}

/// Pod 1's standby is promoted by hand under a garbled role label, and pod 0's volume is
/// lost: pod 1 is the one member with data, still labelled `replica`.
pub(super) fn hand_promoted_standby_and_lost_primary_volume() -> (World, Vec<Event<Move, Edit>>) {
    use Move::*;
    let env = Event::Env;
    let mut world = World::fresh(2, false, 0);
    world.running();
    let events = vec![
        env(LabelGarbled(1)),
        env(PromotedByHand(1)),
        env(VolumeLost(0)),
    ];
    (world, events)
}

/// Pod 2's rewind fails once, it is promoted by hand (its agent fences it), and the
/// volumes of pods 0 and 1 are lost: pod 2's diverged data is all that is left, and no
/// standby can start without a primary to follow.
pub(super) fn only_data_on_a_member_that_cannot_follow() -> (World, Vec<Event<Move, Edit>>) {
    use Move::*;
    use story::r;
    let env = Event::Env;
    let mut world = World::fresh(3, false, 0);
    world.running();
    let events = vec![
        env(TaskFails(2)),
        r(),
        r(),
        r(),
        env(PromotedByHand(2)),
        env(VolumeLost(0)),
        env(VolumeLost(1)),
    ];
    (world, events)
}

/// Two members; pod 0's role label garbled, so it counts as lost and a failover chooses
/// pod 1 and hands it the Lease; pod 1's volume is lost before it promotes. The old
/// primary's pod, recreated on its volume, holds the only copy of the data, but a target
/// was chosen, so the failover cannot go back to it: only the person's `adopt-primary`
/// (the settling world names pod 0) ends it.
pub(super) fn chosen_target_lost_before_it_promoted() -> (World, Vec<Event<Move, Edit>>) {
    use Move::*;
    use story::r;
    let env = Event::Env;
    let mut world = World::fresh(2, false, 0);
    world.running();
    let events = vec![
        env(LabelGarbled(0)),
        r(),
        r(),
        r(),
        Event::Tick(4),
        r(),
        Event::Tick(42),
        r(),
        r(),
        r(),
        r(),
        Event::Tick(2),
        r(),
        r(),
        env(VolumeLost(1)),
    ];
    (world, events)
}

/// The replicas already run the new image; pod 1's stream breaks and a commit reaches
/// pod 2 only; the upgrade's switchover makes pod 1 the target. The old primary stops
/// cleanly and releases at the commit, which pod 1 cannot get, so it reports no
/// promotion within the bound (`TargetShortOfReleased`) and pod 2, surveyed, is promoted.
pub(super) fn upgrade_target_short_of_released() -> (World, Vec<Event<Move, Edit>>) {
    use Move::*;
    use story::r;
    let env = Event::Env;
    let mut world = World::fresh(3, false, 0);
    world.running();
    for k in [1, 2] {
        if let Some(p) = world.pods.get_mut(&k) {
            p.image = image(1);
        }
    }
    let events = vec![
        env(StreamBreaks(1)),
        env(Write),
        Event::Edit(Edit::Version(1)),
        r(),
        r(),
        r(),
        r(),
        r(),
        env(AgentTick(0)),
        r(),
        env(AgentTick(1)),
        Event::Tick(PROMOTE_WAIT),
        r(),
    ];
    (world, events)
}

/// Scenarios for the edges generated sequences seldom reach: the edge (`From -> To
/// (Reason)`), the world and a short story that takes it (the liveness phase then
/// settles the world as for any run).
fn scenarios() -> Vec<Scenario<World, Move, Edit>> {
    use Move::*;
    use story::{adopt, fail_over, r, surveyed, unanswered};
    let env = Event::Env;
    // ... then on to its promotion: the most advanced standby chosen; the Lease handed
    // to it; pod 0 back; the target labelled primary; the target's agent promotes it.
    let to_promote = || {
        [
            surveyed(),
            vec![r(), env(Recreate(0)), r(), r(), env(AgentTick(1))],
        ]
        .concat()
    };
    // Ready, then an on-demand backup begins.
    let backing_up = || [adopt(), vec![env(RequestBackup), r()]].concat();
    // The primary's pod freezes (still Ready), and L + S passes without a renewal.
    let frozen = || vec![env(Pause(0)), Event::Tick(46), r()];
    // The Job running fails, and its backoff passes.
    let job_fails_and_backs_off = || {
        vec![
            env(JobFinishes { nth: 0, ok: false }),
            r(),
            Event::Tick(120),
            r(),
        ]
    };
    // Deleted, and the final backup Job started.
    let finalizing = || vec![Event::Delete, r(), r()];
    // spec.replicas set to `a`, then to `b`, each reconciled.
    let rescale = |a: i32, b: i32| {
        vec![
            Event::Edit(Edit::Replicas(a)),
            r(),
            Event::Edit(Edit::Replicas(b)),
            r(),
        ]
    };
    let (abandoned, abandoned_events) = failover_losing_the_only_standby();
    let (short, short_events) = upgrade_target_short_of_released();
    vec![
        (
            // The only standby's volume is lost mid-failover.
            "SwitchingOver -> PrimaryLost (BackToOldPrimary)",
            abandoned,
            abandoned_events,
        ),
        (
            // An upgrade's target missed the released position.
            "SwitchingOver -> SwitchingOver (TargetShortOfReleased)",
            short,
            short_events,
        ),
        (
            // The primary freezes at rest.
            "Ready -> PrimaryLost (PrimaryNotRenewing)",
            running(3, false),
            [adopt(), frozen()].concat(),
        ),
        (
            // The primary freezes while a replica is added.
            "Scaling -> PrimaryLost (PrimaryNotRenewing)",
            running(2, false),
            [adopt(), vec![Event::Edit(Edit::Replicas(3)), r()], frozen()].concat(),
        ),
        (
            // The primary freezes mid-upgrade.
            "Upgrading -> PrimaryLost (PrimaryNotRenewing)",
            running(3, false),
            [adopt(), vec![Event::Edit(Edit::Version(1)), r()], frozen()].concat(),
        ),
        (
            // The primary freezes during an on-demand backup.
            "BackingUp -> PrimaryLost (PrimaryNotRenewing)",
            running(3, true),
            [backing_up(), frozen()].concat(),
        ),
        (
            // A cluster whose primary moved to pod 1 lost its status: adopted as it runs.
            "Creating -> Ready (Adopted)",
            {
                let mut world = running(3, false);
                world.primary_moved_to(1);
                world
            },
            adopt(),
        ),
        (
            // Deleted at rest with skip-final-backup.
            "Ready -> Finalized (FinalBackupSkipped)",
            running(3, true),
            [adopt(), vec![env(SkipFinalBackup), Event::Delete, r()]].concat(),
        ),
        (
            // Deleted with skip-final-backup while the primary is lost.
            "PrimaryLost -> Finalized (FinalBackupSkipped)",
            running(3, true),
            [
                adopt(),
                vec![
                    env(BecomesUnready(0)),
                    r(),
                    env(SkipFinalBackup),
                    Event::Delete,
                    r(),
                ],
            ]
            .concat(),
        ),
        (
            // Deleted with skip-final-backup during an on-demand backup.
            "BackingUp -> Finalized (FinalBackupSkipped)",
            running(3, true),
            [backing_up(), vec![env(SkipFinalBackup), Event::Delete, r()]].concat(),
        ),
        (
            // The failover's target does not finish promoting within the bound: the
            // next attempt waits again.
            "SwitchingOver -> SwitchingOver (PromotionRetried)",
            running(3, false),
            [
                adopt(),
                fail_over(),
                to_promote(),
                vec![Event::Tick(PROMOTE_WAIT), r()],
            ]
            .concat(),
        ),
        (
            // Nobody answers the failover's survey; after its wait another one asks.
            "SwitchingOver -> SwitchingOver (SurveyRetried)",
            running(3, false),
            [
                adopt(),
                fail_over(),
                unanswered(),
                vec![Event::Tick(RESURVEY), r()],
            ]
            .concat(),
        ),
        (
            // Mid-failover someone clears the Lease the target was handed: it is fenced
            // (the Lease expires) and handed over again before the promotion.
            "SwitchingOver -> SwitchingOver (LeaseLost)",
            running(3, false),
            [
                adopt(),
                fail_over(),
                surveyed(),
                vec![r(), env(LeaseCleared), r()],
            ]
            .concat(),
        ),
        (
            // The chosen pod comes back at another image: a reconcile on a cache from
            // before the upgrade (it read Ready at the old version) put the old image back
            // into the template before its status write was refused; the pod is then
            // evicted and recreated from that template.
            "Upgrading -> Upgrading (Replanned)",
            running(2, false),
            [
                adopt(),
                vec![
                    Event::Edit(Edit::Version(1)),
                    r(),
                    r(),
                    r(),
                    Event::Restart,
                    Event::Reconcile(Reconcile {
                        object_lag: 5,
                        ..Reconcile::FRESH
                    }),
                    env(Evicted(1)),
                    env(Recreate(1)),
                    r(),
                ],
            ]
            .concat(),
        ),
        (
            // After a failover pod 1 is primary; a scale to 2 begins, then spec.replicas
            // drops to 1, which would remove it.
            "Scaling -> SwitchingOver (PrimaryOutsideScale)",
            running(3, false),
            [
                adopt(),
                fail_over(),
                to_promote(),
                vec![
                    env(PromotionEnds(1)),
                    env(AgentTick(1)),
                    r(),
                    env(BecomesReady(0)),
                    r(),
                ],
                rescale(2, 1),
            ]
            .concat(),
        ),
        (
            // The failover's target stops being Ready before the Lease is handed to it.
            "SwitchingOver -> SwitchingOver (TargetChanged)",
            running(3, false),
            [
                adopt(),
                fail_over(),
                surveyed(),
                vec![env(BecomesUnready(1)), r()],
            ]
            .concat(),
        ),
        (
            // The backup Job finishes and is deleted (a TTL controller, a cleanup) before
            // the operator read its outcome: reported, and not run again.
            "BackingUp -> Ready (BackupLost)",
            running(1, true),
            [
                backing_up(),
                vec![
                    env(JobFinishes { nth: 0, ok: true }),
                    env(BackupJobDeleted(0)),
                    r(),
                    r(),
                ],
            ]
            .concat(),
        ),
        (
            // The on-demand backup fails.
            "BackingUp -> Ready (BackupFailed)",
            running(1, true),
            [
                backing_up(),
                vec![env(JobFinishes { nth: 0, ok: false }), r()],
            ]
            .concat(),
        ),
        (
            // The primary stops being Ready while an on-demand backup runs.
            "BackingUp -> PrimaryLost (PrimaryNotReady)",
            running(1, true),
            [backing_up(), vec![env(BecomesUnready(0)), r()]].concat(),
        ),
        (
            // spec.replicas changes again while a replica is added.
            "Scaling -> Scaling (ReplicasChanged)",
            running(2, false),
            [adopt(), rescale(3, 2)].concat(),
        ),
        (
            // Deleted; the final backup Job fails once, and after its backoff another runs.
            "Finalizing -> Finalizing (FinalBackupRetried)",
            running(1, true),
            [adopt(), finalizing(), job_fails_and_backs_off()].concat(),
        ),
        (
            // Deleted while backing up.
            "BackingUp -> Finalizing (DeletionRequested)",
            running(1, true),
            [backing_up(), vec![Event::Delete, r()]].concat(),
        ),
        (
            // Deleted while scaling, without a backup destination.
            "Scaling -> Finalized (NoBackupPolicy)",
            running(1, false),
            [
                adopt(),
                vec![Event::Edit(Edit::Replicas(2)), r(), Event::Delete, r()],
            ]
            .concat(),
        ),
        (
            // Deleted while scaling, skip-final-backup set.
            "Scaling -> Finalized (FinalBackupSkipped)",
            running(1, true),
            [
                adopt(),
                vec![
                    env(SkipFinalBackup),
                    Event::Edit(Edit::Replicas(2)),
                    r(),
                    Event::Delete,
                    r(),
                ],
            ]
            .concat(),
        ),
        (
            // Deleted while upgrading, skip-final-backup set.
            "Upgrading -> Finalized (FinalBackupSkipped)",
            running(1, true),
            [
                adopt(),
                vec![
                    env(SkipFinalBackup),
                    Event::Edit(Edit::Version(1)),
                    r(),
                    Event::Delete,
                    r(),
                ],
            ]
            .concat(),
        ),
        (
            // Deleted while backing up, spec.backup gone.
            "BackingUp -> Finalized (NoBackupPolicy)",
            running(1, true),
            [
                backing_up(),
                vec![Event::Edit(Edit::ToggleBackup), Event::Delete, r()],
            ]
            .concat(),
        ),
        (
            // spec.backup is removed while the final backup runs.
            "Finalizing -> Finalized (NoBackupPolicy)",
            running(1, true),
            [
                adopt(),
                finalizing(),
                vec![Event::Edit(Edit::ToggleBackup), r()],
            ]
            .concat(),
        ),
        (
            // Deleted mid-upgrade.
            "Upgrading -> Finalizing (DeletionRequested)",
            running(3, true),
            [
                adopt(),
                vec![Event::Edit(Edit::Version(1)), r(), Event::Delete, r()],
            ]
            .concat(),
        ),
        (
            // The primary stops being Ready while a replica is added.
            "Scaling -> PrimaryLost (PrimaryNotReady)",
            running(2, false),
            [
                adopt(),
                vec![
                    Event::Edit(Edit::Replicas(3)),
                    r(),
                    env(BecomesUnready(0)),
                    r(),
                ],
            ]
            .concat(),
        ),
        (
            // Deleted while scaling.
            "Scaling -> Finalizing (DeletionRequested)",
            running(3, true),
            [
                adopt(),
                vec![Event::Edit(Edit::Replicas(2)), r(), Event::Delete, r()],
            ]
            .concat(),
        ),
        (
            // A switchover on demand makes pod 2 primary; spec.replicas then drops to 2.
            "Ready -> SwitchingOver (PrimaryOutsideScale)",
            running(3, false),
            [
                adopt(),
                vec![env(RequestSwitchover(2))],
                (0..20).flat_map(|_| [r(), Event::Tick(5)]).collect(),
                vec![Event::Edit(Edit::Replicas(2)), r()],
            ]
            .concat(),
        ),
        (
            // Deleted during a failover.
            "SwitchingOver -> Finalizing (DeletionRequested)",
            running(3, true),
            [adopt(), fail_over(), vec![Event::Delete, r()]].concat(),
        ),
        (
            // Deleted during a failover, without a backup destination.
            "SwitchingOver -> Finalized (NoBackupPolicy)",
            running(3, false),
            [adopt(), fail_over(), vec![Event::Delete, r()]].concat(),
        ),
        {
            let (world, events) = only_data_on_a_member_that_cannot_follow();
            ("PrimaryLost -> Creating (AdoptionRequested)", world, events)
        },
        {
            let (world, events) = chosen_target_lost_before_it_promoted();
            (
                "SwitchingOver -> Creating (AdoptionRequested)",
                world,
                events,
            )
        },
        (
            // Deleted mid-restore, after spec.backup was removed.
            "RestoringInPlace -> Finalized (NoBackupPolicy)",
            running(3, true),
            [
                adopt(),
                vec![
                    env(Write),
                    env(RequestRestore(128)),
                    r(),
                    Event::Edit(Edit::ToggleBackup),
                    Event::Delete,
                    r(),
                ],
            ]
            .concat(),
        ),
        (
            // A second restore is asked for while the first one runs: it starts again,
            // from its first step, for the new target.
            "RestoringInPlace -> RestoringInPlace (RestoreRequested)",
            running(3, true),
            [
                adopt(),
                vec![
                    env(Write),
                    env(RequestRestore(128)),
                    r(),
                    env(RequestRestore(64)),
                    r(),
                ],
            ]
            .concat(),
        ),
        (
            // Deleted mid-restore: the final backup is taken first.
            "RestoringInPlace -> Finalizing (DeletionRequested)",
            running(3, true),
            [
                adopt(),
                vec![
                    env(Write),
                    env(RequestRestore(128)),
                    r(),
                    Event::Delete,
                    r(),
                ],
            ]
            .concat(),
        ),
        (
            // Deleted mid-restore with skip-final-backup: no final backup is taken.
            "RestoringInPlace -> Finalized (FinalBackupSkipped)",
            running(3, true),
            [
                adopt(),
                vec![
                    env(Write),
                    env(RequestRestore(128)),
                    r(),
                    env(SkipFinalBackup),
                    Event::Delete,
                    r(),
                ],
            ]
            .concat(),
        ),
        (
            // Deleted during a failover, with skip-final-backup.
            "SwitchingOver -> Finalized (FinalBackupSkipped)",
            running(3, true),
            [
                adopt(),
                fail_over(),
                vec![env(SkipFinalBackup), Event::Delete, r()],
            ]
            .concat(),
        ),
    ]
}

#[test]
fn the_postgres_machine_keeps_one_primary_converges_under_faults_and_takes_every_edge() {
    let report = check_machine::<Postgres, World>(config());
    assert!(report.writes > 0);
    // The Replanned scenario reads a cache five events old.
    let scenario = CheckConfig {
        max_staleness: 6,
        ..config()
    };
    let all = [scenarios(), super::hibernation::scenarios()].concat();
    assert_every_edge_taken::<Postgres, World>(&scenario, &report, all);
    // The agent's edges: generated runs, then stories for those they seldom take.
    for (edge, world, events) in super::agent::stories::all() {
        check_scenario::<Postgres, World>(&config(), world, &events)
            .unwrap_or_else(|failure| panic!("the story for {edge}: {failure}"));
    }
    let untaken = super::agent::agent_edges_never_taken();
    assert!(
        untaken.is_empty(),
        "agent edges no run took:\n{}\ntaken:\n{:?}",
        untaken.join("\n"),
        super::agent::agent_edges_taken()
    );
}

/// Seen on the real node: the primary's server crashes; its container comes back in
/// place, still holding the Lease, and starts writable before any standby reconnects;
/// the failover demotes it, it stops cleanly and releases the Lease naming a position
/// nobody received. The failover still promotes the most advanced standby (what only
/// the old primary had is the asynchronous window's loss), never waits for that
/// position forever.
#[test]
fn a_failover_promotes_even_when_the_old_primary_came_back_and_released_a_position_nobody_has() {
    use Move::*;
    use story::{adopt, r};
    let env = Event::Env;
    let events = [
        adopt(),
        vec![
            env(ServerCrashes(0)),
            env(BecomesUnready(0)),
            r(),
            // Its container restarts and starts writable: no standby is connected.
            env(AgentTick(0)),
            env(AgentTick(0)),
            env(Write),
            Event::Tick(60),
            r(),
            r(),
            // Demoted, it stops cleanly (nobody to send its last WAL to) and releases.
            env(AgentTick(0)),
            env(ServerStops(0)),
            env(AgentTick(0)),
            r(),
            r(),
            env(AgentTick(1)),
            env(AgentTick(2)),
            r(),
            r(),
            r(),
            env(AgentTick(1)),
        ],
    ]
    .concat();
    if let Err(failure) = check_scenario::<Postgres, World>(&config(), running(3, false), &events) {
        panic!("{failure}");
    }
}
