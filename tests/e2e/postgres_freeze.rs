//! A hung primary on real PostgreSQL, on the real node (a hung primary is lost, whatever its readiness): the
//! primary's whole pod is frozen through its freezer cgroup, as a VM pause or a hung
//! disk freezes every process. Its exec probes hang, so the kubelet does not mark it
//! NotReady; its agent renews nothing. The operator must say `PrimaryAvailable=False`
//! (`PrimaryNotRenewing`) once `renewTime + L + S` has passed, and fail over after
//! `failoverDelaySeconds`.
//!
//! The real node runs cgroup v1 (`tools/node/node.sh`): the pod's cgroup is
//! `/sys/fs/cgroup/freezer/lockstep-node-<N>/kubepods/<qos>/pod<uid>`, and writing
//! `FROZEN` to its `freezer.state` freezes every container of the pod (v1 freezing is
//! hierarchical). A frozen task cannot die until it is thawed, so the test thaws the pod
//! whatever happens ([`Frozen`]'s drop), and the deleted pod then goes.
//!
//! Its freezer ([`Frozen`], [`pod_cgroup`]) also serves `postgres_real::paused`, the same
//! pause under synchronous replication with writers. The Makefile runs it with the real-PostgreSQL tier (`postgres_freeze::`) and skips it in
//! the KWOK tier. `LOCKSTEP_REAL_NODE=0` skips it, as it skips that tier.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::wait::await_condition;
use kube::{Api, ResourceExt};
use serde_json::json;

use lockstep::engine::conditions;
use lockstep::machines::postgres::{Postgres, PostgresCluster};

use crate::support::{Env, Fixture, RESTRICTED};

/// The locally built PostgreSQL image without `curl` or `perl` (`tools/images`:
/// `postgres-15-bare`).
const IMAGE: &str = "lockstep.local/postgres:15-bare";
/// The local cluster's node-local class, writable by the pods' `fsGroup` (999).
const STORAGE_CLASS: &str = "local";
/// Creating and failing over real instances on a loaded 2-core machine.
const SLOW: Duration = Duration::from_secs(300);
/// The freezer hierarchy of the real node's kubelet (`cgroupRoot: /lockstep-node-<N>`).
const FREEZER: &str = "/sys/fs/cgroup/freezer";

/// Whether the cluster has the real node (`LOCKSTEP_REAL_NODE=0` starts none).
fn real_node() -> bool {
    if std::env::var("LOCKSTEP_REAL_NODE").is_ok_and(|v| v == "0") {
        eprintln!("LOCKSTEP_REAL_NODE=0: no real node, the freeze test does not run");
        return false;
    }
    true
}

/// Wait on a watch of `name` until `condition`, for at most `deadline`.
async fn until(
    api: &Api<PostgresCluster>,
    name: &str,
    what: &str,
    deadline: Duration,
    condition: impl Fn(&PostgresCluster) -> bool + Send + 'static,
) -> PostgresCluster {
    let watched = await_condition(api.clone(), name, move |o: Option<&PostgresCluster>| {
        o.is_some_and(&condition)
    });
    match tokio::time::timeout(deadline, watched).await {
        Ok(Ok(Some(object))) => object,
        Ok(Ok(None)) => panic!("{name} is gone while waiting for {what}"),
        Ok(Err(e)) => panic!("the watch failed while waiting for {what} ({name}): {e}"),
        Err(_) => panic!("timed out after {deadline:?} waiting for {what} ({name})"),
    }
}

/// Ready at [`IMAGE`], as of the current generation.
fn ready(pg: &PostgresCluster) -> bool {
    let Some(status) = &pg.status else {
        return false;
    };
    status.image.as_deref() == Some(IMAGE)
        && status.engine.phase.as_deref() == Some("Ready")
        && status.engine.observed_generation == pg.metadata.generation
        && status
            .engine
            .condition(conditions::READY)
            .is_some_and(|c| c.status == conditions::status::TRUE)
}

fn primary_pod(pg: &PostgresCluster) -> Option<String> {
    pg.status.as_ref().and_then(|s| s.primary_pod.clone())
}

/// `PrimaryAvailable`'s status, reason and message.
fn primary_available(pg: &PostgresCluster) -> Option<(String, String, String)> {
    let c = pg.status.as_ref()?.engine.condition("PrimaryAvailable")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The freezer cgroup of the pod with UID `uid` on the real node.
pub(crate) fn pod_cgroup(uid: &str) -> Option<PathBuf> {
    fn find(dir: &Path, want: &str, depth: u8) -> Option<PathBuf> {
        for entry in std::fs::read_dir(dir).ok()?.flatten() {
            let path = entry.path();
            if !path.is_dir() {
                continue;
            }
            if entry.file_name().to_string_lossy() == want {
                return Some(path);
            }
            if depth > 0
                && let Some(found) = find(&path, want, depth - 1)
            {
                return Some(found);
            }
        }
        None
    }
    let want = format!("pod{uid}");
    std::fs::read_dir(FREEZER)
        .ok()?
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("lockstep-node-")
        })
        .find_map(|e| find(&e.path(), &want, 3))
}

/// A frozen pod cgroup, thawed when dropped (a frozen task cannot die, so a pod left
/// frozen would hold its namespace's deletion).
pub(crate) struct Frozen(PathBuf);

impl Frozen {
    /// Freeze `cgroup` and wait (bounded) until every task in it is frozen.
    pub(crate) async fn freeze(cgroup: PathBuf) -> Self {
        let state = cgroup.join("freezer.state");
        std::fs::write(&state, "FROZEN")
            .unwrap_or_else(|e| panic!("freeze {}: {e}", state.display()));
        let frozen = Frozen(cgroup);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let now = std::fs::read_to_string(&state).unwrap_or_default();
            if now.trim() == "FROZEN" {
                return frozen;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} still {now:?} after 30 s",
                state.display()
            );
            // The kernel offers no notification for the freezer's progress.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let state = self.0.join("freezer.state");
        if let Err(e) = std::fs::write(&state, "THAWED") {
            eprintln!("thaw {}: {e}", state.display());
        }
    }
}

/// A 3-instance cluster; its primary's pod is frozen (still Ready to the kubelet, its
/// Lease no longer renewed). `PrimaryAvailable` turns False naming the missing renewals,
/// and another pod becomes primary.
#[tokio::test]
async fn a_frozen_primary_is_reported_lost_and_failed_over() {
    if !real_node() {
        return;
    }
    let env = Env::labelled(
        "pgfreeze",
        &[("lockstep.dev/real-node", "true"), RESTRICTED],
    )
    .await;
    let pg = Fixture::<Postgres>::in_env(env).await;
    let operator = pg.operator();
    let name = "pz";
    let object = PostgresCluster::new(
        name,
        serde_json::from_value(json!({
            "version": "15",
            "image": IMAGE,
            "replicas": 3,
            "storageSize": "1Gi",
            "storageClassName": STORAGE_CLASS,
            "failoverDelaySeconds": 5,
        }))
        .expect("a valid PostgresCluster spec"),
    );
    pg.create_object(&object).await;
    let cluster = until(&pg.api, name, "Ready", SLOW, ready).await;
    let old = primary_pod(&cluster).expect("a Ready cluster names its primary");
    let pods: Api<Pod> = pg.env.api();
    let uid = pods
        .get(&old)
        .await
        .unwrap_or_else(|e| panic!("get {old}: {e}"))
        .uid()
        .expect("a pod UID");
    let cgroup = pod_cgroup(&uid)
        .unwrap_or_else(|| panic!("no freezer cgroup pod{uid} under {FREEZER}/lockstep-node-*"));

    let frozen_at = tokio::time::Instant::now();
    let frozen = Frozen::freeze(cgroup).await;
    eprintln!("(freeze) {old} frozen");

    // Lost, and saying why, though the kubelet still says Ready.
    let lost = until(
        &pg.api,
        name,
        "PrimaryAvailable=False (PrimaryNotRenewing)",
        SLOW,
        |pg| {
            primary_available(pg).is_some_and(|(status, reason, _)| {
                status == "False" && reason == "PrimaryNotRenewing"
            })
        },
    )
    .await;
    let (_, _, message) = primary_available(&lost).unwrap_or_default();
    eprintln!(
        "(freeze) PrimaryAvailable=False {:.1}s after the freeze: {message}",
        frozen_at.elapsed().as_secs_f64()
    );
    assert!(message.contains(&old), "{message}");
    assert!(
        message.contains("has not renewed the primary Lease"),
        "{message}"
    );

    // Failed over: Ready with another primary.
    let old_primary = old.clone();
    let after = until(
        &pg.api,
        name,
        "Ready with another primary",
        SLOW,
        move |pg| ready(pg) && primary_pod(pg).is_some_and(|p| p != old_primary),
    )
    .await;
    let new = primary_pod(&after).unwrap_or_default();
    eprintln!(
        "(freeze) {old} -> {new}: Ready again {:.1}s after the freeze",
        frozen_at.elapsed().as_secs_f64()
    );
    let failover = after
        .status
        .as_ref()
        .and_then(|s| s.last_failover.as_ref())
        .map(|f| f.message.clone())
        .unwrap_or_default();
    assert!(failover.contains(&new), "lastFailover: {failover}");

    // Thawed, the old pod (deleted by the failover) dies and goes.
    drop(frozen);
    operator.stop().await;
    pg.env.finish().await;
}
