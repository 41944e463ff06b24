//! How long writes are refused through `<cluster>-rw` in a failover and in a switchover
//! (`make bench-postgres`): a benchmark on the real node, not a test. It is `#[ignore]`d,
//! so `make test` never runs it; `make bench-postgres` (and `make bench` with
//! `BENCH_PG=1`) runs it with `--ignored` and it writes
//! `target/bench/postgres-recovery-<UTC timestamp>.json`.
//!
//! For each replication mode (asynchronous; `synchronous: {number: 1}`, `Required`) a
//! 3-instance cluster with `failoverDelaySeconds: 0` (detection is not the figure) and
//! a writer on `-rw` (one commit per `psql`, about ten a second), then
//! `BENCH_PG_RUNS` (5) times each, one after the other:
//! - **a switchover** on demand (`lockstep.dev/switchover`) to a Ready replica, until the
//!   cluster is Ready with it as the primary;
//! - **a failover**: the primary's postmaster killed (again each time its container
//!   brings it back, until the machine has begun the failover), until the cluster is
//!   Ready with another primary and every instance is Ready again.
//!
//! The figure of one event is the longest gap between two consecutive acknowledged
//! commits from the last one before the event on (the writer's wall clock): the time
//! writes were refused, plus at most one attempt's spacing (about 0.1 s). The medians
//! are compared in the docs with CloudNativePG's published targets.

use super::*;

/// A mode: its name and its extra spec.
fn modes() -> [(&'static str, serde_json::Value); 2] {
    [
        ("asynchronous", json!({"failoverDelaySeconds": 0})),
        (
            "synchronous",
            json!({"failoverDelaySeconds": 0, "synchronous": {"number": 1}}),
        ),
    ]
}

/// The longest gap between consecutive acknowledged commits of `attempts`, from the
/// last one acknowledged before `since` on.
fn longest_gap(attempts: &[Attempt], since: f64) -> f64 {
    let acks: Vec<f64> = attempts.iter().filter(|a| a.acked).map(|a| a.end).collect();
    let from = acks.iter().rposition(|t| *t < since).unwrap_or(0);
    acks[from..]
        .windows(2)
        .map(|w| w[1] - w[0])
        .fold(0.0, f64::max)
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => f64::midpoint(v[n / 2 - 1], v[n / 2]),
    }
}

#[tokio::test]
#[ignore = "a benchmark: `make bench-postgres` runs it on the real node"]
async fn seconds_writes_are_refused_in_a_switchover_and_a_failover() {
    let runs: usize = std::env::var("BENCH_PG_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let mut report = serde_json::Map::new();
    for (mode, extra) in modes() {
        let real = Real::new(&format!("pgbench-{}", &mode[..4])).await;
        let name = "pg";
        real.cluster(name, 3, extra).await;
        real.start_client(name).await;
        real.writing(true);
        real.acks_grow(0, 10).await;
        let (mut switchovers, mut failovers) = (Vec::new(), Vec::new());
        for run in 0..runs {
            let pg = real.pg.api.get(name).await.expect("the cluster");
            let old = primary_of(&pg);
            let target = pg
                .status
                .as_ref()
                .and_then(|s| s.replica_pods.first().cloned())
                .expect("a Ready replica");
            let since = now_epoch();
            real.pg
                .merge_patch(
                    name,
                    json!({"metadata": {"annotations": {"lockstep.dev/switchover": format!("{target}:{mode}-{run}")}}}),
                )
                .await;
            let wanted = target.clone();
            real.cluster_until(name, "Ready with the requested primary", move |pg| {
                is_ready_at(pg, IMAGE)
                    && pg.status.as_ref().and_then(|s| s.primary_pod.as_deref())
                        == Some(wanted.as_str())
            })
            .await;
            real.all_ready(name).await;
            real.acks_grow(real.acks().len(), 5).await;
            let gap = longest_gap(&real.attempts("client"), since);
            eprintln!(
                "(bench, {mode}) switchover {run}: {old} -> {target}, writes refused {gap:.2} s"
            );
            switchovers.push(gap);
        }
        for run in 0..runs {
            let pg = real.pg.api.get(name).await.expect("the cluster");
            let old = primary_of(&pg);
            let since = now_epoch();
            let after = real.kill_primary(name, &old).await;
            real.all_ready(name).await;
            real.acks_grow(real.acks().len(), 5).await;
            let gap = longest_gap(&real.attempts("client"), since);
            eprintln!(
                "(bench, {mode}) failover {run}: {old} -> {}, writes refused {gap:.2} s",
                primary_of(&after)
            );
            // Where the seconds went: the machine's transitions since the first kill.
            let pg = real.pg.api.get(name).await.expect("the cluster");
            let steps: Vec<String> = history(&pg)
                .into_iter()
                .map(|h| (h.at.timestamp_millis() as f64 / 1000.0 - since, h.reason))
                .filter(|(offset, _)| *offset >= -1.0)
                .map(|(offset, reason)| format!("+{offset:.0}s {reason}"))
                .collect();
            eprintln!("(bench, {mode}) failover {run} steps: {}", steps.join(", "));
            failovers.push(gap);
        }
        let Tally { acked, lost, .. } = real.tally(name);
        eprintln!(
            "(bench, {mode}) switchover median {:.2} s {switchovers:.2?}; failover median {:.2} s {failovers:.2?}; {} commits acknowledged, lost {lost:?}",
            median(&switchovers),
            median(&failovers),
            acked.len()
        );
        report.insert(
            mode.to_owned(),
            json!({
                "switchover_seconds": switchovers,
                "switchover_median_seconds": median(&switchovers),
                "failover_seconds": failovers,
                "failover_median_seconds": median(&failovers),
                "acknowledged": acked.len(),
                "lost": lost,
            }),
        );
        real.finish().await;
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&dir).expect("target/bench");
    let path = dir.join(format!(
        "postgres-recovery-{}.json",
        chrono::Utc::now().format("%Y%m%dT%H%M%SZ")
    ));
    let text =
        serde_json::to_string_pretty(&serde_json::Value::Object(report)).expect("a report as JSON");
    std::fs::write(&path, text).expect("write the report");
    eprintln!("(bench) wrote {}", path.display());
}

#[test]
fn the_gap_is_measured_from_the_last_commit_acknowledged_before_the_event() {
    let at = |acked: bool, end: f64| Attempt {
        acked,
        id: 0,
        start: end - 0.05,
        end,
    };
    let attempts = [
        at(true, 1.0),
        at(true, 5.0),
        at(true, 10.0),
        at(false, 10.5),
        at(false, 12.0),
        at(true, 13.5),
        at(true, 13.6),
    ];
    assert!((longest_gap(&attempts, 10.2) - 3.5).abs() < 1e-9);
    assert!((median(&[3.0, 1.0, 2.0]) - 2.0).abs() < 1e-9);
    assert!((median(&[4.0, 1.0, 2.0, 3.0]) - 2.5).abs() < 1e-9);
}
