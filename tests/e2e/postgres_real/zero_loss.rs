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
//!
//! Under `Required`, the standby that acknowledged the last commits may be NotReady
//! when the primary is lost (its readiness probe failing while it streams): the
//! failover waits for it, `Degraded`, rather than promote a Ready standby behind it,
//! and promotes it once it is Ready, losing nothing
//! ([`under_required_a_failover_waits_for_the_furthest_member_whose_probe_fails_and_loses_no_acknowledged_commit`]).

use lockstep::machines::postgres::table::reason::{MOST_ADVANCED_CHOSEN, NO_PROMOTION_TARGET};

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

/// Under `dataDurability: Required` the member a failover must promote is the furthest
/// one its survey read, even when its readiness probe fails: a standby whose own port
/// is blocked still streams, acknowledges commits, and its manager still answers the
/// survey. Forced on three instances (`ANY 1`, `failoverDelaySeconds: 5`) under the
/// `-rw` writer, with rules in the pods' own network namespaces
/// (`tools/node/pod-nft.sh`):
/// 1. standby B's WAL stream is dropped (inbound TCP from port 5432, loopback aside, so
///    B stays Ready): only standby A acknowledges commits from then on;
/// 2. A's port 5432 is blocked (inbound TCP to it), so its readiness probe
///    (`pg_isready -h 127.0.0.1`) fails while its WAL receiver's own connection and its
///    manager go on: A turns NotReady and commits are still acknowledged;
/// 3. the primary's pod is frozen.
///
/// The failover does not promote B, Ready but behind: the cluster turns `Degraded`
/// (`NoPromotionTarget`) naming A, and B stays in recovery. Once A's port is open again
/// and A is Ready, A is promoted. Thawed and healed, every pod Ready, the writer lost
/// no acknowledged commit.
#[tokio::test]
async fn under_required_a_failover_waits_for_the_furthest_member_whose_probe_fails_and_loses_no_acknowledged_commit()
 {
    if !real_node() {
        return;
    }
    let real = Real::new("pgreal-furthest").await;
    let name = "req";
    let pg = real
        .cluster(
            name,
            3,
            json!({
                "failoverDelaySeconds": 5,
                "synchronous": {"number": 1, "method": "Any", "dataDurability": "Required"},
            }),
        )
        .await;
    let old = primary_of(&pg);
    let mut standbys: Vec<String> = (0..3)
        .map(|k| format!("{name}-{k}"))
        .filter(|p| *p != old)
        .collect();
    standbys.sort();
    let (a, b) = (standbys[0].clone(), standbys[1].clone());
    real.shows(
        &old,
        "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'quorum'",
        "2",
    )
    .await;
    let pods: Api<Pod> = real.pg.env.api();
    let uid = |pod: Pod| pod.uid().unwrap_or_default();
    let uid_old = uid(pods.get(&old).await.expect("the primary's pod"));
    let uid_a = uid(pods.get(&a).await.expect("A's pod"));
    let uid_b = uid(pods.get(&b).await.expect("B's pod"));
    real.start_client(name).await;
    real.writing(true);
    real.acks_grow(0, 10).await;

    // 1. B receives no WAL any more; its own probe (on loopback) still passes.
    pod_nft(&[
        "add",
        &uid_b,
        "wal_in",
        r#"iifname != "lo" tcp sport 5432 counter drop"#,
    ]);
    let n = real.acks().len();
    real.acks_grow(n, 10).await;
    let received = |pod: &str| {
        let (ok, out) = real.psql_on(pod, "SELECT pg_last_wal_receive_lsn()");
        assert!(ok, "{pod}'s receive position: {out}");
        lsn(out.trim()).unwrap_or_else(|| panic!("{pod}'s receive position: {out:?}"))
    };
    let b_stuck = received(&b);
    let n = real.acks().len();
    real.acks_grow(n, 20).await;
    assert_eq!(
        received(&b),
        b_stuck,
        "{b} still receives WAL through the rule"
    );
    let a_flushed = |real: &Real| {
        let sql =
            format!("SELECT flush_lsn FROM pg_stat_replication WHERE application_name = '{a}'");
        let (ok, out) = real.psql_on(&old, &sql);
        assert!(ok, "{a}'s flush position on {old}: {out}");
        lsn(out.trim()).unwrap_or(0)
    };
    assert!(
        a_flushed(&real) > b_stuck,
        "{old} has no commit that {a} flushed beyond {b}"
    );
    eprintln!("(N1) {b}'s WAL stream dropped; {a} alone acknowledges commits");

    // 2. A's probe fails; it streams and acknowledges on.
    pod_nft(&["add", &uid_a, "probe", "tcp dport 5432 counter drop"]);
    let blocked_at = now_epoch();
    until(&pods, &a, &format!("{a} NotReady"), SLOW, |p| !pod_ready(p)).await;
    eprintln!(
        "(N1) {a} NotReady {:.1}s after its port was blocked",
        now_epoch() - blocked_at
    );
    let n = real.acks().len();
    let before = real.acks_grow(n, 10).await;

    // 3. The primary frozen. Every version of the cluster and of B from here on is kept.
    let clusters = Recorder::start(real.pg.api.clone(), name).await;
    let b_pods = Recorder::start(pods.clone(), &b).await;
    let cgroup =
        pod_cgroup(&uid_old).unwrap_or_else(|| panic!("no freezer cgroup for pod{uid_old}"));
    let frozen_at = now_epoch();
    let frozen = Frozen::freeze(cgroup).await;
    let acked_at_freeze = real.acks().len();

    let want = format!("read {a} furthest");
    let degraded = real
        .cluster_until(name, "Degraded (NoPromotionTarget) naming A", move |pg| {
            pg.status
                .as_ref()
                .and_then(|s| s.engine.condition(conditions::DEGRADED))
                .is_some_and(|c| {
                    c.status == conditions::status::TRUE
                        && c.reason == NO_PROMOTION_TARGET
                        && c.message.contains(&want)
                })
        })
        .await;
    let message = degraded
        .status
        .as_ref()
        .and_then(|s| s.engine.condition(conditions::DEGRADED))
        .map(|c| c.message.clone())
        .unwrap_or_default();
    eprintln!(
        "(N1) {old} frozen; Degraded {:.1}s later: {message}",
        now_epoch() - frozen_at
    );
    assert!(
        message.contains(&format!("{b} is not promoted below them")),
        "{message}"
    );
    // Two of the failover's rounds (a Degraded wait asks again every 10 s): B, Ready,
    // stays a standby in recovery throughout.
    let hold = tokio::time::Instant::now() + Duration::from_secs(25);
    while tokio::time::Instant::now() < hold {
        let (ok, out) = real.psql_on(&b, "SELECT pg_is_in_recovery()");
        assert!(ok && out.trim() == "t", "{b} left recovery: {out}");
        let roles = real.roles(name).await;
        let role = roles
            .get(&b)
            .map(|(r, _, _)| r.as_str())
            .unwrap_or_default();
        assert_ne!(role, "primary", "{b} labelled primary");
        let pg = real.pg.api.get(name).await.expect("the cluster");
        assert_ne!(
            pg.status.as_ref().and_then(|s| s.primary_pod.as_deref()),
            Some(b.as_str()),
            "{name} names {b} its primary"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    eprintln!(
        "(N1) {a}'s rules: {}",
        pod_nft(&["list", &uid_a])
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    );

    // A's port open again: A turns Ready and is promoted.
    pod_nft(&["del", &uid_a, "probe"]);
    let opened_at = now_epoch();
    let new = failed_over_from(&real, name, &old).await;
    eprintln!(
        "(N1) {a}'s port open; {name} Ready with {new} {:.1}s later ({:.1}s after the freeze)",
        now_epoch() - opened_at,
        now_epoch() - frozen_at
    );
    assert_eq!(
        new, a,
        "the failover promoted {new}, not the furthest member {a}"
    );

    // Never B: not as the cluster's primary, nor as a chosen target, nor by its label.
    let mut chosen = Vec::new();
    for (_, pg) in clusters.seen() {
        assert_ne!(
            pg.status.as_ref().and_then(|s| s.primary_pod.as_deref()),
            Some(b.as_str()),
            "{name} named {b} its primary"
        );
        chosen.extend(
            history(&pg)
                .into_iter()
                .filter(|h| h.reason == MOST_ADVANCED_CHOSEN)
                .map(|h| h.message),
        );
    }
    assert!(!chosen.is_empty(), "no MostAdvancedChosen seen");
    let target = format!("{a} is the most advanced");
    assert!(
        chosen.iter().all(|m| m.contains(&target)),
        "a failover chose another than {a}: {chosen:?}"
    );
    for (_, pod) in b_pods.seen() {
        assert_ne!(
            pod.labels().get(ROLE).map(String::as_str),
            Some("primary"),
            "{b} was labelled primary"
        );
    }

    // Thawed and healed: every member back, B streaming from A, writes going on.
    drop(frozen);
    pod_nft(&["del", &uid_b, "wal_in"]);
    real.all_ready(name).await;
    real.shows(
        &b,
        "SELECT split_part(sender_host, '.', 1) FROM pg_stat_wal_receiver WHERE status = 'streaming'",
        &a,
    )
    .await;
    let n = real.acks().len();
    real.acks_grow(n, 10).await;
    let Tally { acked, rows, lost } = real.tally(name);
    eprintln!(
        "(N1) {old} -> {new} ({b} behind, {a} NotReady at the freeze): {} acknowledged ({before} before the freeze, {acked_at_freeze} at it), {} rows; lost {lost:?}",
        acked.len(),
        rows.len()
    );
    assert!(
        lost.is_empty(),
        "acknowledged commits lost under dataDurability Required: {lost:?}"
    );
    real.finish().await;
}
