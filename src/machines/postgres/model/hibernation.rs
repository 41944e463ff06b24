//! Hibernation in the PostgresCluster world (`spec.hibernate`): the person sets it and
//! clears it ([`Edit::Hibernate`]); the operator scales the StatefulSet to zero, waits
//! until every server stopped, and wakes the cluster with the primary it had.
//!
//! Invariants:
//! - while the cluster is asleep, no pod runs a server;
//! - it wakes with the primary that holds the writable timeline (the one it slept with):
//!   no other member is given the primary label or the Lease.
//!
//! Its generated runs are a focused world's ([`Hibernating`]): the whole world's keep
//! their seeds, and the scenarios (`scenarios.rs`) take each of its edges.

use super::focused::{Focus, Focused};
use super::scenarios::{config, running, story};
use super::*;
use crate::engine::check::check_machine;
use crate::machines::postgres::state::HibernateStep;

impl World {
    /// The person deleted the cluster: one told that a hibernated cluster's final backup
    /// needs a running primary wakes it (the way out the operator's message names).
    pub(super) fn wake_if_deleted(&mut self) {
        if self.deleted {
            self.hibernate = false;
        }
    }

    /// At rest asleep: nothing runs, the StatefulSet holds no pod, no backup is
    /// scheduled, and the state names the primary that holds the writable timeline.
    pub(super) fn asleep(&self, state: &PgState) -> bool {
        let PgState::Hibernating(h) = state else {
            return false;
        };
        self.quiet_settles >= 2
            && h.hibernate_step == HibernateStep::Asleep
            && self.pods.is_empty()
            && self.sts == Some((h.cluster.image.clone(), 0))
            && self.cronjob.is_none()
            && self.in_sync == InSync::ALL
            && h.cluster.primary == self.db_primary
    }

    /// Hibernation's invariants in `state`.
    pub(super) fn hibernation_invariants(&self, state: &PgState) -> Result<(), String> {
        let PgState::Hibernating(h) = state else {
            return Ok(());
        };
        // A force-deleted pod's process is invisible to any operator; what asleep
        // promises of one still running is that its fence has passed: paused, it is
        // killed as it resumes (found by the deep check: a paused primary force-deleted
        // while the cluster stopped, its server still up, fenced).
        let fenced = |p: &Pod| p.paused && p.agent.guarded() && self.fence_passed(p);
        if h.hibernate_step == HibernateStep::Asleep
            && let Some((k, _)) = self
                .pods
                .iter()
                .find(|(_, p)| p.server != Srv::Down && !fenced(p))
        {
            return Err(format!(
                "pod {} runs a server while the cluster is asleep",
                ordinal(*k)
            ));
        }
        if h.cluster.primary != self.db_primary {
            return Err(format!(
                "hibernation names pod {} the primary, but pod {} holds the writable timeline",
                h.cluster.primary, self.db_primary
            ));
        }
        Ok(())
    }
}

/// Hibernation under faults: the person sets and clears `spec.hibernate` among the
/// world's own edits, while pods stop, crash, come back and are deleted.
#[derive(Clone, Debug)]
pub(super) struct Hibernating;

impl Focus for Hibernating {
    fn initial() -> BoxedStrategy<World> {
        (
            prop_oneof![Just(1), Just(2), Just(3)],
            any::<bool>(),
            0..SCHEDULES.len(),
        )
            .prop_map(|(replicas, backup, schedule)| {
                let mut world = World::fresh(replicas, backup, schedule);
                world.running();
                world.write();
                world
            })
            .boxed()
    }

    /// The moves of a stop and a start: pods going and coming back, servers stopping,
    /// agents looking, commits streaming.
    fn moves() -> BoxedStrategy<Move> {
        prop_oneof![
            2 => Just(Move::ScaledDown),
            2 => (0..MAX_PODS).prop_map(Move::Terminated),
            2 => (0..MAX_PODS).prop_map(Move::ServerStops),
            3 => (0..MAX_PODS).prop_map(Move::AgentTick),
            2 => (0..MAX_PODS).prop_map(Move::Recreate),
            2 => (0..MAX_PODS).prop_map(Move::BecomesReady),
            1 => Just(Move::Write),
            1 => (0..MAX_PODS).prop_map(Move::Replicate),
        ]
        .boxed()
    }

    fn edits() -> BoxedStrategy<Edit> {
        prop_oneof![
            3 => Just(Edit::Hibernate(true)),
            2 => Just(Edit::Hibernate(false)),
            2 => <World as WorldModel<Postgres>>::spec_edits(),
        ]
        .boxed()
    }
}

/// Scenarios for hibernation's edges (the whole world's generated runs never set
/// `spec.hibernate`): the edge, the world, and a story that takes it.
pub(super) fn scenarios() -> Vec<Scenario<World, Move, Edit>> {
    use Move::*;
    use story::{adopt, expired, r};
    let env = Event::Env;
    let edit = |on| Event::Edit(Edit::Hibernate(on));
    // Hibernation asked for and taken on; the StatefulSet scales to zero, its pods go,
    // and the Lease they renewed expires: asleep.
    let asleep = || {
        [
            adopt(),
            vec![
                env(Write),
                edit(true),
                r(),
                r(),
                env(ScaledDown),
                Event::Tick(expired()),
                r(),
            ],
        ]
        .concat()
    };
    // ... then woken: the StatefulSet holds the pods again.
    let woken = || [asleep(), vec![edit(false), r(), r()]].concat();
    vec![
        (
            "Ready -> Hibernating (HibernationRequested)",
            running(3, false),
            [adopt(), vec![edit(true), r()]].concat(),
        ),
        (
            "Hibernating -> Hibernating (InstancesStopped)",
            running(3, false),
            asleep(),
        ),
        (
            "Hibernating -> Hibernating (WakeRequested)",
            running(3, false),
            woken(),
        ),
        (
            // Hibernation asked for again while the cluster wakes: it stops again.
            "Hibernating -> Hibernating (HibernationRequested)",
            running(3, false),
            [woken(), vec![edit(true), r()]].concat(),
        ),
        (
            "Hibernating -> Ready (ClusterWoken)",
            running(2, false),
            [
                woken(),
                vec![
                    env(Recreate(0)),
                    env(Recreate(1)),
                    r(),
                    r(),
                    env(AgentTick(0)),
                    env(BecomesReady(0)),
                    env(AgentTick(1)),
                    env(Replicate(1)),
                    env(BecomesReady(1)),
                    r(),
                ],
            ]
            .concat(),
        ),
        (
            // The primary's volume is lost as the cluster wakes: its manager does not
            // start a new database over the cluster's, and the person names the
            // member that holds the data.
            "Hibernating -> Creating (AdoptionRequested)",
            running(3, false),
            [
                woken(),
                vec![
                    env(Recreate(0)),
                    env(Recreate(1)),
                    env(Recreate(2)),
                    env(VolumeLost(0)),
                    env(Recreate(0)),
                    r(),
                    env(AgentTick(0)),
                    r(),
                ],
            ]
            .concat(),
        ),
        (
            "Hibernating -> Finalized (NoBackupPolicy)",
            running(3, false),
            [asleep(), vec![Event::Delete, r()]].concat(),
        ),
        (
            // Deleted asleep with a final backup to take: Degraded until the person
            // skips it (or wakes the cluster).
            "Hibernating -> Finalized (FinalBackupSkipped)",
            running(3, true),
            [
                asleep(),
                vec![Event::Delete, r(), env(SkipFinalBackup), r()],
            ]
            .concat(),
        ),
    ]
}

#[test]
fn hibernation_keeps_one_writer_sleeps_with_no_server_and_wakes_with_its_primary() {
    let report = check_machine::<Postgres, Focused<Hibernating>>(config());
    for edge in [
        "Ready -> Hibernating (HibernationRequested)",
        "Hibernating -> Hibernating (InstancesStopped)",
        "Hibernating -> Hibernating (WakeRequested)",
        "Hibernating -> Ready (ClusterWoken)",
    ] {
        assert!(
            report.transitions.contains_key(edge),
            "no generated run took {edge}: {:?}",
            report.transitions.keys().collect::<Vec<_>>()
        );
    }
}

#[test]
fn a_paused_primary_force_deleted_while_the_cluster_stops_is_asleep_only_once_fenced() {
    // Found by the deep check: the primary paused, hibernation asked for, the pod
    // force-deleted (its process runs on, unseen), the Lease waited out: asleep with a
    // server still up. It is paused past its fence, so it is killed as it resumes.
    use Move::*;
    use story::r;
    let env = Event::Env;
    let story = vec![
        r(),
        env(Pause(0)),
        Event::Edit(Edit::Hibernate(true)),
        r(),
        r(),
        r(),
        env(ForceDeleted(0)),
        Event::Tick(26),
        r(),
    ];
    let report = crate::engine::check::check_scenario::<Postgres, World>(
        &config(),
        running(1, false),
        &story,
    )
    .unwrap_or_else(|failure| panic!("{failure}"));
    assert!(
        report
            .transitions
            .contains_key("Hibernating -> Hibernating (InstancesStopped)"),
        "{}",
        report.trace.join("\n")
    );
}
