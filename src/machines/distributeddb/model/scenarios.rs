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

/// Scenarios for the edges generated sequences seldom reach: the edge (`From -> To
/// (Reason)`), the world and a short story that takes it (the liveness phase then
/// settles the world as for any run).
fn scenarios() -> Vec<Scenario<Cluster, Move, Edit>> {
    use Move::*;
    let r = || Event::Reconcile(Reconcile::FRESH);
    let env = Event::Env;
    // From adoption to Ready (the extra reconciles are quiet).
    let adopt = || vec![r(), r(), r(), r()];
    // Ready at db:1 to Upgrading at the restart of pod 0, with hooks configured: the
    // pre-hook runs and succeeds.
    let to_restart = |mut events: Vec<Event<Move, Edit>>| {
        events.extend([
            Event::Edit(Edit::Image(1)),
            r(),
            r(),
            env(StsObserves),
            r(),
            env(JobFinishes(0, true)),
            r(),
        ]);
        events
    };
    // ... then pod 0 is replaced and Ready at db:2: on to its post-hook, which starts.
    let to_post_hook = |mut events: Vec<Event<Move, Edit>>| {
        events.extend([
            r(),
            env(PodGone(0)),
            env(StsCreatesPods),
            env(PodReady(0)),
            r(),
            r(),
        ]);
        events
    };
    vec![
        (
            // A pod recreated from a template someone edited is replaced.
            "Ready -> Upgrading (StrayImage)",
            Cluster::existing(2, None, false),
            [
                adopt(),
                vec![
                    env(StsImageTampered),
                    env(StsObserves),
                    env(PodEvicted(1)),
                    env(PodGone(1)),
                    env(StsCreatesPods),
                    env(PodReady(1)),
                    r(),
                    env(StsObserves),
                    r(),
                ],
            ]
            .concat(),
        ),
        (
            // spec.image is set to what every pod already runs.
            "Ready -> Ready (VersionAdopted)",
            Cluster::existing(1, None, false),
            [
                adopt(),
                vec![
                    env(StsImageSet(1)),
                    env(StsObserves),
                    env(PodEvicted(0)),
                    env(PodGone(0)),
                    env(StsCreatesPods),
                    env(PodReady(0)),
                    Event::Edit(Edit::Image(1)),
                    r(),
                ],
            ]
            .concat(),
        ),
        (
            // A pre-hook out of retries runs again once retry-hook is set (the liveness
            // phase sets it).
            "Upgrading -> Upgrading (HookRetryRequested)",
            Cluster::existing(1, Some(0), false),
            [
                adopt(),
                vec![
                    Event::Edit(Edit::Image(1)),
                    r(),
                    r(),
                    env(StsObserves),
                    r(),
                    env(JobFinishes(0, false)),
                    r(),
                    Event::Tick(600),
                    r(),
                ],
            ]
            .concat(),
        ),
        (
            // The last pod's post-hook is out of retries and skip-hook is set.
            "Upgrading -> Ready (HookSkipped)",
            Cluster::existing(1, Some(0), false),
            [
                to_post_hook(to_restart(adopt())),
                vec![
                    env(JobFinishes(0, false)),
                    r(),
                    Event::Tick(600),
                    r(),
                    env(SkipHook(1)),
                    r(),
                ],
            ]
            .concat(),
        ),
        (
            // The upgraded pod restarts before its post-hook finished.
            "Upgrading -> Upgrading (PodRestarted)",
            Cluster::existing(1, Some(1), false),
            [
                to_post_hook(to_restart(adopt())),
                vec![
                    env(PodEvicted(0)),
                    env(PodGone(0)),
                    env(StsCreatesPods),
                    env(PodReady(0)),
                    r(),
                ],
            ]
            .concat(),
        ),
        (
            // The replacement comes back from a template someone edited.
            "Upgrading -> Upgrading (RecreatedAtStaleImage)",
            Cluster::existing(1, None, false),
            [
                adopt(),
                vec![
                    Event::Edit(Edit::Image(1)),
                    r(),
                    r(),
                    env(StsObserves),
                    r(),
                    r(),
                    env(StsImageTampered),
                    env(StsObserves),
                    env(PodGone(0)),
                    env(StsCreatesPods),
                    r(),
                    env(StsObserves),
                    r(),
                ],
            ]
            .concat(),
        ),
        (
            // backupPolicy is removed before the backup Job exists.
            "BackingUp -> Ready (BackupCancelled)",
            Cluster::existing(1, None, true),
            [
                adopt(),
                vec![
                    env(BackupNow(0)),
                    r(),
                    Event::Edit(Edit::ToggleBackups),
                    r(),
                ],
            ]
            .concat(),
        ),
        (
            // Deleted while backing up, the backupPolicy gone.
            "BackingUp -> Finalized (NoBackupPolicy)",
            Cluster::existing(1, None, true),
            [
                adopt(),
                vec![
                    env(BackupNow(0)),
                    r(),
                    Event::Edit(Edit::ToggleBackups),
                    Event::Delete,
                    r(),
                ],
            ]
            .concat(),
        ),
    ]
}

#[test]
fn distributeddb_is_safe_and_live_under_faults_and_takes_every_edge() {
    let report = check_machine::<DistributedDb, Cluster>(config());
    assert!(report.writes > 0);
    assert_every_edge_taken::<DistributedDb, Cluster>(&config(), &report, scenarios());
}
