//! Stories for the agent's edges that generated runs seldom take: a world and the events
//! that take each edge.

use super::*;
use crate::engine::check::{Event, Reconcile};

type Story = (&'static str, World, Vec<Event<Move, Edit>>);

fn r() -> Event<Move, Edit> {
    Event::Reconcile(Reconcile::FRESH)
}

fn story(
    edge: &'static str,
    setup: impl FnOnce(&mut World),
    events: Vec<Event<Move, Edit>>,
) -> Story {
    let mut world = World::fresh(3, false, 0);
    world.running();
    // Agents look only when the story says (or the world settles).
    let later = world.now + chrono::Duration::hours(1);
    for p in world.pods.values_mut() {
        p.next_round = later;
    }
    setup(&mut world);
    let events = [vec![r(), r(), r()], events].concat();
    (edge, world, events)
}

/// Pod `k` is a container whose agent is in `state`, its server down.
fn waiting(w: &mut World, k: i32, state: AgentState, role: Role) {
    if let Some(p) = w.pods.get_mut(&k) {
        p.agent = state;
        p.server = Srv::Down;
        p.writable = false;
        p.role = Some(role);
        p.role_seen = Some(role);
    }
}

/// Pod 0 stops being the primary: its server is down, the Lease names pod `k`.
fn lease_to(w: &mut World, k: i32) {
    waiting(w, 0, AgentState::Starting, Role::Replica);
    let uid = w.pods.get(&k).map(|p| p.uid);
    if let Some(l) = w.lease.as_mut() {
        l.holder = uid.map(|u| (k, u));
        l.version += 1;
    }
}

/// Pod 1, handed the Lease and labelled `role`, asked its server to promote; the
/// promotion has not finished.
fn promoting(edge: &'static str, role: Role, events: Vec<Event<Move, Edit>>) -> Story {
    // No reconcile first: the operator would label pod 1 primary at once.
    without_operator(story(
        edge,
        |w| {
            lease_to(w, 1);
            let now = w.now;
            if let Some(p) = w.pods.get_mut(&1) {
                p.agent = AgentState::Promoting;
                p.server = Srv::Promoting;
                p.writable = true;
                p.role = Some(role);
                p.role_seen = Some(role);
                p.renewed = Some(now);
            }
            if let Some(p) = w.pods.get_mut(&0) {
                p.role = Some(Role::Replica);
                p.role_seen = Some(Role::Replica);
                p.ready = false;
            }
            w.volumes.insert(0, Vol::Primary { clean: true });
            w.volumes.insert(1, Vol::Primary { clean: false });
            w.db_primary = 1;
        },
        events,
    ))
}

/// `story` without its first reconciles: the agent looks before the operator relabels
/// anyone.
fn without_operator((edge, world, events): Story) -> Story {
    (edge, world, events[3..].to_vec())
}

/// Pod 1 was handed the Lease under the position pod 0 released, then labelled
/// replica before it promoted: its next round releases the Lease without a position
/// of its own, over the one there (generated runs seldom reach it).
fn release_over_a_position(w: &mut World) {
    lease_to(w, 1);
    waiting(w, 1, AgentState::Starting, Role::Replica);
    if let Some(l) = w.lease.as_mut() {
        l.released_lsn = Some(w.head.lsn);
    }
}

#[test]
fn a_release_without_a_position_keeps_the_one_on_the_lease() {
    let mut world = World::fresh(3, false, 0);
    world.running();
    release_over_a_position(&mut world);
    let released = world.head.lsn;
    <World as WorldModel<Postgres>>::step_environment(&mut world, &Move::AgentTick(1));
    let lease = world.lease.as_ref().expect("the Lease");
    assert_eq!(lease.holder, None, "pod 1 released it");
    assert_eq!(lease.released_by.map(|(k, _)| k), Some(1));
    assert_eq!(lease.released_lsn, Some(released), "{world:?}");
    assert!(world.violations.is_empty(), "{:?}", world.violations);
}

/// Pod `k`'s WAL volume hangs; its agent keeps renewing (a round every 4 s, within
/// `T - G`) for 32 s, past the 30 s WAL stall bound.
fn wal_hangs(k: i32) -> Vec<Event<Move, Edit>> {
    let mut events = vec![Event::Env(Move::WalHangs(k))];
    for _ in 0..8 {
        events.extend([Event::Tick(4), Event::Env(Move::AgentTick(k))]);
    }
    events
}

pub(in super::super) fn all() -> Vec<Story> {
    use Move::*;
    let env = Event::Env;
    vec![
        story("Primary -> Fencing (WalFlushStalled)", |_| {}, wal_hangs(0)),
        promoting(
            "Promoting -> Fencing (WalFlushStalled)",
            Role::Primary,
            wal_hangs(1),
        ),
        // Its round releases the Lease without a position over the one there
        // (invariant 16 checks it stays).
        without_operator(story(
            "Starting -> Standby (StandbyData)",
            release_over_a_position,
            vec![env(AgentTick(1))],
        )),
        without_operator(story(
            "StartingPrimary -> AwaitingLease (LeaseMoved)",
            // Pod 1, the primary, stopped cleanly and is about to start writable
            // again, but the Lease was deleted and created again naming nobody.
            |w| {
                waiting(w, 0, AgentState::Starting, Role::Replica);
                waiting(w, 1, AgentState::StartingPrimary, Role::Primary);
                w.volumes.insert(0, Vol::Standby);
                w.volumes.insert(1, Vol::Primary { clean: true });
                w.db_primary = 1;
                if let Some(l) = w.lease.as_mut() {
                    l.holder = None;
                    l.version += 1;
                }
            },
            vec![env(AgentTick(1))],
        )),
        without_operator(story(
            "AwaitingLease -> Standby (ReleasedPositionPending)",
            |w| {
                lease_to(w, 1);
                waiting(w, 1, AgentState::AwaitingLease, Role::Primary);
                if let Some(l) = w.lease.as_mut() {
                    l.released_lsn = Some(w.head.lsn);
                }
            },
            vec![env(AgentTick(1))],
        )),
        story(
            "StartingPrimary -> Starting (RoleChanged)",
            |w| waiting(w, 1, AgentState::StartingPrimary, Role::Replica),
            vec![env(AgentTick(1))],
        ),
        story(
            "AwaitingLease -> Exited (Signalled)",
            |w| waiting(w, 1, AgentState::AwaitingLease, Role::Replica),
            vec![env(Deleted(1)), env(AgentTick(1))],
        ),
        story(
            "Starting -> Exited (Signalled)",
            |w| waiting(w, 1, AgentState::Starting, Role::Replica),
            vec![env(Deleted(1)), env(AgentTick(1))],
        ),
        story(
            "StartingPrimary -> Exited (Signalled)",
            |w| waiting(w, 1, AgentState::StartingPrimary, Role::Replica),
            vec![env(Deleted(1)), env(AgentTick(1))],
        ),
        story(
            "AwaitingLease -> PromotingLocally (LeaseHeld), PromotingLocally -> StartingPrimary (PromotedLocally)",
            |w| {
                lease_to(w, 1);
                waiting(w, 1, AgentState::AwaitingLease, Role::Primary);
            },
            vec![env(AgentTick(1))],
        ),
        story(
            "PromotingLocally -> Exited (PrepareFailed)",
            |w| {
                lease_to(w, 1);
                waiting(w, 1, AgentState::AwaitingLease, Role::Primary);
            },
            vec![env(TaskFails(1)), env(AgentTick(1))],
        ),
        story(
            "Bootstrapping -> Exited (PrepareFailed)",
            |w| {
                lease_to(w, 1);
                waiting(w, 1, AgentState::AwaitingLease, Role::Primary);
                w.volumes.remove(&1);
                // A person removed the mark to start the cluster anew.
                if let Some(l) = w.lease.as_mut() {
                    l.initialized = false;
                }
                w.mark_lost = true;
            },
            vec![env(TaskFails(1)), env(AgentTick(1))],
        ),
        story(
            "Rewinding -> Exited (PrepareFailed)",
            |w| w.reclone_off = true,
            vec![env(TaskFails(1)), env(ServerCrashes(1)), env(AgentTick(1))],
        ),
        story(
            "Starting -> Exited (UnknownRole)",
            |w| waiting(w, 1, AgentState::Starting, Role::Replica),
            vec![env(LabelGarbled(1)), env(AgentTick(1))],
        ),
        story(
            "Starting -> Exited (ForeignData)",
            |w| {
                waiting(w, 1, AgentState::Starting, Role::Replica);
                w.volumes.remove(&1);
            },
            vec![env(ForeignFiles(1)), env(AgentTick(1))],
        ),
        story(
            "AwaitingLease -> Exited (ForeignData)",
            |w| {
                lease_to(w, 1);
                waiting(w, 1, AgentState::AwaitingLease, Role::Primary);
                w.volumes.remove(&1);
            },
            vec![env(ForeignFiles(1)), env(AgentTick(1))],
        ),
        story(
            "Releasing -> Exited (ReleaseOvertaken)",
            |w| {
                let uid = w.pods.get(&1).map_or(0, |p| p.uid);
                if let Some(p) = w.pods.get_mut(&0) {
                    p.agent = AgentState::Releasing {
                        lsn: Some(Lsn(0)),
                        crashed: None,
                    };
                    p.server = Srv::Down;
                    p.writable = false;
                    p.role = Some(Role::Demoted);
                }
                if let Some(l) = w.lease.as_mut() {
                    l.holder = Some((1, uid));
                }
            },
            vec![env(AgentTick(0))],
        ),
        story(
            "Releasing -> Exited (ReleaseAbandoned)",
            |w| {
                if let Some(p) = w.pods.get_mut(&0) {
                    p.agent = AgentState::Releasing {
                        lsn: Some(Lsn(0)),
                        crashed: None,
                    };
                    p.server = Srv::Down;
                    p.writable = false;
                    p.role = Some(Role::Demoted);
                }
            },
            vec![env(Partition(0)), Event::Tick(20), env(AgentTick(0))],
        ),
        story(
            "Standby -> Fencing (PromotedBySomeoneElse)",
            |_| {},
            vec![env(PromotedByHand(1))],
        ),
        story(
            "Standby -> Stopping (Signalled), Stopping -> Exited (StoppedCleanly)",
            |_| {},
            vec![
                env(Deleted(1)),
                env(AgentTick(1)),
                env(ServerStops(1)),
                env(AgentTick(1)),
            ],
        ),
        story(
            "Standby -> Stopping (StreamStalled), Stopping -> Exited (StoppedCleanly), Starting -> Rewinding (StandbyMayHaveDiverged)",
            |_| {},
            vec![
                env(StreamBreaks(1)),
                env(AgentTick(1)),
                Event::Tick(21),
                env(AgentTick(1)),
                env(ServerStops(1)),
                env(AgentTick(1)),
                env(AgentTick(1)),
            ],
        ),
        story(
            "Standby -> Cloning (StandbyUnfollowable), Cloning -> Standby (Cloned)",
            // Pod 1's standby stops streaming and exits before its agent saw it
            // stream once (as one that starts on data a cut-short timeline switch
            // left does): it is cloned again from pod 0.
            |w| {
                if let Some(p) = w.pods.get_mut(&1) {
                    p.streamed = false;
                }
            },
            vec![
                env(StreamBreaks(1)),
                env(ServerCrashes(1)),
                env(AgentTick(1)),
                env(AgentTick(1)),
                env(AgentTick(1)),
            ],
        ),
        story(
            "Primary -> Fencing (RoleUnknownWhileWritable)",
            |_| {},
            vec![env(LabelGarbled(0)), env(AgentTick(0))],
        ),
        story(
            "Primary -> Stopping (Signalled)",
            |_| {},
            vec![env(Deleted(0)), env(AgentTick(0))],
        ),
        promoting(
            "Promoting -> Fencing (LeaseLost)",
            Role::Primary,
            vec![env(LeaseCleared)],
        ),
        promoting(
            "Promoting -> Fencing (RenewalOverdue)",
            Role::Primary,
            vec![
                env(Partition(1)),
                env(PromotionEnds(0)),
                Event::Tick(6),
                env(AgentTick(1)),
            ],
        ),
        promoting(
            "Promoting -> Fencing (RoleUnknownWhileWritable)",
            Role::Primary,
            vec![env(LabelGarbled(1)), env(AgentTick(1))],
        ),
        promoting(
            "Promoting -> Stopping (Signalled)",
            Role::Primary,
            vec![env(Deleted(1)), env(AgentTick(1))],
        ),
        promoting(
            "Promoting -> Releasing (ServerExited)",
            Role::Primary,
            vec![env(ServerCrashes(1)), env(AgentTick(1))],
        ),
        story(
            "Stopping -> Fencing (LeaseLost)",
            |_| {},
            vec![env(Deleted(0)), env(AgentTick(0)), env(LeaseCleared)],
        ),
    ]
}

#[test]
fn each_story_takes_the_agent_edges_it_names() {
    use crate::engine::check::check_scenario;
    let mut problems = Vec::new();
    for (edges, world, events) in all() {
        AGENT_EDGES.with(|e| e.borrow_mut().clear());
        if let Err(failure) =
            check_scenario::<Postgres, World>(&super::super::scenarios::config(), world, &events)
        {
            problems.push(format!("the story for {edges}: {}", failure.reason));
        }
        let taken = agent_edges_taken();
        for edge in edges.split(", ") {
            if !taken.contains(edge) {
                problems.push(format!("{edge} not taken: {taken:?}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
