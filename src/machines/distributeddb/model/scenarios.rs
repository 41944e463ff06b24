//! The model check itself: generated runs, and scenarios for the edges they seldom reach.

use super::*;

fn config() -> CheckConfig {
    CheckConfig {
        cases: 384,
        max_events: 120,
        liveness_reconciles: 128,
        ..CheckConfig::default()
    }
}

type Events = Vec<Event<Move, Edit>>;

fn r() -> Event<Move, Edit> {
    Event::Reconcile(Reconcile::FRESH)
}

fn env(mv: Move) -> Event<Move, Edit> {
    Event::Env(mv)
}

/// The story so far, then `more`.
fn then(mut story: Events, more: impl IntoIterator<Item = Event<Move, Edit>>) -> Events {
    story.extend(more);
    story
}

/// From adoption to Ready at db:1 (the extra reconciles are quiet).
fn adopted() -> Events {
    vec![r(), r(), r(), r()]
}

/// Ready, then an on-demand backup begins.
fn backing_up() -> Events {
    then(adopted(), [env(Move::BackupNow(0)), r()])
}

/// Someone evicts pod `k`; the StatefulSet controller recreates it from the template it
/// last observed, and it becomes Ready.
fn recreated(k: u8) -> [Event<Move, Edit>; 4] {
    [
        env(Move::PodEvicted(k)),
        env(Move::PodGone(k)),
        env(Move::StsCreatesPods),
        env(Move::PodReady(k)),
    ]
}

/// Ready at db:1, spec.image becomes db:2: the upgrade begins and, once the template
/// holds db:2, pod 0's pre-hook starts (or, without hooks, it goes to Restart).
fn upgrade_begun() -> Events {
    then(
        adopted(),
        [
            Event::Edit(Edit::Image(1)),
            r(),
            r(),
            env(Move::StsObserves),
            r(),
        ],
    )
}

/// Ready with two replicas and scaling hooks, spec.replicas becomes 3: the step's
/// pre-scale-up hook starts.
fn scale_up_begun() -> Events {
    then(adopted(), [Event::Edit(Edit::Replicas(3)), r(), r()])
}

/// ... the pre-hook succeeds, pod 0 is replaced and Ready at db:2, and its post-hook
/// starts.
fn post_hook_started() -> Events {
    use Move::*;
    then(
        upgrade_begun(),
        [
            env(JobFinishes(0, true)),
            r(),
            r(),
            env(PodGone(0)),
            env(StsCreatesPods),
            env(PodReady(0)),
            r(),
            r(),
        ],
    )
}

/// Scenarios for the edges generated sequences seldom reach: the edge (`From -> To
/// (Reason)`), the world and a short story that takes it (the liveness phase then
/// settles the world as for any run).
fn scenarios() -> Vec<Scenario<Cluster, Move, Edit>> {
    use Move::*;
    let failed_hook_out_of_retries = [env(JobFinishes(0, false)), r(), Event::Tick(600), r()];
    vec![
        (
            // A pod recreated from a template someone edited is replaced.
            "Ready -> Upgrading (StrayImage)",
            Cluster::existing(2, None, false),
            then(
                then(adopted(), [env(StsImageTampered), env(StsObserves)]),
                then(recreated(1).to_vec(), [r(), env(StsObserves), r()]),
            ),
        ),
        (
            // spec.image is set to what every pod already runs.
            "Ready -> Ready (VersionAdopted)",
            Cluster::existing(1, None, false),
            then(
                then(adopted(), [env(StsImageSet(1)), env(StsObserves)]),
                then(recreated(0).to_vec(), [Event::Edit(Edit::Image(1)), r()]),
            ),
        ),
        (
            // A pre-hook out of retries runs again once retry-hook is set (the liveness
            // phase sets it).
            "Upgrading -> Upgrading (HookRetryRequested)",
            Cluster::existing(1, Some(0), false),
            then(upgrade_begun(), failed_hook_out_of_retries.clone()),
        ),
        (
            // A pre-hook out of retries, and skip-hook is set: on to the restart (retargets
            // now wait for a pre-hook, so generated runs reach this less often).
            "Upgrading -> Upgrading (HookSkipped)",
            Cluster::existing(1, Some(0), false),
            then(
                then(upgrade_begun(), failed_hook_out_of_retries.clone()),
                [env(SkipHook(1)), r()],
            ),
        ),
        (
            // A pre-scale-up hook out of retries, and skip-hook is set: the StatefulSet
            // grows without it.
            "Scaling -> Scaling (HookSkipped)",
            Cluster::existing(2, Some(0), false),
            then(
                then(scale_up_begun(), failed_hook_out_of_retries.clone()),
                [env(SkipHook(1)), r()],
            ),
        ),
        (
            // The member added never becomes Ready and spec.replicas goes back: it is
            // removed without its post-scale-up hook.
            "Scaling -> Scaling (ScaleHookDropped)",
            Cluster::existing(2, Some(0), false),
            then(
                scale_up_begun(),
                [
                    env(JobFinishes(0, true)),
                    r(),
                    Event::Edit(Edit::Replicas(2)),
                    r(),
                ],
            ),
        ),
        (
            // The last pod's post-hook is out of retries and skip-hook is set.
            "Upgrading -> Ready (HookSkipped)",
            Cluster::existing(1, Some(0), false),
            then(
                then(post_hook_started(), failed_hook_out_of_retries),
                [env(SkipHook(1)), r()],
            ),
        ),
        (
            // The upgraded pod restarts before its post-hook finished.
            "Upgrading -> Upgrading (PodRestarted)",
            Cluster::existing(1, Some(1), false),
            then(then(post_hook_started(), recreated(0)), [r()]),
        ),
        (
            // The replacement comes back from a template someone edited.
            "Upgrading -> Upgrading (RecreatedAtStaleImage)",
            Cluster::existing(1, None, false),
            then(
                upgrade_begun(),
                [
                    r(),
                    env(StsImageTampered),
                    env(StsObserves),
                    env(PodGone(0)),
                    env(StsCreatesPods),
                    r(),
                    env(StsObserves),
                    r(),
                ],
            ),
        ),
        (
            // The backup Job finishes and is deleted (a TTL controller, a cleanup) before
            // the operator read its outcome: reported, and not run again.
            "BackingUp -> Ready (BackupLost)",
            Cluster::existing(1, None, true),
            then(
                adopted(),
                [
                    env(BackupNow(0)),
                    r(),
                    env(JobFinishes(0, true)),
                    env(BackupJobDeleted(0)),
                    r(),
                    r(),
                ],
            ),
        ),
        (
            // Deleted mid-scale, skip-final-backup set.
            "Scaling -> Finalized (FinalBackupSkipped)",
            Cluster::existing(1, None, true),
            then(
                adopted(),
                [
                    Event::Edit(Edit::Replicas(2)),
                    r(),
                    env(SkipFinalBackup),
                    Event::Delete,
                    r(),
                ],
            ),
        ),
        (
            // Deleted mid-scale, with a backup policy: the final backup is taken
            // (generated runs reach it seldom).
            "Scaling -> Finalizing (DeletionRequested)",
            Cluster::existing(1, None, true),
            then(
                adopted(),
                [Event::Edit(Edit::Replicas(2)), r(), Event::Delete, r()],
            ),
        ),
        (
            // Deleted while backing up, skip-final-backup set.
            "BackingUp -> Finalized (FinalBackupSkipped)",
            Cluster::existing(1, None, true),
            then(backing_up(), [env(SkipFinalBackup), Event::Delete, r()]),
        ),
        (
            // A pre-hook out of retries is skipped: on to the pod's restart.
            "Upgrading -> Upgrading (HookSkipped)",
            Cluster::existing(1, Some(0), false),
            then(
                upgrade_begun(),
                [env(JobFinishes(0, false)), r(), env(SkipHook(1)), r()],
            ),
        ),
        (
            // Someone else replaces the pod whose pre-hook runs.
            "Upgrading -> Upgrading (Replanned)",
            Cluster::existing(2, Some(1), false),
            then(then(upgrade_begun(), recreated(1)), [r(), r()]),
        ),
        (
            // Deleted while backing up, the backupPolicy gone.
            "BackingUp -> Finalized (NoBackupPolicy)",
            Cluster::existing(1, None, true),
            then(
                backing_up(),
                [Event::Edit(Edit::ToggleBackups), Event::Delete, r()],
            ),
        ),
    ]
}

#[test]
fn distributeddb_is_safe_and_live_under_faults_and_takes_every_edge() {
    let report = check_machine::<DistributedDb, Cluster>(config());
    assert!(report.writes > 0);
    assert_every_edge_taken::<DistributedDb, Cluster>(&config(), &report, scenarios());
}

/// A story that must hold the invariants (and then settle), whatever edges it takes.
fn holds(world: Cluster, story: &Events) {
    if let Err(failure) =
        crate::engine::check::check_scenario::<DistributedDb, Cluster>(&config(), world, story)
    {
        panic!("{failure}");
    }
}

#[test]
fn a_pod_that_fails_while_another_is_drained_is_not_replaced_first() {
    // db-2's pre-hook ran, then db-0 went NotReady; db-0 was replaced
    // while db-2 waited drained.
    use Move::*;
    let story = then(
        upgrade_begun(),
        [
            env(JobFinishes(0, true)),
            r(),
            env(PodFails(0)),
            r(),
            r(),
            r(),
            r(),
        ],
    );
    holds(Cluster::existing(3, Some(1), false), &story);
}

#[test]
fn a_pod_drained_by_its_pre_hook_may_go_down_while_someone_else_tampers_with_the_template() {
    // Found by 20,000 generated runs: the pre-hook for db:2 succeeded, someone set the
    // StatefulSet's image to another one, and a reconcile on an owned-object cache one
    // event old deleted the drained pod. The delete is right (the pod was prepared; the
    // template is restored and a pod recreated from the tampered one is replaced again,
    // from its pre-hook); the invariant wrongly asked for a pre-hook at the tampered image.
    use Move::*;
    let stale = Event::Reconcile(Reconcile {
        world_lag: 1,
        ..Reconcile::FRESH
    });
    let story = vec![
        Event::Edit(Edit::Image(1)),
        r(),
        r(),
        env(StsObserves),
        r(),
        r(),
        env(JobFinishes(0, true)),
        r(),
        env(StsImageTampered),
        stale,
    ];
    holds(Cluster::existing(1, Some(1), false), &story);
}

#[test]
fn an_upgrade_beside_an_eviction_it_has_not_seen_takes_one_member_down() {
    // Found by 20,000 generated runs: someone evicted db-0 while the upgrade was about to
    // replace db-2, and a reconcile on an owned-object cache one event old still saw
    // db-0 Ready and deleted db-2: two of three members down. The upgrade now evicts, and
    // the budget refuses with the API server's own count.
    use Move::*;
    let stale = Event::Reconcile(Reconcile {
        world_lag: 1,
        ..Reconcile::FRESH
    });
    let story = then(upgrade_begun(), [env(PodEvicted(0)), stale, r(), r()]);
    holds(Cluster::existing(3, None, false), &story);
}

#[test]
fn a_scale_down_removes_one_member_at_a_time() {
    // A scale 3 -> 1 once removed two Ready pods at once.
    use Move::*;
    let story = then(
        adopted(),
        [
            Event::Edit(Edit::Replicas(1)),
            r(),
            r(),
            env(StsObserves),
            env(StsCreatesPods),
            r(),
            env(PodGone(2)),
            r(),
            r(),
            env(StsObserves),
            env(StsCreatesPods),
            r(),
        ],
    );
    holds(Cluster::existing(3, None, false), &story);
}

#[test]
fn creation_does_not_end_while_an_adopted_statefulset_is_scaled_down() {
    // Found by the model check: Creating paced a StatefulSet holding more replicas than
    // spec.replicas, and ended (MixedImages) before it got there; the upgrade then
    // deleted a pod while the scale-down removed another.
    let story = vec![
        Event::Edit(Edit::Replicas(2)),
        Event::Edit(Edit::Image(1)),
        r(),
        r(),
        Event::Edit(Edit::Replicas(1)),
        r(),
    ];
    holds(Cluster::existing(1, None, false), &story);
}

#[test]
fn a_backup_job_deleted_before_its_outcome_was_read_is_kept_by_its_finalizer_and_read() {
    use Move::*;
    let story = then(
        adopted(),
        [
            env(BackupNow(0)),
            r(),
            env(JobFinishes(0, true)),
            // Someone deletes it (honouring the outcome finalizer) before it was read.
            env(JobDeleted(0)),
            r(),
            r(),
        ],
    );
    let report = crate::engine::check::check_scenario::<DistributedDb, Cluster>(
        &config(),
        Cluster::existing(1, None, true),
        &story,
    )
    .unwrap_or_else(|failure| panic!("{failure}"));
    assert!(
        report
            .transitions
            .contains_key("BackingUp -> Ready (BackupSucceeded)"),
        "its outcome is read, not lost: {report:?}"
    );
    assert!(
        !report
            .transitions
            .contains_key("BackingUp -> Ready (BackupLost)")
    );
}

/// The planted bug: a scale-down shrinks the StatefulSet first and removes the member
/// after, its pre-scale-down hook run as a post-scale-down one.
struct ShrinkBeforeRemoving;

impl crate::engine::planted::Bug<DistributedDb> for ShrinkBeforeRemoving {
    const NAME: &'static str = "distributeddb-shrink-before-removing";

    fn alter(
        _: &DdbState,
        decision: crate::engine::Decision<DdbState, DdbAction>,
    ) -> crate::engine::Decision<DdbState, DdbAction> {
        use crate::engine::Decision;
        use crate::machines::distributeddb::state::{ScaleHook, ScalePhase};
        match decision {
            Decision::Go {
                to:
                    DdbState::Scaling {
                        version,
                        from_replicas,
                        replicas,
                        hook: Some(h),
                    },
                reason,
                message,
                actions,
            } if h.phase == ScalePhase::PreScaleDown => Decision::Go {
                to: DdbState::Scaling {
                    version,
                    from_replicas,
                    replicas: replicas - 1,
                    hook: Some(ScaleHook {
                        phase: ScalePhase::PostScaleDown,
                        ..h
                    }),
                },
                reason,
                message,
                actions,
            },
            other => other,
        }
    }
}

/// Three members with scaling hooks, scaled to two.
fn scaled_down_by_one() -> Events {
    then(adopted(), [Event::Edit(Edit::Replicas(2)), r(), r(), r()])
}

#[test]
fn a_scale_down_removes_the_member_before_the_statefulset_drops_its_pod() {
    holds(Cluster::existing(3, Some(1), false), &scaled_down_by_one());
}

#[test]
fn the_model_finds_a_scale_down_that_shrinks_the_statefulset_before_removing_the_member() {
    type Planted = crate::engine::planted::Planted<DistributedDb, ShrinkBeforeRemoving>;
    let failure = crate::engine::check::check_scenario::<Planted, Cluster>(
        &config(),
        Cluster::existing(3, Some(1), false),
        &scaled_down_by_one(),
    )
    .expect_err("the planted bug is found");
    assert!(
        failure.to_string().contains("while db-2 is still a member"),
        "{failure}"
    );
}

#[test]
fn a_scale_up_and_back_down_with_hooks_ends_with_the_membership_equal_to_the_pods() {
    use Move::*;
    let story = then(
        scale_up_begun(),
        [
            env(JobFinishes(0, true)),
            r(),
            env(StsObserves),
            env(StsCreatesPods),
            env(PodReady(2)),
            r(),
            r(),
            env(JobFinishes(0, true)),
            r(),
            r(),
            Event::Edit(Edit::Replicas(2)),
            r(),
            r(),
        ],
    );
    holds(Cluster::existing(2, Some(1), false), &story);
}

#[test]
fn a_pod_recreated_after_its_member_was_removed_goes_with_the_shrink() {
    // Found by the deep check: scaling 3 -> 1, db-2 evicted as the step began; its
    // pre-scale-down hook removed the member and the StatefulSet controller recreated
    // the pod before the shrink. The pod cannot join and goes with the shrink; the
    // operator grew nothing over a non-member (the invariant had blamed the controller).
    use Move::*;
    let story = then(
        adopted(),
        [
            Event::Edit(Edit::Replicas(1)),
            env(PodEvicted(2)),
            r(),
            r(),
            env(JobFinishes(0, true)),
        ],
    );
    holds(Cluster::existing(3, Some(1), false), &story);
}

#[test]
fn a_statefulset_created_on_a_stale_read_of_creating_bootstraps_its_membership() {
    // Found by the deep check: deleted while Creating, finalized, then a reconcile on a
    // read two events old created the StatefulSet; the model took that creation for a
    // growth over members never added. A StatefulSet's creation is its bootstrap.
    let crashes = Event::Reconcile(Reconcile {
        fault: crate::engine::check::Fault::CrashAfterWrite,
        ..Reconcile::FRESH
    });
    let behind = Event::Reconcile(Reconcile {
        object_lag: 2,
        ..Reconcile::FRESH
    });
    holds(
        Cluster::new(1, Some(1), false),
        &vec![r(), Event::Delete, crashes, behind],
    );
}

#[test]
fn a_stale_read_after_a_scale_down_step_does_not_grow_the_statefulset_back() {
    // Found by the deep check: scaling 2 -> 1, the pre-scale-down hook removed db-1's
    // member; the operator shrank the StatefulSet and crashed before its write, and the
    // next reconcile read the StatefulSet two events old (drifted, not yet observed by
    // its controller): holding it at 2 as a hand-made drift is held, it grew it back
    // over a member already removed.
    use Move::*;
    let crashes = Event::Reconcile(Reconcile {
        fault: crate::engine::check::Fault::Crash { after: 1 },
        ..Reconcile::FRESH
    });
    let behind = Event::Reconcile(Reconcile {
        world_lag: 2,
        ..Reconcile::FRESH
    });
    let story = then(
        adopted(),
        [
            Event::Edit(Edit::Replicas(1)),
            r(),
            r(),
            env(JobFinishes(0, true)),
            r(),
            env(StsDrifts),
            env(StsObserves),
            crashes,
            behind,
        ],
    );
    holds(Cluster::existing(2, Some(1), false), &story);
}

#[test]
fn a_starting_pod_replaced_on_a_stale_read_while_creating_costs_only_its_start() {
    // Found by the deep check: the spec's image changed back and forth while Creating,
    // and a reconcile read the StatefulSet from before the operator's own last write of
    // its template: it replaced starting pods that already ran the template's image. They
    // had never been Ready (the deletes are preconditioned on that read); creation ends.
    use Move::*;
    let behind = Event::Reconcile(Reconcile {
        world_lag: 2,
        ..Reconcile::FRESH
    });
    let story = vec![
        r(),
        r(),
        env(StsObserves),
        env(StsCreatesPods),
        Event::Edit(Edit::Image(2)),
        r(),
        Event::Edit(Edit::Image(0)),
        env(StsObserves),
        r(),
        Event::Edit(Edit::Image(2)),
        behind,
    ];
    holds(Cluster::new(2, None, false), &story);
}
