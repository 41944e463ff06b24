//! Regressions of Postgres as it is: stories the model check (its generated runs, or a
//! review) found failing once, each kept as a scenario that must pass.

use super::planted::{
    assert_handed_to_pod_2, assert_took, passes, required, running_n, running_three,
};
use super::scenarios::story::r;
use super::*;

/// The primary's whole pod freezes (its probes hang, so it stays Ready): it stops
/// renewing the Lease, and the operator fails over once `L + S` passed and then
/// `failoverDelaySeconds`, whatever its readiness. The frozen server, thawed, is fenced at once.
#[test]
fn a_frozen_primary_that_stays_ready_is_failed_over() {
    use Move::*;
    let env = Event::Env;
    let (world, events) = running_three(vec![
        env(Write),
        env(Replicate(1)),
        env(Pause(0)),
        r(),
        Event::Tick(46),
        r(),
        Event::Tick(31),
        r(),
        r(),
        r(),
        env(AgentTick(1)),
        env(AgentTick(2)),
        r(),
        r(),
        env(AgentTick(1)),
        env(Resume(0)),
        env(AgentTick(1)),
        env(AgentTick(2)),
        r(),
    ]);
    let report = passes((world, events));
    assert_took(&report, "Ready -> PrimaryLost (PrimaryNotRenewing)");
    assert_took(&report, "PrimaryLost -> SwitchingOver (FailoverStarted)");
    assert_took(&report, "SwitchingOver -> Ready (FailoverCompleted)");
}

/// The Lease is deleted mid-switchover (a holderless Lease must expire): it is created again naming nobody,
/// with a renewal time, so it expires (`L + S` later) and the switchover goes on: it
/// never wedges.
#[test]
fn a_lease_deleted_mid_switchover_is_recreated_and_expires() {
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
        env(LeaseDeleted),
        r(),
        r(),
        Event::Tick(u32::try_from(LEASE_SECONDS + SKEW_SECONDS + 1).unwrap_or(60)),
        r(),
    ];
    let report = passes((world, events));
    let trace = report.trace.join("\n");
    let at = |needle: &str| report.trace.iter().position(|l| l.contains(needle));
    let expired = format!("clock +{}s", LEASE_SECONDS + SKEW_SECONDS + 1);
    assert!(
        at("CreateLease { holder: None") < at(&expired)
            && at(&expired) < at("(LeaseHandedOver)")
            && at("CreateLease { holder: None").is_some(),
        "{trace}"
    );
    assert_took(&report, "SwitchingOver -> Ready (SwitchoverCompleted)");
}

/// Found by generated runs: pod 1's stream breaks, a commit reaches pod 2 only, and an
/// upgrade makes pod 1 the switchover's target. The old primary stops cleanly and
/// releases the Lease at the commit, which pod 1 can no longer get: its agent never
/// promotes it. No promotion is reported within the bound, the members are surveyed,
/// and pod 2, which has the commit, is promoted.
#[test]
fn an_upgrade_whose_target_missed_the_released_wal_promotes_the_member_that_has_it() {
    let report = passes(super::scenarios::upgrade_target_short_of_released());
    assert_took(
        &report,
        "SwitchingOver -> SwitchingOver (TargetShortOfReleased)",
    );
    assert_handed_to_pod_2(&report);
}

/// Found by generated runs (seed 1): the one pod of a one-instance cluster is
/// force-deleted on a partitioned node (its server runs on), the Lease is deleted, and
/// the pod is recreated. The Lease was created naming the new pod at once, and it
/// started writable beside the old server. It is created naming nobody instead, and
/// handed to the new pod only once that Lease expired, after the old server stopped.
#[test]
fn a_deleted_lease_at_rest_is_recreated_naming_nobody_until_any_old_holder_stopped() {
    use Move::*;
    let env = Event::Env;
    let mut world = World::fresh(1, false, 0);
    world.running();
    let events = vec![
        r(),
        r(),
        r(),
        env(ForceDeleted(0)),
        env(LeaseDeleted),
        r(),
        env(Recreate(0)),
        r(),
        r(),
        Event::Tick(u32::try_from(LEASE_SECONDS + SKEW_SECONDS + 1).unwrap_or(60)),
        r(),
        r(),
    ];
    let report = passes((world, events));
    let at = |needle: &str| report.trace.iter().position(|l| l.contains(needle));
    assert!(
        at("CreateLease { holder: None").is_some()
            && at("CreateLease { holder: Some").is_none()
            && at("CreateLease { holder: None") < at("HandLease { holder: Some(\"pg-0/"),
        "{}",
        report.trace.join("\n")
    );
}

/// Found by generated runs (seed 0): the primary's pod is evicted, the failover starts,
/// and the only standby's volume is lost. No standby can ever be promoted (the empty one
/// has no primary to clone from), and the failover waited for one without end. The old
/// primary's pod is back on its volume and the Lease never left it, so the failover is
/// abandoned and it is the primary again.
#[test]
fn a_failover_with_no_standby_left_goes_back_to_the_old_primary_on_its_volume() {
    let report = passes(super::scenarios::failover_losing_the_only_standby());
    assert_took(&report, "SwitchingOver -> PrimaryLost (BackToOldPrimary)");
    assert_took(&report, "PrimaryLost -> Ready (PrimaryRecovered)");
}

/// Found by generated runs (seed 7): a switchover to pod 2 is requested and the volumes
/// of pods 1 and 2 are lost. The old primary stopped cleanly and released the Lease, its
/// target came back empty, and the switchover waited without end for a Ready replica
/// that could never come. It goes back to the old primary instead.
#[test]
fn a_switchover_whose_target_came_back_empty_goes_back_to_the_old_primary() {
    let report = passes(super::scenarios::switchover_losing_every_standby());
    assert_took(&report, "SwitchingOver -> PrimaryLost (BackToOldPrimary)");
    assert_took(&report, "PrimaryLost -> Ready (PrimaryRecovered)");
}

/// Found by generated runs (seeds 2 and 7 of the vanished-pod test's generator): pod 1's
/// standby is promoted by hand under a garbled label (its agent fences it), and pod 0's
/// volume is lost. With the status lost too, the person's `adopt-primary` names pod 1,
/// the one member with data. The Lease was handed to pod 1 while it was labelled
/// `replica`; its starting agent gave it back at once, and round again, for ever. It is
/// labelled primary first now, then handed the Lease, and the cluster is adopted.
#[test]
fn a_member_labelled_replica_is_labelled_primary_before_creating_hands_it_the_lease() {
    let report = passes(super::scenarios::hand_promoted_standby_and_lost_primary_volume());
    assert_took(&report, "Creating -> Ready (Adopted)");
}

/// Found by generated runs (the default seed, once synchronous worlds took `First` and
/// `Preferred`): pod 2's standby is promoted by hand, and the volumes of pods 0 and 1 are
/// lost. The new, empty pod 0 is the primary and refuses to bootstrap over the cluster's
/// database; pod 2, with the only data, has no primary to follow. `PrimaryLost` waited
/// with no way out; a person's `adopt-primary` naming pod 2 now adopts the cluster anew
/// around it.
#[test]
fn a_primary_lost_with_no_ready_replica_adopts_the_member_a_person_names() {
    let report = passes(super::scenarios::only_data_on_a_member_that_cannot_follow());
    assert_took(&report, "PrimaryLost -> Creating (AdoptionRequested)");
}

/// Found by generated runs (a commit's seed, 2026-12-07): a failover's chosen target
/// lost its volume before it promoted, and the only data left was the old primary's, on
/// its recreated pod. The failover could not go back to it (a target had been chosen)
/// and waited for ever, though the person named pod 0 with `adopt-primary`. The named
/// pod is adopted now.
#[test]
fn a_failover_whose_chosen_target_was_lost_adopts_the_member_a_person_names() {
    let report = passes(super::scenarios::chosen_target_lost_before_it_promoted());
    assert_took(&report, "SwitchingOver -> Creating (AdoptionRequested)");
}

/// Found by generated runs (seed 14 of the vanished-pod test's generator): a
/// switchover to pod 1 of two is requested, the Lease is deleted and pod 1's volume is
/// lost. The switchover waited without end for a Ready replica: going back to the old
/// primary needs the Lease to show that nobody else held it, and the missing Lease was
/// made anew only past that wait. It is made anew first now, then the switchover goes
/// back to the old primary.
#[test]
fn a_switchover_whose_target_came_back_empty_after_the_lease_was_deleted_goes_back() {
    use Move::*;
    let env = Event::Env;
    let mut world = World::fresh(2, false, 0);
    world.running();
    let events = vec![
        env(RequestSwitchover(1)),
        r(),
        r(),
        r(),
        r(),
        env(LeaseDeleted),
        env(VolumeLost(1)),
    ];
    let report = passes((world, events));
    assert_took(&report, "SwitchingOver -> PrimaryLost (BackToOldPrimary)");
}

/// Found by generated runs (seed 7 of the vanished-pod test's generator): with
/// `spec.synchronous` Required, the volumes of pods 1 and 0 (the primary) are lost. The
/// failover's quorum can never be read (pod 1 holds nothing now), and it went back to
/// the old primary's ordinal, whose new pod is just as empty, and round again, for ever.
/// It never goes back to a pod whose manager reports an empty volume, and waits for
/// the person's `Preferred` instead.
#[test]
fn a_synchronous_failover_never_goes_back_to_an_old_primary_recreated_empty() {
    use Move::*;
    let env = Event::Env;
    let (mut world, events) = running_three(vec![
        env(Write),
        env(Replicate(2)),
        env(VolumeLost(1)),
        env(VolumeLost(0)),
        r(),
        r(),
    ]);
    world.synchronous = Some(SynchronousSpec {
        number: 1,
        method: SyncMethod::Any,
        data_durability: DataDurability::Required,
    });
    let report = passes((world, events));
    assert!(
        !report
            .trace
            .iter()
            .any(|l| l.contains("(BackToOldPrimary)")),
        "{}",
        report.trace.join("\n")
    );
    assert_took(&report, "SwitchingOver -> Ready (FailoverCompleted)");
}

/// Found by generated runs with `LOCKSTEP_CHECK_CASES=1500`: two members, the primary's
/// volume is lost, and the failover's target is evicted right after the Lease was
/// handed to it. The pod that replaced it (the same volume) was labelled primary by
/// ordinal, so it waited for a Lease naming its old UID, and the failover for a Ready
/// replica, for ever. Only the target's own pod is labelled primary now: its
/// replacement starts as a standby, and a failover with no candidate left among those
/// its survey read surveys again, and chooses it.
#[test]
fn a_failover_whose_target_is_evicted_after_the_hand_over_promotes_the_pod_that_replaced_it() {
    use Move::*;
    let env = Event::Env;
    // The primary's volume is lost; after failoverDelaySeconds the Lease goes to pod 1.
    let failover = [env(VolumeLost(0)), r(), Event::Tick(46), r(), r(), r(), r()];
    let handed_over = [Event::Tick(2), r(), r()];
    let report = passes(running_n(
        2,
        [failover.as_slice(), &handed_over, &[env(Evicted(1))]].concat(),
    ));
    assert_took(&report, "SwitchingOver -> SwitchingOver (SurveyRetried)");
    assert_took(&report, "SwitchingOver -> Ready (FailoverCompleted)");
}

/// Found by generated runs with `LOCKSTEP_CHECK_CASES=1500`: with `spec.synchronous`
/// Required in three members, the primary's volume is lost, the spec scales to two and
/// the third member's volume is lost too. The failover counts the three members it
/// began with (the StatefulSet's), so its quorum of two cannot be read, and it waits,
/// Degraded, naming `Preferred` as the way out. The settling world's person counted the
/// spec's two and never took it; it counts the same members as the failover now.
#[test]
fn a_synchronous_failover_short_of_its_quorum_during_a_scale_down_ends_once_preferred() {
    use Move::*;
    let env = Event::Env;
    let (mut world, events) = running_three(vec![
        env(VolumeLost(0)),
        Event::Edit(Edit::Replicas(2)),
        env(VolumeLost(2)),
    ]);
    world.synchronous = Some(SynchronousSpec {
        number: 1,
        method: SyncMethod::Any,
        data_durability: DataDurability::Required,
    });
    let report = passes((world, events));
    assert_took(&report, "SwitchingOver -> Ready (FailoverCompleted)");
}

/// Found by generated runs with `LOCKSTEP_CHECK_CASES=4000`: two members, the primary's
/// volume is lost, pod 1 is promoted (pod 0, remade, clones it), and the Lease is
/// deleted. Pod 1 stops its server (its Lease names nobody) and, demoted, waits to
/// rewind from a primary that no longer runs; the failover waited for it to be Ready
/// again, for ever, though pod 0 has its data. It surveys again instead: pod 0, the old
/// primary's ordinal, is no survey's candidate, so with nobody else it is the primary
/// again on the data it cloned (`BackToOldPrimary`), and the cluster is Ready.
#[test]
fn a_failover_whose_promoted_target_loses_the_lease_is_not_wedged_waiting_for_it() {
    use Move::*;
    let env = Event::Env;
    let failover = [env(VolumeLost(0)), r(), Event::Tick(46), r(), r(), r()];
    let promoted = [env(Recreate(0)), r(), Event::Tick(2), r(), r(), r()];
    let lost = [env(AgentTick(1)), env(LeaseDeleted)];
    let report = passes(running_n(
        2,
        [failover.as_slice(), &promoted, &lost].concat(),
    ));
    assert_took(&report, "SwitchingOver -> SwitchingOver (SurveyRetried)");
    assert_took(&report, "SwitchingOver -> PrimaryLost (BackToOldPrimary)");
}

/// Found by generated runs with `LOCKSTEP_CHECK_CASES=6000`: a switchover to pod 1 of
/// two is requested; the Lease is handed to it and it promotes, and it is not Ready
/// for a moment. The switchover surveyed again, demoting pod 1 while it held the Lease;
/// its server stopped, pod 0 (the old primary) stays `demoted`, and nobody could be
/// promoted, for ever. With no member the survey did not read, the target is waited
/// for instead, and the switchover completes once it is Ready again.
#[test]
fn a_requested_switchover_waits_for_its_target_not_ready_for_a_moment_as_it_promotes() {
    use Move::*;
    let env = Event::Env;
    let requested = [env(RequestSwitchover(1)), r(), r(), r(), r(), r()];
    let surveyed = [Event::Tick(124), r(), r(), Event::Tick(2), r(), r(), r()];
    let report = passes(required(running_n(
        2,
        [
            requested.as_slice(),
            &surveyed,
            &[env(BecomesUnready(1)), r()],
        ]
        .concat(),
    )));
    assert_took(&report, "SwitchingOver -> Ready (SwitchoverCompleted)");
}

/// Found by generated runs with `LOCKSTEP_CHECK_CASES=6000`: a switchover to pod 1 of
/// two is requested; pod 1 holds the Lease and promotes, and the old primary's pod is
/// evicted. With the old primary unseen, the switchover labelled every pod that may be
/// writable `demoted`, pod 1 too: its agent stopped the server it was promoting, and
/// nobody could be promoted again. The target keeps its label while the old primary is
/// unseen now, and the switchover completes once the old primary's pod is back.
#[test]
fn a_switchover_keeps_its_promoting_target_labelled_while_the_old_primary_is_unseen() {
    use Move::*;
    let env = Event::Env;
    let requested = [env(RequestSwitchover(1)), r(), r(), r(), r(), r()];
    let promoted = [Event::Tick(124), r(), r(), Event::Tick(2), r(), r(), r()];
    let evicted = [Event::Tick(2), env(Evicted(0)), r()];
    let report = passes(required(running_n(
        2,
        [requested.as_slice(), &promoted, &evicted].concat(),
    )));
    assert_took(&report, "SwitchingOver -> Ready (SwitchoverCompleted)");
}

/// An upgrade's target is promoted by hand just after the old primary was demoted: its
/// history forks and its agent fences it, and the old primary, stopped, has no primary
/// to rewind against either. The switchover waits for the target a bounded time, then
/// goes back to the old primary (the Lease never left it: it has every commit), and the
/// upgrade moves the role again once the target has rewound against it.
#[test]
fn an_upgrade_whose_target_was_promoted_by_hand_goes_back_to_the_old_primary() {
    use Move::*;
    let env = Event::Env;
    let report = passes(running_n(
        2,
        vec![
            Event::Edit(Edit::Version(1)),
            r(),
            r(),
            r(),
            r(),
            env(Recreate(1)),
            r(),
            env(TaskFails(1)),
            env(BecomesReady(1)),
            r(),
            r(),
            r(),
            env(PromotedByHand(1)),
        ],
    ));
    assert_took(&report, "SwitchingOver -> PrimaryLost (BackToOldPrimary)");
    assert_took(&report, "SwitchingOver -> Upgrading (SwitchoverCompleted)");
    assert_took(&report, "Upgrading -> Ready (UpgradeCompleted)");
}

/// A failover's first target is deleted as it promotes, labelled primary: the failover
/// promotes the next member, and the deleted pod, terminating, loses its `primary` label
/// before the next is labelled (the `-rw` Service may still route to a terminating pod).
#[test]
fn a_failover_target_deleted_as_it_promotes_loses_its_primary_label() {
    use Move::*;
    let env = Event::Env;
    let report = passes(running_three(vec![
        env(ForceDeleted(0)),
        r(),
        Event::Tick(30),
        r(),
        r(),
        r(),
        r(),
        Event::Tick(2),
        r(),
        r(),
        Event::Tick(26),
        env(Recreate(0)),
        r(),
        env(Deleted(1)),
        r(),
        r(),
        r(),
    ]));
    assert_took(&report, "SwitchingOver -> SwitchingOver (TargetChanged)");
    assert_took(&report, "SwitchingOver -> Ready (FailoverCompleted)");
}

/// The status write after an on-demand backup Job's creation is lost (409): the Job
/// finishes, and the next reconcile follows it rather than run the token again. (The
/// deep model check once deleted that Job outright in between, which the on-demand
/// sub-machine assumes nobody does before the write that records it.)
#[test]
fn a_backup_job_whose_recording_write_was_lost_is_followed_not_run_twice() {
    use Move::*;
    let env = Event::Env;
    let conflict = Event::Reconcile(crate::engine::check::Reconcile {
        fault: crate::engine::check::Fault::Conflict,
        ..crate::engine::check::Reconcile::FRESH
    });
    let mut world = World::fresh(1, true, 0);
    world.running();
    let report = passes((
        world,
        vec![
            r(),
            r(),
            r(),
            env(RequestBackup),
            conflict,
            env(JobFinishes { nth: 0, ok: true }),
            env(BackupJobDeleted(0)),
            r(),
            r(),
        ],
    ));
    assert_took(&report, "BackingUp -> Ready (BackupSucceeded)");
}

/// The status, the Lease and the primary's volume are lost, and a standby that had
/// received less than the other was recreated: adoption does not take the recreated
/// standby (the one pod not labelled `replica`) for the primary while an ordinal has no
/// pod; it waits for a person to name the member that holds the data.
#[test]
fn adoption_does_not_take_a_recreated_standby_for_a_primary_that_is_gone() {
    use Move::*;
    let env = Event::Env;
    let mut world = World::fresh(3, false, 0);
    world.running();
    let report = passes((
        world,
        vec![
            env(Write),
            env(Replicate(1)),
            env(Deleted(2)),
            Event::Tick(122),
            env(VolumeLost(0)),
            env(Recreate(2)),
            env(LeaseDeleted),
            r(),
            r(),
            r(),
            Event::Tick(131),
            r(),
            r(),
        ],
    ));
    assert_took(&report, "Creating -> Ready (Adopted)");
}
