//! (i) The in-place restore (`spec.restore`), on real PostgreSQL and the
//! archive test's S3 server: a writer commits through `<name>-rw` before the target,
//! pauses while the target LSN is read, and commits again; the cluster is rewound to
//! the target in place (`kubectl lockstep restore`), and the writer commits after. Every commit acknowledged
//! before the target is kept, none acknowledged after it, and every one acknowledged
//! after the restore; both instances hold the same rows on a new timeline.

use super::*;

/// The timeline `pod` writes (or replays) on.
fn timeline_of(real: &Real, pod: &str) -> u32 {
    let (ok, out) = real.psql_on(pod, "SELECT timeline_id FROM pg_control_checkpoint()");
    assert!(ok, "{out}");
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("a timeline: {out}"))
}

/// Under the writer, rewind cluster `name` (primary `primary`, archiving into its
/// repository) to an LSN read between two bursts of commits, and count.
pub(super) async fn in_place_restore_under_a_writer(real: &Real, name: &str, primary: &str) {
    let before_timeline = timeline_of(real, primary);
    real.start_client(name).await;
    real.writing(true);
    real.acks_grow(0, 20).await;
    real.writing(false);
    // Every commit the writer logged as acknowledged is in the WAL before the LSN read
    // after it; the attempt in flight, if any, is the one after the last logged.
    let logged = real.attempts("client");
    let kept: BTreeSet<u64> = logged.iter().filter(|a| a.acked).map(|a| a.id).collect();
    let last = logged.iter().map(|a| a.id).max().unwrap_or(0);
    let (ok, target) = real.psql_on(primary, "SELECT pg_current_wal_lsn()");
    assert!(ok, "{target}");
    let target = target.trim().to_owned();
    real.writing(true);
    let now = real.acks().len();
    real.acks_grow(now, 20).await;
    real.writing(false);
    // Begun after the target was read: committed after it.
    let discarded: BTreeSet<u64> = real
        .acks()
        .into_iter()
        .filter(|id| *id > last + 1)
        .collect();
    // Every insert begun by now (the writer is idle: none is in flight) is not one of
    // after the restore.
    let before_restore = real.begun();
    // The target's WAL must be in the archive: the file holding it is switched out.
    real.archive_now(primary).await;

    // Through the kubectl plugin, which sets spec.restore and waits for the outcome.
    let (code, out) = crate::postgres::plugin(&[
        "-n",
        real.ns(),
        "restore",
        name,
        "--lsn",
        &target,
        "--timeout",
        "900",
    ])
    .await;
    assert_eq!(code, 0, "kubectl lockstep restore: {out}");
    assert!(out.contains("is Ready, restored"), "{out}");
    let restored = real
        .cluster_until(name, "Ready after RestoreCompleted", |pg| {
            is_ready_at(pg, IMAGE) && history(pg).iter().any(|h| h.reason == "RestoreCompleted")
        })
        .await;
    let reasons: Vec<String> = history(&restored).into_iter().map(|h| h.reason).collect();
    for step in [
        "RestoreRequested",
        "WritesStopped",
        "VolumesReplaced",
        "PrimaryRestored",
        "RestoreCompleted",
    ] {
        assert!(reasons.iter().any(|r| r == step), "{step} in {reasons:?}");
    }
    assert_eq!(primary_of(&restored), format!("{name}-0"));
    real.all_ready(name).await;

    // The writer goes on after the restore.
    real.writing(true);
    let now = real.acks().len();
    real.acks_grow(now, 20).await;
    let acked = real.stop_client();
    let after: BTreeSet<u64> = acked
        .iter()
        .copied()
        .filter(|id| *id > before_restore)
        .collect();
    let rows = real.rows(name);
    let missing: Vec<u64> = kept
        .union(&after)
        .filter(|id| !rows.contains_key(id))
        .copied()
        .collect();
    let resurrected: Vec<u64> = discarded
        .iter()
        .filter(|id| rows.contains_key(id))
        .copied()
        .collect();
    eprintln!(
        "(restore) target {target}: {} acknowledged before it, {} after it (discarded), {} after the restore; {} rows",
        kept.len(),
        discarded.len(),
        after.len(),
        rows.len()
    );
    assert!(missing.is_empty(), "acknowledged commits lost: {missing:?}");
    assert!(
        resurrected.is_empty(),
        "commits after the target survived the restore: {resurrected:?}"
    );
    // Both instances hold the same rows, on a timeline the restore made.
    let count = format!("{}", rows.len());
    for pod in [format!("{name}-0"), format!("{name}-1")] {
        real.shows(&pod, "SELECT count(*) FROM acks", &count).await;
        let timeline = timeline_of(real, &pod);
        assert!(
            timeline > before_timeline,
            "{pod} runs timeline {timeline}, not one after {before_timeline}"
        );
    }

    // A target the archive cannot reach: the restore stops writes and replaces the
    // volumes, then pod 0 fails to restore: Degraded (`RestoreFailed`) naming it, and
    // nothing serves. A new token without a target (the end of the archive) is the way
    // out, and brings back every row committed before the failed request.
    real.archive_now(&format!("{name}-0")).await;
    let (code, out) = crate::postgres::plugin(&[
        "-n",
        real.ns(),
        "restore",
        name,
        "--lsn",
        "FF/0",
        "--timeout",
        "600",
    ])
    .await;
    assert_eq!(code, 1, "a restore beyond the archive fails: {out}");
    assert!(
        out.contains("RestoreFailed") || out.contains("could not restore"),
        "{out}"
    );
    let failed = real
        .cluster_until(name, "Degraded: RestoreFailed", |pg| {
            cluster_degraded(pg).is_some_and(|(reason, _)| reason == "RestoreFailed")
        })
        .await;
    let (_, message) = cluster_degraded(&failed).unwrap_or_default();
    assert!(
        message.contains(&format!("{name}-0 could not restore")),
        "{message}"
    );
    assert_eq!(
        failed
            .status
            .as_ref()
            .and_then(|s| s.engine.phase.as_deref()),
        Some("RestoringInPlace")
    );
    let (code, out) =
        crate::postgres::plugin(&["-n", real.ns(), "restore", name, "--timeout", "900"]).await;
    assert_eq!(code, 0, "the way out, the end of the archive: {out}");
    real.all_ready(name).await;
    let again = real.rows(name);
    assert_eq!(
        again.keys().collect::<Vec<_>>(),
        rows.keys().collect::<Vec<_>>(),
        "the end of the archive holds every row committed before the failed request"
    );
}

/// The cluster's `Degraded` condition, if it is true: its reason and message.
fn cluster_degraded(pg: &PostgresCluster) -> Option<(String, String)> {
    pg.status
        .as_ref()?
        .engine
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded" && c.status == "True")
        .map(|c| (c.reason.clone(), c.message.clone()))
}
