//! (i) No acknowledged commit lost under synchronous replication (`docs/decisions/0002-zero-loss.md`), on real
//! PostgreSQL, with two writers: one through `<cluster>-rw` and one on the old
//! primary's pod IP. With `spec.synchronous` (ANY 1, `Required`) a commit is
//! acknowledged only once a standby flushed it, so a failover loses none of them
//! whatever stopped the primary:
//! - its whole pod frozen through its freezer cgroup ([`crate::postgres_freeze`]), as
//!   a VM pause does; thawed after the failover, its backends run again before any
//!   agent can stop them, and still acknowledge nothing: no standby streams from it any
//!   more (each follows the Lease's holder by name, and nobody once its tenure ran
//!   out), so every commit it would take waits for a quorum it cannot have;
//! - its pod cut off from the API server and from its standbys
//!   (`tools/node/api-cut.sh`): it can neither renew its Lease nor have a commit
//!   acknowledged by a standby.
//!
//! And `dataDurability: Preferred`, which gives the guarantee up while no standby
//! streams, says so in the condition `SynchronousReplication`.

use super::*;
use crate::postgres_freeze::{Frozen, pod_cgroup};

/// A 3-instance cluster with `synchronous: {number: 1}` and both writers running,
/// acknowledged commits on each; returns the primary's pod, its pod IP and its UID.
async fn synchronous_under_two_writers(real: &Real, name: &str) -> (String, String, String) {
    under_two_writers(real, name, true).await
}

/// A 3-instance cluster, with `synchronous: {number: 1}` if `synchronous`, both standbys
/// streaming and both writers running, acknowledged commits on each; returns the
/// primary's pod, its pod IP and its UID.
async fn under_two_writers(real: &Real, name: &str, synchronous: bool) -> (String, String, String) {
    let spec = if synchronous {
        json!({"failoverDelaySeconds": 0, "synchronous": {"number": 1}})
    } else {
        json!({"failoverDelaySeconds": 0})
    };
    let pg = real.cluster(name, 3, spec).await;
    let old = primary_of(&pg);
    let streaming = if synchronous {
        "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'quorum'"
    } else {
        "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
    };
    real.shows(&old, streaming, "2").await;
    let pods: Api<Pod> = real.pg.env.api();
    let old_pod = pods.get(&old).await.expect("get the primary's pod");
    let old_ip = old_pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("the primary's pod IP");
    let uid = old_pod.uid().unwrap_or_default();
    real.start_client(name).await;
    real.start_writer("direct", &old_ip, name, DIRECT_FIRST)
        .await;
    real.writing(true);
    real.writing_on("direct", true);
    real.acks_grow(0, 10).await;
    real.acks_grow_on("direct", 0, 10).await;
    (old, old_ip, uid)
}

/// Once the direct writer made an attempt that began after `since`, stop both writers
/// and assert that every acknowledged commit is in the cluster and that the old primary
/// acknowledged no commit begun after `cut` (the freeze or the cut). `what` names the
/// case in the report.
fn no_acknowledged_commit_lost(real: &Real, name: &str, cut: f64, what: &str) {
    let Losses { lost, direct, late } = losses(real, name, cut, what);
    assert!(
        lost.is_empty() && direct.is_empty(),
        "{what}: acknowledged commits lost under synchronous replication: {lost:?}, direct {direct:?}"
    );
    assert!(
        late.is_empty(),
        "{what}: the old primary acknowledged commits begun after it was cut off: {late:?}"
    );
}

/// What a case lost: the acknowledged commits missing from the cluster, through `-rw`
/// and on the old primary's pod IP, and the ids of the old primary's acknowledgements of
/// commits begun after the cut.
struct Losses {
    lost: Vec<u64>,
    direct: Vec<u64>,
    late: Vec<u64>,
}

/// Once the direct writer made an attempt that began after the call, stop both writers
/// and count what was acknowledged and what survived ([`Losses`]), printed under `what`.
fn losses(real: &Real, name: &str, cut: f64, what: &str) -> Losses {
    let mut direct = real.attempts("direct");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let since = now_epoch();
    while !direct.iter().any(|a| a.start > since) {
        assert!(
            std::time::Instant::now() < deadline,
            "the direct writer made no attempt after {since}"
        );
        std::thread::sleep(Duration::from_millis(500));
        direct = real.attempts("direct");
    }
    real.stop_writer("direct");
    let direct = real.attempts("direct");
    let client = real.attempts("client");
    let Tally { acked, rows, lost } = real.tally(name);
    let acked_direct: Vec<&Attempt> = direct.iter().filter(|a| a.acked).collect();
    let lost_direct: Vec<u64> = acked_direct
        .iter()
        .map(|a| a.id)
        .filter(|id| !rows.contains_key(id))
        .collect();
    let late: Vec<u64> = acked_direct
        .iter()
        .filter(|a| a.start >= cut)
        .map(|a| a.id)
        .collect();
    eprintln!(
        "(i, {what}) {} acknowledged through -rw ({} attempts), {} direct ({} attempts), {} rows; lost {lost:?}, direct {lost_direct:?}; acknowledged by the old primary after the cut {late:?}",
        acked.len(),
        client.len(),
        acked_direct.len(),
        direct.len(),
        rows.len()
    );
    Losses {
        lost: lost.into_iter().collect(),
        direct: lost_direct,
        late,
    }
}

#[tokio::test]
async fn with_synchronous_replication_a_frozen_primary_loses_no_acknowledged_commit_and_thawed_acknowledges_nothing()
 {
    if !real_node() {
        return;
    }
    let real = Real::new("pgreal-pause").await;
    let name = "pg";
    let (old, old_ip, uid) = synchronous_under_two_writers(&real, name).await;
    let cgroup = pod_cgroup(&uid).unwrap_or_else(|| panic!("no freezer cgroup for pod{uid}"));
    let frozen_at = now_epoch();
    let frozen = Frozen::freeze(cgroup).await;
    let new = failed_over_from(&real, name, &old).await;
    eprintln!(
        "(i, frozen) {old} ({old_ip}) frozen; Ready with {new} {:.1}s later",
        now_epoch() - frozen_at
    );
    let after = real.acks().len();
    real.acks_grow(after, 10).await;
    // The standby left streams from the new primary, by its name: not through the
    // `-rw` Service, and so not over a connection to the frozen pod, whose kernel
    // still holds it open.
    let other = (0..3)
        .map(|k| format!("{name}-{k}"))
        .find(|p| *p != old && *p != new)
        .expect("a third member");
    real.shows(
        &other,
        "SELECT split_part(sender_host, '.', 1) FROM pg_stat_wal_receiver WHERE status = 'streaming'",
        &new,
    )
    .await;
    // Thawed: its backends and walsenders run again before its agent can fence it.
    drop(frozen);
    no_acknowledged_commit_lost(&real, name, frozen_at, "frozen");
    real.finish().await;
}

/// The same freeze in asynchronous replication: a commit is acknowledged before any
/// standby has it, so a failover may lose what only the frozen primary had. Reported,
/// not asserted (the README's figure for asynchronous replication); what is asserted is
/// that the cluster fails over and the thawed old primary rejoins.
#[tokio::test]
async fn asynchronously_a_frozen_primary_is_failed_over_and_what_it_lost_is_reported() {
    if !real_node() {
        return;
    }
    let real = Real::new("pgreal-apause").await;
    let name = "pg";
    let (old, old_ip, uid) = under_two_writers(&real, name, false).await;
    let cgroup = pod_cgroup(&uid).unwrap_or_else(|| panic!("no freezer cgroup for pod{uid}"));
    let frozen_at = now_epoch();
    let frozen = Frozen::freeze(cgroup).await;
    let new = failed_over_from(&real, name, &old).await;
    eprintln!(
        "(i, frozen, asynchronous) {old} ({old_ip}) frozen; Ready with {new} {:.1}s later",
        now_epoch() - frozen_at
    );
    let after = real.acks().len();
    real.acks_grow(after, 10).await;
    drop(frozen);
    losses(&real, name, frozen_at, "frozen, asynchronous");
    real.all_ready(name).await;
    real.finish().await;
}

#[tokio::test]
async fn with_synchronous_replication_a_primary_cut_off_from_the_api_and_its_standbys_loses_no_acknowledged_commit()
 {
    if !real_node() {
        return;
    }
    let real = Real::new("pgreal-part").await;
    let name = "pg";
    let (old, old_ip, _) = synchronous_under_two_writers(&real, name).await;
    let pods: Api<Pod> = real.pg.env.api();
    let mut peers = Vec::new();
    for k in 0..3 {
        let pod = format!("{name}-{k}");
        if pod != old {
            let ip = pods
                .get(&pod)
                .await
                .ok()
                .and_then(|p| p.status?.pod_ip)
                .unwrap_or_else(|| panic!("{pod}'s IP"));
            peers.push(ip);
        }
    }
    api_cut("add", &old_ip);
    peers_cut("peers", &old_ip, &peers);
    // From here on (not from the first rule: a commit the standbys acknowledged while
    // the second went in was acknowledged before the cut, and is kept).
    let cut_at = now_epoch();
    let new = failed_over_from(&real, name, &old).await;
    eprintln!(
        "(i, partitioned) {old} ({old_ip}) cut off from the API server and from {peers:?}; Ready with {new} {:.1}s later",
        now_epoch() - cut_at
    );
    let after = real.acks().len();
    real.acks_grow(after, 10).await;
    no_acknowledged_commit_lost(&real, name, cut_at, "partitioned");
    // Healed: the old primary's data rejoins as a standby of the new one.
    peers_cut("unpeer", &old_ip, &peers);
    api_cut("del", &old_ip);
    real.all_ready(name).await;
    real.finish().await;
}

/// `tools/node/api-cut.sh peers|unpeer POD_IP PEER_IP...`.
fn peers_cut(op: &str, ip: &str, peers: &[String]) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/node/api-cut.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(&script).arg(op).arg(ip).args(peers);
    if let Some(dir) = kubeconfig_path().parent() {
        cmd.env("LOCKSTEP_CLUSTER_DIR", dir);
    }
    let out = cmd.output().expect("run tools/node/api-cut.sh");
    assert!(
        out.status.success(),
        "api-cut.sh {op} {ip} {peers:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `dataDurability: Preferred` trades the guarantee for availability, and says when it
/// does: a 2-instance cluster whose standby is cut off from the primary (no API cut) turns
/// asynchronous once the primary's walsender gives up on it (`wal_sender_timeout`, 60 s),
/// commits go on being acknowledged, and the cluster condition `SynchronousReplication`
/// turns `False` (`Asynchronous`), as does the primary's `/metrics`; healed, both turn
/// back.
#[tokio::test]
async fn preferred_turns_asynchronous_when_no_standby_streams_and_says_so() {
    if !real_node() {
        return;
    }
    let real = Real::new("pgreal-pref").await;
    let name = "pg";
    let pg = real
        .cluster(
            name,
            2,
            json!({"synchronous": {"number": 1, "dataDurability": "Preferred"}}),
        )
        .await;
    let primary = primary_of(&pg);
    let standby = if primary == "pg-0" { "pg-1" } else { "pg-0" };
    let sync = |pg: &PostgresCluster| {
        pg.status
            .as_ref()
            .and_then(|s| s.engine.condition("SynchronousReplication"))
            .map(|c| (c.status.clone(), c.reason.clone()))
    };
    real.cluster_until(name, "SynchronousReplication True", move |pg| {
        sync(pg).is_some_and(|(s, _)| s == "True")
    })
    .await;
    let ip = |pod: &str| {
        let (ok, ip) = real.kubectl(&["get", "pod", pod, "-o", "jsonpath={.status.podIP}"]);
        assert!(ok, "{ip}");
        ip.trim().to_owned()
    };
    let (primary_ip, standby_ip) = (ip(&primary), ip(standby));
    peers_cut("peers", &primary_ip, std::slice::from_ref(&standby_ip));
    let turned = real
        .cluster_until(
            name,
            "SynchronousReplication False (Asynchronous)",
            move |pg| sync(pg).is_some_and(|(s, r)| s == "False" && r == "Asynchronous"),
        )
        .await;
    eprintln!(
        "(i, preferred) {:?}",
        turned
            .status
            .as_ref()
            .and_then(|s| s.engine.condition("SynchronousReplication"))
            .map(|c| c.message.clone())
    );
    real.metrics_say(&primary, &["lockstep_instance_synchronous_degraded 1"])
        .await;
    // Asynchronous: a commit is acknowledged with no standby to wait for.
    let (ok, out) = real.psql_on(
        &primary,
        "CREATE TABLE alone (i int); INSERT INTO alone VALUES (1)",
    );
    assert!(ok, "a commit while asynchronous: {out}");
    peers_cut("unpeer", &primary_ip, &[standby_ip]);
    real.cluster_until(name, "SynchronousReplication True again", move |pg| {
        sync(pg).is_some_and(|(s, _)| s == "True")
    })
    .await;
    real.metrics_say(&primary, &["lockstep_instance_synchronous_degraded 0"])
        .await;
    real.finish().await;
}
