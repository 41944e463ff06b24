//! PostgresCluster on real PostgreSQL, on the real node (`lockstep-node-0`):
//! the operator runs in this process, the pods run the locally built `ghcr.io/lockstep-dev/postgres:15`
//! image (`tools/images`) with the pod scripts, and every check looks inside the
//! databases. Each scenario has a client pod that writes one row per transaction
//! through `<cluster>-rw` and logs `ack <id>` only for commits the server acknowledged.
//!
//! - [`replication_then_upgrade_switchover`]: 3 instances, streaming replication seen in
//!   `pg_stat_replication` through the Service; then an image upgrade between two local
//!   tags (`ghcr.io/lockstep-dev/postgres:15` -> `lockstep.local/postgres:15-next`) with its switchover under
//!   the writer: 0 acknowledged commits lost, `-rw` selects at most one pod at every
//!   instant of an EndpointSlice watch.
//! - [`failover_after_the_primary_dies`]: the primary's postmaster is killed; a replica is
//!   promoted; the only acknowledged commits the new primary may lack are the old
//!   primary's last ones that no standby had received (asynchronous replication); the
//!   old primary rejoins as a standby through `pg_rewind`.
//! - [`with_synchronous_replication_a_failover_loses_no_acknowledged_commit`]:
//!   `spec.synchronous` (ANY 1): every member names the others in
//!   `synchronous_standby_names`; the primary's postmaster is killed under the writer;
//!   the new primary has every acknowledged commit.
//! - [`failover_never_promotes_a_lagging_replica`]: replay paused on one replica; the
//!   other one is promoted.
//! - [`failover_with_the_primary_cut_off_from_the_api`]: the primary's pod cut off from
//!   the API server (`tools/node/api-cut.sh`) and held Terminating: it fences itself
//!   within `T + R + 1` s of its last renewal (a writer on its pod IP sees it), the Lease
//!   moves only after `renewTime + L + S`, to the most advanced standby, no commit is
//!   acknowledged by two servers, and it rejoins through `pg_rewind`.
//! - [`status_wipe_moves_no_role`]: `.status` wiped after a switchover: no role label
//!   moves, no pod restarts, Ready again (needs the operator side of fencing).
//! - [`backup_to_s3_and_restore`]: an on-demand backup lands in the in-cluster S3
//!   (`tools/node/s3.sh`) and restores into a new cluster; then the cluster is deleted
//!   and its final backup appears in S3 before the finalizer is released, and restores.
//! - [`lease_agent_against_the_api_server`]: the pod side of fencing alone.
//! - [`switchover_on_demand_loses_no_acknowledged_commit`]: a requested switchover under
//!   the writer; then [`hibernate`]: `spec.hibernate` stops every instance and keeps the
//!   claims, and the cluster wakes with the same primary and every row.
//! - [`settings_reach_every_instance_by_a_reload`]: `spec.postgresql` reaches both
//!   servers by a reload (no restart); a value PostgreSQL refuses keeps the last good
//!   one on the server and in its files; a restart's parameter is reported pending and
//!   applies when the pod starts again.
//! - [`archive`]: the primary archives its WAL with pgBackRest into an S3 server over
//!   TLS; the store unreachable is `Degraded` (`ArchiveFailing`) until it is back, with
//!   no gap (`pgbackrest check`).
//! - [`majors`]: one scenario per PostgreSQL major beyond 15 (17 and 18, the images
//!   `ghcr.io/lockstep-dev/postgres:<major>`): the server reports its major; a
//!   switchover and a failover under a writer lose no acknowledged commit (synchronous
//!   replication); WAL archived with pgBackRest recovers a new cluster to a point in
//!   time.
//! - [`recovery_time`] (a benchmark, `#[ignore]`d; `make bench-postgres`): the seconds
//!   writes are refused through `-rw` in switchovers and failovers, in both replication
//!   modes.
//! - [`zero_loss`]: under synchronous replication, with a writer on `-rw` and one on the
//!   primary's pod IP, the primary's pod frozen (a process pause), or cut off from the
//!   API server and from its standbys: the failover loses no acknowledged commit, and
//!   the old server acknowledges nothing once it is cut off or frozen. In asynchronous
//!   replication the same freeze reports what it lost (not asserted). Under
//!   `dataDurability: Required`, a failover waits for the standby that acknowledged the
//!   last commits while its readiness probe fails (rules in the pods' own network
//!   namespaces, `tools/node/pod-nft.sh`), and promotes it, not a Ready one behind it.
//!
//! Volumes: the claims use the local cluster's StorageClass `local`, whose provisioner
//! (`tools/cluster/provisioner`) makes node-local PersistentVolumes; the kubelet gives
//! them the pods' `fsGroup` (999), so PostgreSQL writes them as on any cluster with local
//! storage. Deleting the namespace deletes the claims, and their volumes with them.
//!
//! `LOCKSTEP_REAL_NODE=0` (a cluster without the real node) skips the tier, as it skips
//! `make node-smoke`; the Makefile runs it after the KWOK tier. The slower variants
//! (`REAL_SLOW` in the Makefile: the lagging replica, the primary cut off without
//! synchronous replication, the asynchronous freeze, `Preferred` relaxing, and
//! `postgres_freeze`) are each a second angle on a scenario the per-change tier keeps;
//! `make test-slow` runs them before each stop, CI does not.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::task::JoinHandle;

use lockstep::engine::conditions;
use lockstep::machines::postgres::table::reason::{
    FAILOVER_STARTED, SETTINGS_NEED_RESTART, SETTINGS_REFUSED,
};
use lockstep::machines::postgres::{PostgresCluster, SETTINGS_APPLIED};

use crate::postgres::{Transitions, history};
use crate::support::{kubeconfig_path, restricted, wait_for_all_within};
use lockstep::machines::postgres::render::POSTGRES_UID;

mod api_token;
mod app;
mod archive;
mod hibernate;
mod majors;
mod recovery_time;
mod restore;
mod tls;
mod zero_loss;

mod harness;

pub(crate) use harness::*;

/// (d) A switchover on demand under a writer: no acknowledged commit lost, `-rw` never
/// selects two pods; then the cluster hibernates and wakes with the same primary and
/// every row ([`hibernate`]).
#[tokio::test]
async fn replication_then_upgrade_switchover() {
    if !real_node() {
        return;
    }
    let real = Real::new("pgreal-up").await;
    let name = "pg";
    let pg = real.cluster(name, 3, json!({})).await;
    let primary = primary_of(&pg);
    let roles = real.roles(name).await;
    let replicas: Vec<String> = roles
        .iter()
        .filter(|(_, (role, _, _))| role == "replica")
        .map(|(pod, _)| pod.clone())
        .collect();
    assert_eq!(replicas.len(), 2, "roles: {roles:?}");
    // The instances' image has no curl and no perl, and the manager PID 1 runs is the
    // one the init container copied in (the image holds no file of Lockstep's own:
    // `tools/images/build.sh`, postgres-15-bare).
    let (ok, out) = real.kubectl(&[
        "exec",
        &primary,
        "-c",
        "postgres",
        "--",
        "sh",
        "-c",
        "command -v curl perl; readlink /proc/1/exe",
    ]);
    assert!(ok, "{out}");
    assert_eq!(
        out.trim(),
        lockstep::machines::postgres::render::INSTANCE_BINARY,
        "curl or perl found, or PID 1 is not the injected manager"
    );

    // (a) Replication, seen by the primary through the Service, and a row that arrives.
    real.start_client(name).await;
    standbys_become(&real, name, &replicas).await;
    let (ok, out) = real.psql_rw(name, "SELECT pg_is_in_recovery()");
    assert!(ok && out.trim() == "f", "{name}-rw is not writable: {out}");
    let (ok, out) = real.psql_rw(name, "INSERT INTO acks (id) VALUES (0)");
    assert!(ok, "{out}");
    for replica in &replicas {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let (ok, out) = real.psql_on(replica, "SELECT count(*) FROM acks WHERE id = 0");
            if ok && out.trim() == "1" {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{replica} never replayed row 0: {out}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
        let (ok, out) = real.psql_on(replica, "SELECT pg_is_in_recovery()");
        assert!(ok && out.trim() == "t", "{replica} is not a standby: {out}");
    }
    eprintln!("(a) {primary} primary, {replicas:?} streaming");
    tls::serves_tls_only_and_replicates_by_certificate(&real, name, &primary, replicas.len());
    tls::a_renewal_reaches_the_server_without_a_restart(&real, name, &primary, replicas.len())
        .await;
    app::the_application_secret_connects_as_a_role_that_is_not_a_superuser(&real, name);
    app::a_rotated_password_reaches_the_role_and_the_old_uri_is_refused(&real, name).await;
    app::declared_roles_and_databases_are_kept_and_passwords_follow_their_secret(&real, name).await;

    // (b) Upgrade under the writer.
    let watch = RwWatch::start(&real.pg.env, name).await;
    real.writing(true);
    let before = real.acks_grow(0, 20).await;
    real.pg
        .merge_patch(name, json!({"spec": {"image": NEXT_IMAGE}}))
        .await;
    let pg = real.ready_at(name, NEXT_IMAGE).await;
    let after = real.acks_grow(real.acks().len(), 20).await;
    let Tally { acked, rows, lost } = real.tally(name);
    let new_primary = primary_of(&pg);
    eprintln!(
        "(b) {primary} -> {new_primary}: {} commits acknowledged ({before} before the upgrade, {after} at the end), {} rows, lost {lost:?}; -rw selected {:?}",
        acked.len(),
        rows.len(),
        watch.seen()
    );
    assert!(
        lost.is_empty(),
        "acknowledged commits lost in the switchover: {lost:?}"
    );
    assert!(
        watch.most() <= 1,
        "{name}-rw selected {} pods at once: {:?}",
        watch.most(),
        watch.seen()
    );
    let images = real.kubectl(&[
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/instance=pg",
        "-o",
        "jsonpath={.items[*].spec.containers[0].image}",
    ]);
    assert!(
        images.1.split_whitespace().all(|i| i == NEXT_IMAGE),
        "not every pod runs {NEXT_IMAGE}: {images:?}"
    );
    let roles = real.roles(name).await;
    let replicas: Vec<String> = roles
        .iter()
        .filter(|(_, (role, _, _))| role == "replica")
        .map(|(pod, _)| pod.clone())
        .collect();
    standbys_become(&real, name, &replicas).await;
    plugin_shows_replication(&real, name, &new_primary).await;
    real.finish().await;
}

/// `kubectl lockstep status -o json` shows every instance's timeline and LSN, read from
/// its manager's `/metrics` through the API server's pod proxy, and each standby
/// streaming; polled with a deadline (a standby that just restarted reconnects). Then
/// `kubectl lockstep psql` reaches the primary, and with `--replica` a standby.
async fn plugin_shows_replication(real: &Real, name: &str, primary: &str) {
    let deadline = std::time::Instant::now() + SLOW;
    loop {
        let (code, out) =
            crate::postgres::plugin(&["status", name, "-n", real.ns(), "-o", "json"]).await;
        assert_eq!(code, 0, "{out}");
        let view: serde_json::Value = serde_json::from_str(&out).expect("status as JSON");
        let instances = view["instances"].as_array().cloned().unwrap_or_default();
        let shown = instances.len() == 3
            && instances.iter().all(|i| {
                let server = &i["server"];
                let standby_streams =
                    i["pod"] == primary || server["streaming"] == serde_json::Value::Bool(true);
                server["timeline"].as_u64().is_some_and(|t| t >= 2)
                    && server["lsn"].as_str().is_some_and(|l| l.contains('/'))
                    && standby_streams
            });
        if shown {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the plugin never showed every instance's timeline and LSN:\n{out}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let in_recovery = |replica: bool| {
        let mut args = vec!["psql", name, "-n", real.ns()];
        if replica {
            args.push("--replica");
        }
        args.extend(["--", "-X", "-A", "-t", "-c", "SELECT pg_is_in_recovery()"]);
        async move { crate::postgres::plugin(&args).await }
    };
    let (code, out) = in_recovery(false).await;
    assert_eq!((code, out.trim()), (0, "f"), "psql on the primary: {out}");
    let (code, out) = in_recovery(true).await;
    assert_eq!((code, out.trim()), (0, "t"), "psql on a replica: {out}");
}

/// (d) A switchover on demand (`lockstep.dev/switchover`) under a writer: the role moves
/// to the pod named, no acknowledged commit is lost, `-rw` never selects two pods, the
/// old primary streams from the new one, and the same value again moves nothing.
#[tokio::test]
async fn switchover_on_demand_loses_no_acknowledged_commit() {
    if !real_node() {
        return;
    }
    let real = Real::new("pgreal-so").await;
    let name = "pg";
    let pg = real.cluster(name, 3, json!({})).await;
    let old = primary_of(&pg);
    let target = if old == "pg-2" { "pg-1" } else { "pg-2" };
    real.start_client(name).await;
    let watch = RwWatch::start(&real.pg.env, name).await;
    real.writing(true);
    let before = real.acks_grow(0, 20).await;
    real.pg
        .merge_patch(
            name,
            json!({"metadata": {"annotations": {"lockstep.dev/switchover": target}}}),
        )
        .await;
    let target_owned = target.to_owned();
    let pg = until(
        &real.pg.api,
        name,
        "Ready with the requested primary",
        SLOW,
        move |pg| {
            is_ready_at(pg, IMAGE)
                && pg.status.as_ref().and_then(|s| s.primary_pod.as_deref())
                    == Some(target_owned.as_str())
        },
    )
    .await;
    let after = real.acks_grow(real.acks().len(), 20).await;
    let Tally { acked, rows, lost } = real.tally(name);
    eprintln!(
        "(d) {old} -> {target} on demand: {} commits acknowledged ({before} before the request, {after} at the end), {} rows, lost {lost:?}; -rw selected {:?}",
        acked.len(),
        rows.len(),
        watch.seen()
    );
    assert!(
        lost.is_empty(),
        "acknowledged commits lost in the switchover: {lost:?}"
    );
    assert!(
        watch.most() <= 1,
        "{name}-rw selected {} pods at once: {:?}",
        watch.most(),
        watch.seen()
    );
    let reasons: Vec<String> = history(&pg).into_iter().map(|h| h.reason).collect();
    assert!(
        reasons.iter().any(|r| r == "SwitchoverRequested")
            && reasons.iter().any(|r| r == "SwitchoverCompleted"),
        "{reasons:?}"
    );
    rejoined_as_a_replica(&real, name, &old, target).await;
    // status.instances says the same: the target a primary on the timeline its promotion
    // began, the old primary a standby that followed it there.
    let (new, was) = (target.to_owned(), old.clone());
    real.cluster_until(
        name,
        &format!("status.instances: {target} primary, {old} a standby on its timeline"),
        move |pg| {
            let instances = pg
                .status
                .as_ref()
                .map(|s| s.instances.clone())
                .unwrap_or_default();
            let of = |pod: &str| instances.iter().find(|i| i.pod == pod).cloned();
            match (of(&new), of(&was)) {
                (Some(n), Some(w)) => {
                    n.role.as_deref() == Some("primary")
                        && n.server.as_deref() == Some("primary")
                        && w.role.as_deref() == Some("replica")
                        && w.server.as_deref() == Some("standby")
                        && n.ready
                        && w.ready
                        && n.timeline.is_some_and(|t| t >= 2)
                        && w.timeline == n.timeline
                }
                _ => false,
            }
        },
    )
    .await;
    // Each instance's manager says so on its own /metrics (port `metrics`).
    for (pod, writable) in [(target, "1"), (old.as_str(), "0")] {
        real.metrics_say(
            pod,
            &[
                &format!("lockstep_instance_writable {writable}"),
                "lockstep_instance_connections *",
                "lockstep_instance_replay_lag_seconds *",
                // No archive_command is set: nothing archived, nothing failed.
                "lockstep_instance_wal_archived_total 0",
                "lockstep_instance_wal_archive_failures_total 0",
                "lockstep_instance_last_archived_timestamp_seconds 0.0",
            ],
        )
        .await;
    }
    // Its manager reaches the API server with a token that lasts ten minutes.
    api_token::the_manager_reads_a_ten_minute_token_bound_to_its_pod(&real, target);
    // Then it hibernates and wakes with the same primary and every row.
    hibernate::sleeps_and_wakes_with_its_primary(&real, name, target, rows.len()).await;
    real.finish().await;
}

/// (f) Settings: `spec.postgresql` reaches every instance by a reload, with no pod
/// restarted; a value PostgreSQL refuses keeps the last one it accepted, on the server
/// and in its files, so the pod starts again, and the cluster is Degraded naming it; a
/// parameter that needs a restart is rolled through the instances (replica, switchover,
/// old primary).
#[tokio::test]
async fn settings_reach_every_instance_by_a_reload() {
    if !real_node() {
        return;
    }
    let real = Real::new("pgreal-set").await;
    let name = "pg";
    real.cluster(
        name,
        2,
        json!({"postgresql": {"parameters": {"work_mem": "8MB"}}}),
    )
    .await;
    let pods = ["pg-0", "pg-1"];
    let started = |real: &Real, pod: &str| {
        let (ok, out) = real.psql_on(pod, "SELECT pg_postmaster_start_time()");
        assert!(ok, "{pod}: {out}");
        out.trim().to_owned()
    };
    let first_start: Vec<String> = pods.iter().map(|p| started(&real, p)).collect();
    for pod in pods {
        real.shows(pod, "SHOW work_mem", "8MB").await;
    }
    // The standby's manager says on its pod that it streams (what a switchover on
    // demand reads of its target), as it says what its server made of the settings.
    let standby: Api<Pod> = real.pg.env.api();
    wait_for_all_within(&standby, "", "pg-1 to say it streams", SLOW, |all| {
        all.iter().any(|p| {
            p.name_any() == "pg-1"
                && p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter().any(|c| {
                            (c.type_.as_str(), c.status.as_str())
                                == ("lockstep.dev/Streaming", "True")
                        }) && cs.iter().any(|c| {
                            (c.type_.as_str(), c.status.as_str())
                                == ("lockstep.dev/SettingsApplied", "True")
                        })
                    })
        })
    })
    .await;

    real.pg
        .merge_patch(
            name,
            json!({"spec": {"postgresql": {
                "parameters": {"work_mem": "16MB"},
                "pgHba": ["host all app 10.0.0.0/8 scram-sha-256"],
            }}}),
        )
        .await;
    for pod in pods {
        real.shows(pod, "SHOW work_mem", "16MB").await;
        real.shows(
            pod,
            "SELECT count(*) FROM pg_hba_file_rules WHERE 'app' = ANY(user_name) AND error IS NULL",
            "1",
        )
        .await;
    }
    let now: Vec<String> = pods.iter().map(|p| started(&real, p)).collect();
    assert_eq!(now, first_start, "a reload restarted no server");

    // `banana` passes the schema (a value is a string) and PostgreSQL refuses it;
    // shared_buffers needs a restart, which the operator rolls through the instances as
    // an upgrade replaces them: the replica, a switchover, then the old primary.
    real.pg
        .merge_patch(
            name,
            json!({"spec": {"postgresql": {"parameters": {"work_mem": "banana", "shared_buffers": "64MB"}}}}),
        )
        .await;
    // Each instance tells the operator on its pod; once the restart is done the cluster
    // says what is left where people look: Degraded naming the refused field and the
    // instances, SettingsApplied with nothing pending, and a Warning Event. (The
    // transitions are gathered as they are seen: a rolling restart takes more than the
    // status's history keeps.)
    let seen = Transitions::default();
    let watching = seen.clone();
    let pg = real
        .cluster_until(
            name,
            "restarted, then Degraded naming the refused field",
            move |pg| {
                watching.see(pg);
                let restarted = watching
                    .reasons()
                    .iter()
                    .skip_while(|r| *r != SETTINGS_NEED_RESTART)
                    .any(|r| r == "UpgradeCompleted");
                restarted
                    && condition_of(pg, conditions::DEGRADED).is_some_and(|c| {
                        c.status == conditions::status::TRUE
                            && c.reason == SETTINGS_REFUSED
                            && c.message
                                .contains("spec.postgresql.parameters.work_mem (pg-0, pg-1)")
                    })
                    && condition_of(pg, SETTINGS_APPLIED).is_some_and(|c| {
                        c.reason == "Refused" && !c.message.contains("pending restart")
                    })
            },
        )
        .await;
    // The primary's restart came by one switchover, never by a failover: the operator
    // waits until every instance has judged the new settings, so it restarts the replica
    // first and moves the role once.
    let since_restart: Vec<String> = seen
        .reasons()
        .into_iter()
        .skip_while(|r| r != SETTINGS_NEED_RESTART)
        .collect();
    let switchovers = since_restart
        .iter()
        .filter(|r| *r == "SwitchoverCompleted")
        .count();
    assert!(
        switchovers == 1 && !since_restart.iter().any(|r| r == FAILOVER_STARTED),
        "the primary's restart came by one switchover: {since_restart:?} (primary {})",
        primary_of(&pg)
    );
    let refused = |e: &Event| {
        e.type_.as_deref() == Some("Warning")
            && e.reason.as_deref() == Some(SETTINGS_REFUSED)
            && e.note.as_deref().is_some_and(|n| n.contains("work_mem"))
    };
    let events: Api<Event> = real.pg.env.api();
    wait_for_all_within(
        &events,
        "",
        "the SettingsRefused Warning",
        SLOW,
        move |all| all.iter().any(refused),
    )
    .await;
    for pod in pods {
        // Started again with the restart's parameter, without the refused value, on
        // the files as well as on the server.
        real.shows(pod, "SHOW shared_buffers", "64MB").await;
        real.shows(pod, "SHOW work_mem", "16MB").await;
        real.metrics_say(
            pod,
            &[
                "lockstep_instance_settings_refused 1",
                "lockstep_instance_settings_pending_restart 0",
            ],
        )
        .await;
        let conf = real
            .output_of(
                name,
                pod,
                "grep -E '^(work_mem|shared_buffers)' \"$PGDATA/lockstep.conf\"",
            )
            .await;
        assert!(
            conf.contains("work_mem = '16MB'") && !conf.contains("banana"),
            "{pod}'s files kept a refused value:\n{conf}"
        );
    }

    // Asked for a value it accepts, every instance applies it by a reload, and the
    // cluster is no longer Degraded.
    real.pg
        .merge_patch(
            name,
            json!({"spec": {"postgresql": {"parameters": {"work_mem": "32MB"}}}}),
        )
        .await;
    for pod in pods {
        real.shows(pod, "SHOW work_mem", "32MB").await;
    }
    let watching = seen.clone();
    real.cluster_until(name, "every setting applied, not Degraded", move |pg| {
        watching.see(pg);
        condition_of(pg, conditions::DEGRADED)
            .is_some_and(|c| c.status == conditions::status::FALSE)
            && condition_of(pg, SETTINGS_APPLIED).is_some_and(|c| c.reason == "Applied")
    })
    .await;
    // One rolling restart in all: a reload applies the rest.
    let rolls = seen
        .reasons()
        .iter()
        .filter(|r| *r == SETTINGS_NEED_RESTART)
        .count();
    assert_eq!(rolls, 1, "one rolling restart: {:?}", seen.reasons());
    real.finish().await;
}

/// The condition `type_` of the cluster's status, if it has one.
fn condition_of(pg: &PostgresCluster, type_: &str) -> Option<lockstep::engine::Condition> {
    pg.status.as_ref()?.engine.condition(type_).cloned()
}

/// (c) Failover: the primary's postmaster is killed (SIGKILL; the instance manager, its
/// parent, exits with it). A replica is promoted and the old primary rejoins through pg_rewind.
///
/// Replication is asynchronous: a commit is acknowledged once it is durable on the
/// primary, before any standby has it. So the new primary may lack exactly the old
/// primary's last acknowledged commits that no standby had received when it died: with
/// one client writing one transaction at a time, a contiguous run of ids after the last
/// old-primary row the new primary has, and before its own first. Anything else
/// (a hole, or a loss after the failover point) fails the test.
#[tokio::test]
async fn failover_after_the_primary_dies() {
    if !real_node() {
        return;
    }
    let real = Real::new("pgreal-fo").await;
    let name = "pg";
    // With a server certificate of the test's own (`spec.certificates`): the standbys
    // verify the new primary by it after the failover.
    let own_ca = tls::own_server_certificate(&real, name);
    let pg = real
        .cluster(
            name,
            3,
            json!({
                "failoverDelaySeconds": 0,
                "certificates": {"serverTlsSecret": format!("{name}-own-tls")},
            }),
        )
        .await;
    let old = primary_of(&pg);
    let (ok, old_ip) = real.kubectl(&["get", "pod", &old, "-o", "jsonpath={.status.podIP}"]);
    assert!(ok, "{old_ip}");

    let (new, before, Tally { acked, rows, lost }) =
        real.kill_primary_under_the_writer(name, &old).await;
    let old_ip = old_ip.trim().to_owned();
    let last_old = rows
        .iter()
        .filter(|(_, srv)| **srv == old_ip)
        .map(|(id, _)| *id)
        .max()
        .unwrap_or(0);
    let first_new = rows
        .iter()
        .filter(|(_, srv)| **srv != old_ip)
        .map(|(id, _)| *id)
        .min()
        .unwrap_or(u64::MAX);
    eprintln!(
        "(c) {old} -> {new}: {} acknowledged ({before} before the kill), {} rows; lost {lost:?} (old primary's last row {last_old}, new primary's first {first_new})",
        acked.len(),
        rows.len()
    );
    assert!(
        lost.iter().all(|id| *id > last_old && *id < first_new),
        "acknowledged commits lost outside the asynchronous window: {lost:?} (last old {last_old}, first new {first_new})"
    );
    // The old primary's pod rejoined as a standby of the new one, via pg_rewind.
    rejoined_as_a_replica(&real, name, &old, &new).await;
    tls::serves_its_own_certificate(&real, name, &own_ca, &new, 2);
    let (_, logs) = real.kubectl(&["logs", &old, "-c", "postgres"]);
    assert!(
        rewound(&logs),
        "{old} did not rejoin through pg_rewind:\n{logs}"
    );
    real.finish().await;
}

/// `synchronous_standby_names` for `me` of a 3-member cluster `name` with ANY 1.
fn any_one_of_the_others(name: &str, me: &str) -> String {
    let others: Vec<String> = (0..3)
        .map(|k| format!("{name}-{k}"))
        .filter(|p| p != me)
        .map(|p| format!("\"{p}\""))
        .collect();
    format!("ANY 1 ({})", others.join(", "))
}

/// (c'') Synchronous replication: with `spec.synchronous` (ANY 1 of the others,
/// Required), a commit is acknowledged only once a standby flushed it, so killing the
/// primary's postmaster under the writer loses none of them; the survey reads both
/// standbys (the quorum) before the most advanced is promoted, and it names the others
/// in turn.
#[tokio::test]
async fn with_synchronous_replication_a_failover_loses_no_acknowledged_commit() {
    if !real_node() {
        return;
    }
    let real = Real::new("pgreal-sync").await;
    let name = "pg";
    let pg = real
        .cluster(
            name,
            3,
            json!({"failoverDelaySeconds": 0, "synchronous": {"number": 1}}),
        )
        .await;
    let old = primary_of(&pg);
    real.shows(
        &old,
        "SHOW synchronous_standby_names",
        &any_one_of_the_others(name, &old),
    )
    .await;
    real.metrics_say(&old, &["lockstep_instance_synchronous_standbys 1"])
        .await;
    real.shows(&old, "SHOW synchronous_commit", "on").await;
    alter_system_is_undone(&real, &old).await;
    real.shows(
        &old,
        "SHOW synchronous_standby_names",
        &any_one_of_the_others(name, &old),
    )
    .await;
    // Both standbys are in the quorum a commit waits for.
    real.shows(
        &old,
        "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'quorum'",
        "2",
    )
    .await;

    let (new, before, Tally { acked, rows, lost }) =
        real.kill_primary_under_the_writer(name, &old).await;
    eprintln!(
        "(c'') {old} -> {new}, synchronous: {} acknowledged ({before} before the kill), {} rows; lost {lost:?}",
        acked.len(),
        rows.len()
    );
    assert!(
        lost.is_empty(),
        "acknowledged commits lost under synchronous replication: {lost:?}"
    );
    real.shows(
        &new,
        "SHOW synchronous_standby_names",
        &any_one_of_the_others(name, &new),
    )
    .await;
    real.finish().await;
}

/// `ALTER SYSTEM` (which PostgreSQL 15 allows) empties `synchronous_standby_names` on
/// `pod` and reloads: its manager finds the server running other values than its files
/// hold, writes them again and reloads, which leaves `postgresql.auto.conf` without the
/// setting. Waits (at most `SLOW`) until the file no longer sets it.
async fn alter_system_is_undone(real: &Real, pod: &str) {
    for sql in [
        "ALTER SYSTEM SET synchronous_standby_names = ''",
        "SELECT pg_reload_conf()",
    ] {
        let (ok, out) = real.psql_on(pod, sql);
        assert!(ok, "{sql} on {pod}: {out}");
    }
    let in_auto_conf = "SELECT count(*) FROM pg_file_settings \
         WHERE name = 'synchronous_standby_names' AND sourcefile LIKE '%postgresql.auto.conf'";
    let deadline = std::time::Instant::now() + SLOW;
    loop {
        let (ok, out) = real.psql_on(pod, in_auto_conf);
        if ok && out.trim() == "0" {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{pod}: postgresql.auto.conf still sets synchronous_standby_names after {SLOW:?} ({out})"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// (c') Failover with a lagging replica: replay paused (`pg_wal_replay_pause()`) on the
/// lowest-ordinal replica, then the primary's postmaster killed. The survey sees both
/// standbys at the same received position and the paused one behind in replay: the
/// other one must be promoted (the operator's lowest-ordinal choice of today would take
/// the paused one). Needs the operator side of fencing (survey, most-advanced choice).
#[tokio::test]
async fn failover_never_promotes_a_lagging_replica() {
    if !real_node() {
        return;
    }
    let real = Real::new("pgreal-lag").await;
    let name = "pg";
    let pg = real
        .cluster(name, 3, json!({"failoverDelaySeconds": 0}))
        .await;
    let old = primary_of(&pg);
    let roles = real.roles(name).await;
    let mut replicas: Vec<String> = roles
        .iter()
        .filter(|(_, (role, _, _))| role == "replica")
        .map(|(pod, _)| pod.clone())
        .collect();
    replicas.sort();
    let (lagging, advanced) = (replicas[0].clone(), replicas[1].clone());
    real.start_client(name).await;
    real.writing(true);
    real.acks_grow(0, 10).await;
    let (ok, out) = real.psql_on(&lagging, "SELECT pg_wal_replay_pause()");
    assert!(ok, "pause replay on {lagging}: {out}");
    let paused_at = real.acks().len();
    real.acks_grow(paused_at, 30).await;
    let pg = real.kill_primary(name, &old).await;
    let new = primary_of(&pg);
    assert_eq!(
        new, advanced,
        "the failover promoted {new}, not the most advanced replica {advanced} ({lagging} had replay paused)"
    );
    let lost = real.tally(name).lost;
    eprintln!("(c') {old} -> {new} ({lagging} paused): lost {lost:?}");
    real.finish().await;
}

/// What a writer was told, and what the cluster kept of it.
pub(crate) struct Tally {
    /// The ids whose commit was acknowledged.
    pub(crate) acked: BTreeSet<u64>,
    /// `(id, server address)` of every row the cluster has.
    pub(crate) rows: BTreeMap<u64, String>,
    /// The acknowledged ids the cluster lacks.
    pub(crate) lost: Vec<u64>,
}

/// The writer that bypasses the Services writes ids from here (the `-rw` one from 1).
const DIRECT_FIRST: u64 = 1_000_001;
/// The finalizer that holds the old primary's pod Terminating.
const HOLD: &str = "lockstep.dev/e2e-hold";

/// (c'') Failover with the old primary cut off from the API server
/// (`tools/node/api-cut.sh`: the node drops what its pod IP sends to the API server)
/// and held Terminating (a finalizer on its pod, so the operator's fence delete leaves
/// the pod object in place and "its pod is gone" never holds). The old server is alive,
/// replicating and reachable; only its Lease renewals fail. A `-rw` writer and a writer
/// connected to the old primary's pod IP run throughout. Checked on the databases:
/// - the old primary stops accepting writes by itself (its agent exits 5, before the
///   operator deletes its pod) within `T + R + 1` s of its last renewal;
/// - the operator hands the Lease to the target only after `renewTime + L + S`, and the
///   new primary's first commit follows the hand-over;
/// - the target is the most advanced standby of the recorded survey;
/// - no commit is accepted by two servers: every acknowledged direct commit precedes
///   the hand-over, and the acknowledged commits the new primary lacks are a tail of the
///   old primary's (asynchronous replication), all sent before the hand-over;
/// - the rule removed and the pod released, the old server's data rejoins as a standby
///   through pg_rewind (in the held container's grace period, or in the recreated pod)
///   and streams.
#[tokio::test]
async fn failover_with_the_primary_cut_off_from_the_api() {
    use k8s_openapi::api::coordination::v1::Lease;

    // The defaults. The old primary's container exits when it fences (about T after its
    // last renewal), so it is NotReady and the failover starts at once: the operator
    // then waits for the Lease to expire (L + S after the last renewal).
    const L: i64 = 15;
    const S: i64 = 2;
    const T: i64 = L / 2;
    const R: i64 = 2;
    if !real_node() {
        return;
    }
    let real = Real::new("pgreal-cut").await;
    let name = "pg";
    let pg = real
        .cluster(
            name,
            3,
            json!({"failoverDelaySeconds": 0, "fencing": {"leaseDurationSeconds": L, "clockSkewSeconds": S}}),
        )
        .await;
    let old = primary_of(&pg);
    let pods: Api<Pod> = real.pg.env.api();
    let old_pod = pods.get(&old).await.expect("get the primary's pod");
    let old_uid = old_pod.uid().unwrap_or_default();
    let old_id = format!("{old}/{old_uid}");
    let old_ip = old_pod
        .status
        .and_then(|s| s.pod_ip)
        .expect("the primary's pod IP");
    pods.patch(
        &old,
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": [HOLD]}})),
    )
    .await
    .expect("hold the primary's pod with a finalizer");
    let leases = Recorder::start(real.pg.env.api::<Lease>(), &format!("{name}-primary")).await;
    let clusters = Recorder::start(real.pg.api.clone(), name).await;
    let old_seen = Recorder::start(pods.clone(), &old).await;
    real.start_client(name).await;
    real.start_writer("direct", &old_ip, name, DIRECT_FIRST)
        .await;
    real.writing(true);
    real.writing_on("direct", true);
    real.acks_grow(0, 10).await;
    real.acks_grow_on("direct", 0, 10).await;

    let cut_at = now_epoch();
    api_cut("add", &old_ip);
    let new = failed_over_from(&real, name, &old).await;
    let new_pod = pods.get(&new).await.expect("get the new primary's pod");
    let new_id = format!("{new}/{}", new_pod.uid().unwrap_or_default());
    let new_ip = new_pod
        .status
        .and_then(|s| s.pod_ip)
        .expect("the new primary's pod IP");
    let after = real.acks().len();
    real.acks_grow(after, 10).await;
    real.stop_writer("direct");
    real.stop_writer("client");
    let direct = real.attempts("direct");
    let client = real.attempts("client");
    let (ok, out) = real.psql_on(&new, "SELECT id, srv, extract(epoch FROM at) FROM acks");
    assert!(ok, "read acks on {new}: {out}");
    let rows: BTreeMap<u64, (String, f64)> = out
        .lines()
        .filter_map(|l| {
            let mut f = l.split('|');
            Some((
                f.next()?.parse().ok()?,
                (f.next()?.to_owned(), f.next()?.parse().ok()?),
            ))
        })
        .collect();

    // The Lease: the old holder's last renewal, and the hand-over to the new primary.
    let lease_seen = leases.seen();
    let holder = |l: &Lease| {
        l.spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default()
    };
    let last_renew = lease_seen
        .iter()
        .filter(|(_, l)| holder(l) == old_id)
        .filter_map(|(_, l)| l.spec.as_ref()?.renew_time.as_ref().map(|t| epoch(&t.0)))
        .fold(f64::MIN, f64::max);
    assert!(last_renew > 0.0, "no renewal by {old_id} seen");
    let handed_at = lease_seen
        .iter()
        .find(|(_, l)| holder(l) == new_id)
        .and_then(|(_, l)| {
            let spec = l.spec.as_ref()?;
            spec.acquire_time
                .as_ref()
                .or(spec.renew_time.as_ref())
                .map(|t| epoch(&t.0))
        })
        .unwrap_or_else(|| panic!("the Lease was never handed to {new_id}: {lease_seen:?}"));

    // The self-fence, seen by the writer connected to the old server and by its agent.
    let fence_by = last_renew + (T + R + 1) as f64;
    let last_direct_ack = direct
        .iter()
        .filter(|a| a.acked)
        .map(|a| a.end)
        .fold(f64::MIN, f64::max);
    let first_refused = direct
        .iter()
        .filter(|a| !a.acked && a.start > last_direct_ack)
        .map(|a| a.end)
        .fold(f64::MAX, f64::min);
    let old_pods = old_seen.seen();
    let exited_5 = old_pods
        .iter()
        .find_map(|(_, p)| exit_5_at(p))
        .unwrap_or_else(|| panic!("{old}'s agent never exited 5 (fenced)"));
    let delete_seen = old_pods
        .iter()
        .find(|(_, p)| p.metadata.deletion_timestamp.is_some())
        .map_or(f64::MAX, |(t, _)| *t);
    let rel = |t: f64| t - last_renew;
    eprintln!(
        "(c'') cut {old} ({old_ip}) at +{:.2}s after its last renewal; last direct commit +{:.2}s, first refused +{:.2}s, agent exit 5 at +{:.0}s (second precision), pod deleted (seen) +{:.2}s; Lease handed to {new} at +{:.2}s (L + S = {}s); promoted, Ready seen +{:.2}s",
        rel(cut_at),
        rel(last_direct_ack),
        rel(first_refused),
        rel(exited_5),
        rel(delete_seen),
        rel(handed_at),
        L + S,
        rel(pg_ready_seen(&clusters, &new).unwrap_or(f64::NAN)),
    );
    assert!(
        last_direct_ack <= fence_by,
        "{old} acknowledged a direct commit at +{:.2}s after its last renewal, past T + R + 1 = {}s",
        rel(last_direct_ack),
        T + R + 1
    );
    assert!(
        direct.iter().any(|a| a.start > fence_by) && first_refused <= fence_by + 1.0,
        "the direct writer saw no refusal by T + R + 1 (+1 s for the attempt itself): first refused +{:.2}s",
        rel(first_refused)
    );
    assert!(
        exited_5 <= delete_seen,
        "{old} was deleted (seen +{:.2}s) before its agent fenced it (+{:.0}s)",
        rel(delete_seen),
        rel(exited_5)
    );
    assert!(
        handed_at > last_renew + (L + S) as f64,
        "the Lease went to {new} at +{:.2}s, before renewTime + L + S = +{}s",
        rel(handed_at),
        L + S
    );

    // The most advanced standby of the survey was promoted.
    let survey = clusters
        .seen()
        .iter()
        .rev()
        .find_map(|(_, pg)| {
            let machine = pg.status.as_ref()?.engine.machine.as_ref()?.to_value();
            let state = &machine["state"];
            (state["name"] == "SwitchingOver" && state["surveyed"].is_array())
                .then(|| state.clone())
        })
        .expect("the failover recorded no survey");
    let positions: Vec<(i64, u64, u64)> = survey["surveyed"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| {
            Some((
                s["ordinal"].as_i64()?,
                lsn(s["receive"].as_str()?)?,
                lsn(s["replay"].as_str()?)?,
            ))
        })
        .collect();
    let target = survey["target"]["ordinal"].as_i64();
    let new_ordinal = new.rsplit('-').next().and_then(|o| o.parse::<i64>().ok());
    eprintln!("(c'') survey {:?}, target {target:?}", survey["surveyed"]);
    assert_eq!(positions.len(), 2, "the survey saw {positions:?}");
    assert_eq!(target, new_ordinal, "the survey's target is not {new}");
    let best = positions.iter().map(|(_, rc, rp)| (*rc, *rp)).max();
    assert_eq!(
        positions
            .iter()
            .find(|(o, _, _)| Some(*o) == target)
            .map(|(_, rc, rp)| (*rc, *rp)),
        best,
        "{new} is not the most advanced of {positions:?}"
    );

    // No commit accepted by two servers; what the new primary lacks is the old one's tail.
    let first_new = rows
        .values()
        .filter(|(srv, _)| *srv == new_ip)
        .map(|(_, at)| *at)
        .fold(f64::MAX, f64::min);
    assert!(
        first_new >= handed_at,
        "{new} committed at +{:.2}s, before it was handed the Lease (+{:.2}s)",
        rel(first_new),
        rel(handed_at)
    );
    assert!(
        last_direct_ack < handed_at,
        "a direct commit to {old} was acknowledged after the hand-over"
    );
    let kept_old = rows
        .values()
        .filter(|(srv, _)| *srv == old_ip)
        .map(|(_, at)| *at)
        .fold(f64::MIN, f64::max);
    let acked: Vec<&Attempt> = client.iter().chain(&direct).filter(|a| a.acked).collect();
    let lost: Vec<&&Attempt> = acked.iter().filter(|a| !rows.contains_key(&a.id)).collect();
    eprintln!(
        "(c'') {} commits acknowledged ({} direct), {} rows on {new}; lost (asynchronous tail) {:?}",
        acked.len(),
        direct.iter().filter(|a| a.acked).count(),
        rows.len(),
        lost.iter().map(|a| a.id).collect::<Vec<_>>()
    );
    assert!(
        lost.iter().all(|a| a.end > kept_old && a.start < handed_at),
        "acknowledged commits lost outside the old primary's asynchronous tail (last kept old commit +{:.2}s, hand-over +{:.2}s): {lost:?}",
        rel(kept_old),
        rel(handed_at)
    );

    // The agent's own account of the fence: the tail of the stopped container's log,
    // kept on the pod as its termination message (the kubelet may drop the dead
    // container and its log once the pod is deleted), or that log if still there.
    let message = old_pods
        .iter()
        .find_map(|(_, p)| exit_5_message(p))
        .unwrap_or_default();
    let (_, previous_log) = real.kubectl(&["logs", &old, "-c", "postgres", "--previous"]);
    assert!(
        [&message, &previous_log]
            .iter()
            .any(|l| l.contains("RenewalOverdue") || l.contains("FENCED")),
        "{old}'s stopped container did not say it fenced for want of renewals:\ntermination message:\n{message}\nprevious log:\n{previous_log}"
    );

    // Rule removed and pod released: its container may rejoin as a standby (pg_rewind)
    // within its grace period - it needs no API access for that, its role label comes
    // through the downward API - and the pod recreated on the same volume rejoins (or
    // finds the rewound standby). The held container's log is read until the pod is
    // replaced (the kubelet drops it once the container is gone).
    api_cut("del", &old_ip);
    pods.patch(
        &old,
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release the old primary's pod");
    let deadline = std::time::Instant::now() + SLOW;
    let mut held_log = String::new();
    loop {
        let current = pods.get_opt(&old).await.expect("get the old primary's pod");
        if current
            .as_ref()
            .is_some_and(|p| p.uid().as_deref() != Some(old_uid.as_str()))
        {
            break;
        }
        if current.is_some() {
            let (ok, log) = real.kubectl(&["logs", &old, "-c", "postgres"]);
            if ok && log.len() >= held_log.len() {
                held_log = log;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{old} was not recreated after its release"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    real.all_ready(name).await;
    rejoined_as_a_replica(&real, name, &old, &new).await;
    let (_, new_log) = real.kubectl(&["logs", &old, "-c", "postgres"]);
    let rewind_lines = |log: &str| {
        log.lines()
            .filter(|l| l.contains("ewind"))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    eprintln!(
        "(c'') {old} rejoined; held container: {}; recreated pod: {}",
        rewind_lines(&held_log),
        rewind_lines(&new_log)
    );
    assert!(
        [&held_log, &new_log].iter().any(|l| rewound(l)),
        "{old} did not rejoin through pg_rewind:\nheld container:\n{held_log}\nrecreated pod:\n{new_log}"
    );
    real.finish().await;
}

/// `GET /metrics` from `ip:port` over plain HTTP/1.0 (the pod network is routed from
/// the host to the real node).
fn scrape(ip: &str, port: u16) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(
        &format!("{ip}:{port}")
            .parse()
            .map_err(|e| std::io::Error::other(format!("{e}")))?,
        Duration::from_secs(3),
    )?;
    stream.set_read_timeout(Some(Duration::from_secs(3)))?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")?;
    let mut body = String::new();
    stream.read_to_string(&mut body)?;
    Ok(body)
}

/// When the cluster was first seen Ready with `primary` (epoch seconds).
fn pg_ready_seen(clusters: &Recorder<PostgresCluster>, primary: &str) -> Option<f64> {
    clusters.seen().iter().find_map(|(t, pg)| {
        let s = pg.status.as_ref()?;
        (s.engine.phase.as_deref() == Some("Ready") && s.primary_pod.as_deref() == Some(primary))
            .then_some(*t)
    })
}

/// When the pod's `postgres` container was seen to exit 5 (fenced), by its `finishedAt`.
fn exit_5_at(p: &Pod) -> Option<f64> {
    exit_5(p)?.finished_at.as_ref().map(|t| epoch(&t.0))
}

/// The termination message of the pod's `postgres` container that exited 5 (the tail
/// of its log: `FallbackToLogsOnError`).
fn exit_5_message(p: &Pod) -> Option<String> {
    exit_5(p)?.message.clone()
}

/// The pod's `postgres` container's exit with code 5 (fenced), current or last.
fn exit_5(p: &Pod) -> Option<&k8s_openapi::api::core::v1::ContainerStateTerminated> {
    let c = p
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == "postgres")?;
    [c.state.as_ref(), c.last_state.as_ref()]
        .into_iter()
        .flatten()
        .filter_map(|s| s.terminated.as_ref())
        .find(|t| t.exit_code == 5)
}

/// Epoch seconds of a Kubernetes timestamp.
fn epoch(t: &k8s_openapi::jiff::Timestamp) -> f64 {
    // Microseconds since 1970 fit an f64 exactly for millennia.
    #[allow(clippy::cast_precision_loss)]
    let us = t.as_microsecond() as f64;
    us / 1e6
}

fn now_epoch() -> f64 {
    epoch(&k8s_openapi::jiff::Timestamp::now())
}

/// An LSN `X/Y` as one number.
fn lsn(s: &str) -> Option<u64> {
    let (hi, lo) = s.split_once('/')?;
    Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
}

/// `tools/node/api-cut.sh OP IP`: cut (`add`) or restore (`del`) the path from a pod
/// IP to the API server, in the real node's network namespace.
fn api_cut(op: &str, ip: &str) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/node/api-cut.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(&script).args([op, ip]);
    if let Some(dir) = kubeconfig_path().parent() {
        cmd.env("LOCKSTEP_CLUSTER_DIR", dir);
    }
    let out = cmd.output().expect("run tools/node/api-cut.sh");
    assert!(
        out.status.success(),
        "api-cut.sh {op} {ip}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `tools/node/pod-nft.sh ARGS`: add (`add UID NAME RULE`) or remove (`del UID NAME`)
/// an nftables rule on the input of one pod's own network namespace (found by the pod's
/// UID), or `list UID` its rules; returns what the script printed.
fn pod_nft(args: &[&str]) -> String {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/node/pod-nft.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(args)
        .output()
        .expect("run tools/node/pod-nft.sh");
    assert!(
        out.status.success(),
        "pod-nft.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every version of one object a watch delivered, with the epoch second it arrived.
struct Recorder<K> {
    seen: Arc<Mutex<Vec<(f64, K)>>>,
    task: JoinHandle<()>,
}

impl<K> Recorder<K>
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    async fn start(api: Api<K>, name: &str) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let task = {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut tx = Some(tx);
                let mut stream = std::pin::pin!(watcher(api, config));
                while let Some(event) = stream.next().await {
                    let Ok(event) = event else {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    };
                    match event {
                        watcher::Event::InitDone => {
                            if let Some(tx) = tx.take() {
                                let _ = tx.send(());
                            }
                        }
                        watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                            if let Ok(mut seen) = seen.lock() {
                                seen.push((now_epoch(), o));
                            }
                        }
                        watcher::Event::Delete(_) | watcher::Event::Init => {}
                    }
                }
            })
        };
        let _ = rx.await;
        Self { seen, task }
    }

    fn seen(&self) -> Vec<(f64, K)> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl<K> Drop for Recorder<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// (d) A wiped `.status` after a switchover: the machine re-adopts what runs. No role
/// label moves, no pod is restarted or replaced, the cluster is Ready again. Needs the
/// operator side of fencing (adoption by the lease holder).
#[tokio::test]
async fn status_wipe_moves_no_role() {
    if !real_node() {
        return;
    }
    let real = Real::new("pgreal-wipe").await;
    let name = "pg";
    real.cluster(name, 2, json!({})).await;
    // A switchover first, so that the primary is not the lowest ordinal.
    real.pg
        .merge_patch(name, json!({"spec": {"image": NEXT_IMAGE}}))
        .await;
    real.ready_at(name, NEXT_IMAGE).await;
    let before = real.roles(name).await;
    let status: Api<PostgresCluster> = real.pg.api.clone();
    status
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": null})),
        )
        .await
        .expect("wipe .status");
    let pg = real.ready_at(name, NEXT_IMAGE).await;
    let after = real.roles(name).await;
    assert_eq!(
        before,
        after,
        "roles, pod UIDs or restart counts changed after the status wipe (history: {:?})",
        pg.status.map(|s| s.engine.machine)
    );
    real.finish().await;
}

/// (e) An on-demand backup to the in-cluster S3, restored into a new cluster; (e') the
/// final backup on delete: the dump appears while the deleted object still exists, the
/// finalizer is released after it, and it restores with every row.
#[tokio::test]
async fn backup_to_s3_and_restore() {
    if !real_node() {
        return;
    }
    let s3 = s3_env();
    let bucket = "pg-backups";
    s3_cli(&s3, &["mb", bucket]);
    let real = Real::new("pgreal-bk").await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "s3-real"},
        "stringData": {"accessKey": s3["AWS_ACCESS_KEY_ID"], "secretKey": s3["AWS_SECRET_ACCESS_KEY"]},
    }))
    .expect("a Secret");
    real.pg
        .env
        .api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the S3 Secret");
    let prefix = real.ns().to_owned();
    // The writer's rows are in `postgres`: named as the application's database, it is
    // what a `Dump` backup dumps (the default would be `app`, empty here).
    let backup = json!({"database": "postgres", "backup": {
        "s3Endpoint": s3["S3_ENDPOINT"],
        "bucket": bucket,
        "prefix": prefix,
        "credentialsSecret": "s3-real",
        "image": TOOLS_IMAGE,
    }});
    let name = "pg";
    real.cluster(name, 1, backup.clone()).await;
    real.start_client(name).await;
    let (ok, out) = real.psql_rw(
        name,
        "INSERT INTO acks (id) SELECT g FROM generate_series(1, 100) g",
    );
    assert!(ok, "{out}");
    let (ok, out) = real.kubectl(&[
        "annotate",
        "postgrescluster",
        name,
        "lockstep.dev/backup-now=e2e-1",
    ]);
    assert!(ok, "{out}");
    let pg = until(&real.pg.api, name, "a successful backup", SLOW, |pg| {
        pg.status
            .as_ref()
            .is_some_and(|s| s.last_backup_time.is_some())
    })
    .await;
    eprintln!(
        "(e) backup at {:?}",
        pg.status.and_then(|s| s.last_backup_time)
    );

    // Restore into a new cluster with restore.sh (the `latest` pointer of `pg`).
    let target = "pg2";
    real.cluster(target, 1, json!({})).await;
    let log = restore(&real, "restore", target, name, None, &s3, bucket, &prefix).await;
    let (ok, out) = real.psql_on(&format!("{target}-0"), "SELECT count(*), sum(id) FROM acks");
    assert!(
        ok && out.trim() == "100|5050",
        "rows in {target} after the restore: {out}\n{log}"
    );
    eprintln!(
        "(e) restored into {target}: {}",
        log.lines().last().unwrap_or_default()
    );

    // (e') The final backup on delete: 50 more rows, then `pg` deleted. While the object
    // still exists (its finalizer held), a new dump appears in S3 and `latest` names it.
    let (ok, out) = real.psql_rw(
        name,
        "INSERT INTO acks (id) SELECT g FROM generate_series(101, 150) g",
    );
    assert!(ok, "{out}");
    let dumps = |s3ls: &str| -> BTreeSet<String> {
        s3ls.lines()
            .filter(|k| k.ends_with(".dump"))
            .map(str::to_owned)
            .collect()
    };
    let before = dumps(&s3_cli(&s3, &["ls", bucket, &format!("{prefix}/{name}/")]));
    assert_eq!(before.len(), 1, "dumps before the delete: {before:?}");
    real.pg
        .api
        .delete(name, &kube::api::DeleteParams::default())
        .await
        .expect("delete the cluster");
    let deleted_at = now_epoch();
    let deadline = std::time::Instant::now() + SLOW;
    let (final_key, seen_at) = loop {
        let listed = dumps(&s3_cli(&s3, &["ls", bucket, &format!("{prefix}/{name}/")]));
        let fresh: Vec<&String> = listed.difference(&before).collect();
        if let [key] = fresh[..] {
            let seen_at = now_epoch();
            // Listed, and the object is still there afterwards: it existed while the
            // final backup's object did.
            let still = real.pg.api.get_opt(name).await.expect("get the cluster");
            assert!(
                still
                    .as_ref()
                    .is_some_and(|c| c.metadata.deletion_timestamp.is_some()),
                "{name} was gone (finalizer released) by the time its final backup {key} was listed"
            );
            break (key.clone(), seen_at);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no final backup of {name} in s3://{bucket}/{prefix}/{name}/ after {SLOW:?}: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    // The finalizer is released afterwards, and `latest` names the final dump.
    let gone = await_condition(real.pg.api.clone(), name, |o: Option<&PostgresCluster>| {
        o.is_none()
    });
    match tokio::time::timeout(SLOW, gone).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => panic!("the watch failed while waiting for {name} to go: {e}"),
        Err(_) => panic!("{name} still exists {SLOW:?} after its final backup"),
    }
    let gone_at = now_epoch();
    let latest = s3_cli(
        &s3,
        &[
            "get",
            &format!("{bucket}/{prefix}/{name}/latest"),
            "/dev/stdout",
        ],
    );
    assert_eq!(
        latest.trim(),
        final_key,
        "latest does not name the final backup"
    );
    eprintln!(
        "(e') deleted {name}: final backup {final_key} listed after {:.1}s, object gone after {:.1}s",
        seen_at - deleted_at,
        gone_at - deleted_at
    );
    // ... and it restores: all 150 rows (restore.sh replaces the 100-row table).
    let log = restore(
        &real,
        "restore-final",
        target,
        name,
        Some(&final_key),
        &s3,
        bucket,
        &prefix,
    )
    .await;
    let (ok, out) = real.psql_on(&format!("{target}-0"), "SELECT count(*), sum(id) FROM acks");
    assert!(
        ok && out.trim() == "150|11325",
        "rows in {target} after restoring the final backup: {out}\n{log}"
    );
    real.finish().await;
}

/// Run restore.sh in pod `pod` (the image and scripts of cluster `target`) into
/// `target`: the dump `key`, or the `latest` one of cluster `source`; its log.
#[allow(clippy::too_many_arguments)] // One call site per restore; a struct would only rename them.
async fn restore(
    real: &Real,
    pod: &str,
    target: &str,
    source: &str,
    key: Option<&str>,
    s3: &BTreeMap<String, String>,
    bucket: &str,
    prefix: &str,
) -> String {
    let object: Pod = restricted(serde_json::from_value(json!({
        "metadata": {"name": pod},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "restore",
                "image": TOOLS_IMAGE,
                "command": ["bash", "/lockstep/scripts/restore.sh"],
                "env": [
                    {"name": "TARGET_HOST", "value": format!("{target}-rw")},
                    {"name": "POSTGRES_PASSWORD", "valueFrom": {"secretKeyRef": {"name": format!("{target}-credentials"), "key": "superuserPassword"}}},
                    {"name": "CLUSTER_NAME", "value": source},
                    {"name": "RESTORE_KEY", "value": key.unwrap_or_default()},
                    {"name": "S3_ENDPOINT", "value": s3["S3_ENDPOINT"]},
                    {"name": "S3_BUCKET", "value": bucket},
                    {"name": "S3_PREFIX", "value": prefix},
                    {"name": "AWS_ACCESS_KEY_ID", "value": s3["AWS_ACCESS_KEY_ID"]},
                    {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": "s3-real", "key": "secretKey"}}},
                ],
                "volumeMounts": [{"name": "scripts", "mountPath": "/lockstep/scripts"}],
            }],
            "volumes": [{"name": "scripts", "configMap": {"name": format!("{target}-scripts"), "defaultMode": 0o555}}],
        }
    }))
    .expect("a Pod"), POSTGRES_UID);
    let pods: Api<Pod> = real.pg.env.api();
    pods.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("create the restore pod {pod}: {e}"));
    let done = until(&pods, pod, "the restore pod to finish", SLOW, |p: &Pod| {
        matches!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
    })
    .await;
    let (_, log) = real.kubectl(&["logs", pod]);
    assert_eq!(
        done.status.and_then(|s| s.phase).as_deref(),
        Some("Succeeded"),
        "restore.sh failed:\n{log}"
    );
    log
}

/// `tools/images/backup/s3 ARGS...` against the in-cluster S3 from this machine; its
/// stdout.
fn s3_cli(s3: &BTreeMap<String, String>, args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/images/backup/s3"))
        .args(args)
        .env("S3_ENDPOINT", &s3["S3_HOST_ENDPOINT"])
        .env("AWS_ACCESS_KEY_ID", &s3["AWS_ACCESS_KEY_ID"])
        .env("AWS_SECRET_ACCESS_KEY", &s3["AWS_SECRET_ACCESS_KEY"])
        .output()
        .expect("run the s3 helper");
    assert!(
        out.status.success(),
        "s3 {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `tools/node/s3.sh`'s environment (it deploys the in-cluster S3 server if needed).
fn s3_env() -> BTreeMap<String, String> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/node/s3.sh");
    let kubeconfig = kubeconfig_path();
    let mut cmd = Command::new("bash");
    cmd.arg(&script);
    if let Some(dir) = kubeconfig.parent() {
        cmd.env("LOCKSTEP_CLUSTER_DIR", dir);
    }
    let out = cmd.output().expect("run tools/node/s3.sh");
    assert!(
        out.status.success(),
        "tools/node/s3.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            Some((
                k.trim_start_matches("export ").to_owned(),
                v.trim_matches(['"', '\'']).to_owned(),
            ))
        })
        .collect()
}

/// The pod side of fencing against the real API server, without the operator: a pod
/// runs `lockstep instance` (copied in by the init container, as the operator renders
/// it) as `primary` with the Lease env and a ServiceAccount whose Role
/// allows `get`/`update`/`patch` on that one Lease (the least privilege the pods need), and the
/// test plays the operator's part on the Lease and the role label.
#[tokio::test]
async fn lease_agent_against_the_api_server() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    use lockstep::machines::postgres::render::{
        BIN_PATH, INSTALL_PATH, INSTANCE_COMMAND, LIVENESS_COMMAND, instance_image,
    };

    if !real_node() {
        return;
    }
    let real = Real::new("pgreal-lease").await;
    let env = &real.pg.env;
    let pp = PostParams::default();
    let objects = json!({
        "sa": {"metadata": {"name": "pg-instance"}, "automountServiceAccountToken": true},
        "role": {"metadata": {"name": "pg-instance"}, "rules": [{
            "apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
            "resourceNames": ["pg-primary"], "verbs": ["get", "update", "patch"]}]},
        "binding": {"metadata": {"name": "pg-instance"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pg-instance"},
            "subjects": [{"kind": "ServiceAccount", "name": "pg-instance", "namespace": env.namespace()}]},
        "lease": {"metadata": {"name": "pg-primary"}, "spec": {"holderIdentity": "", "leaseDurationSeconds": 12}},
        "secret": {"metadata": {"name": "pw"}, "stringData": {"su": "su-pw", "repl": "repl-pw"}},
    });
    let get = |k: &str| objects[k].clone();
    env.api::<ServiceAccount>()
        .create(&pp, &serde_json::from_value(get("sa")).expect("sa"))
        .await
        .expect("create the ServiceAccount");
    env.api::<Role>()
        .create(&pp, &serde_json::from_value(get("role")).expect("role"))
        .await
        .expect("create the Role");
    env.api::<RoleBinding>()
        .create(
            &pp,
            &serde_json::from_value(get("binding")).expect("binding"),
        )
        .await
        .expect("create the RoleBinding");
    let leases: Api<Lease> = env.api();
    leases
        .create(&pp, &serde_json::from_value(get("lease")).expect("lease"))
        .await
        .expect("create the Lease");
    env.api::<Secret>()
        .create(&pp, &serde_json::from_value(get("secret")).expect("secret"))
        .await
        .expect("create the Secret");
    let field = |name: &str, path: &str| json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}});
    let pod: Pod = restricted(serde_json::from_value(json!({
        "metadata": {"name": "pg-0", "labels": {ROLE: "primary"}},
        "spec": {
            "serviceAccountName": "pg-instance",
            "automountServiceAccountToken": true,
            "terminationGracePeriodSeconds": 10,
            "initContainers": [{
                "name": "install-instance",
                "image": instance_image(),
                "imagePullPolicy": "IfNotPresent",
                "command": ["/lockstep", "install-instance", "--to", INSTALL_PATH],
                "volumeMounts": [{"name": "bin", "mountPath": INSTALL_PATH}],
            }],
            "containers": [{
                "name": "postgres",
                "image": IMAGE,
                "command": INSTANCE_COMMAND,
                "env": [
                    {"name": "PGDATA", "value": "/data/pgdata"},
                    {"name": "LOCKSTEP_ROLE_FILE", "value": "/etc/lockstep/podinfo/labels"},
                    {"name": "POSTGRES_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "pw", "key": "su"}}},
                    {"name": "REPLICATION_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "pw", "key": "repl"}}},
                    {"name": "PRIMARY_HOST", "value": "nowhere.invalid"},
                    field("POD_NAME", "metadata.name"),
                    field("POD_UID", "metadata.uid"),
                    field("POD_NAMESPACE", "metadata.namespace"),
                    {"name": "LOCKSTEP_LEASE_NAME", "value": "pg-primary"},
                    // T - G (the immediate stop's grace, 2 s) leaves room for 4 renewals.
                    {"name": "LOCKSTEP_LEASE_SECONDS", "value": "12"},
                    {"name": "LOCKSTEP_FENCE_SECONDS", "value": "6"},
                    {"name": "LOCKSTEP_RENEW_SECONDS", "value": "1"},
                ],
                "livenessProbe": {
                    "exec": {"command": LIVENESS_COMMAND},
                    "periodSeconds": 5, "timeoutSeconds": 6, "failureThreshold": 6,
                },
                "volumeMounts": [
                    {"name": "data", "mountPath": "/data"},
                    {"name": "bin", "mountPath": BIN_PATH, "readOnly": true},
                    {"name": "podinfo", "mountPath": "/etc/lockstep/podinfo", "readOnly": true},
                ],
            }],
            "volumes": [
                {"name": "data", "emptyDir": {}},
                {"name": "bin", "emptyDir": {}},
                {"name": "podinfo", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            ],
        }
    }))
    .expect("a Pod"), POSTGRES_UID);
    let pods: Api<Pod> = env.api();
    let pod = pods.create(&pp, &pod).await.expect("create the pod");
    let me = format!("pg-0/{}", pod.uid().unwrap_or_default());
    let logs_contain = |needle: &'static str, previous: bool| {
        let deadline = std::time::Instant::now() + SLOW;
        loop {
            let mut args = vec!["logs", "pg-0"];
            if previous {
                args.push("--previous");
            }
            let (_, out) = real.kubectl(&args);
            if out.contains(needle) {
                return out;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "pg-0 never logged {needle:?}:\n{out}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    let set_holder = |holder: String| {
        let leases = leases.clone();
        async move {
            let now = chrono_now();
            leases
                .patch(
                    "pg-primary",
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"spec": {"holderIdentity": holder, "renewTime": now}})),
                )
                .await
                .expect("patch the Lease")
        }
    };

    // 1. Labelled primary, the Lease names nobody: it waits, and nothing listens.
    logs_contain("AwaitingLease", false);
    assert!(
        !real.writable_over_tcp("pg-0"),
        "pg-0 serves before holding the lease"
    );

    // 2. The Lease names it: it starts writable and renews (renewTime moves on).
    let handed = set_holder(me.clone()).await;
    let handed_at = handed.spec.and_then(|s| s.renew_time).map(|t| t.0);
    until(
        &leases,
        "pg-primary",
        "a renewal by pg-0",
        SLOW,
        move |l: &Lease| {
            l.spec
                .as_ref()
                .and_then(|s| s.renew_time.as_ref())
                .map(|t| t.0)
                > handed_at
        },
    )
    .await;
    let deadline = std::time::Instant::now() + SLOW;
    while !real.writable_over_tcp("pg-0") {
        assert!(
            std::time::Instant::now() < deadline,
            "pg-0 never became writable"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // 3. The Lease handed to another pod: it fences itself (exit 5), the container
    //    restarts and waits for the Lease again.
    set_holder("pg-1/another-uid".to_owned()).await;
    let fenced = until(
        &pods,
        "pg-0",
        "pg-0's container to exit 5",
        SLOW,
        |p: &Pod| last_exit_code(p) == Some(5),
    )
    .await;
    let out = logs_contain("LeaseLost", true);
    assert!(out.contains("exiting status=5"), "{out}");
    drop(fenced);
    logs_contain("AwaitingLease", false);

    // 4. Back to pg-0, then labelled demoted: a clean stop, the Lease released.
    set_holder(me.clone()).await;
    let deadline = std::time::Instant::now() + SLOW;
    while !real.writable_over_tcp("pg-0") {
        assert!(
            std::time::Instant::now() < deadline,
            "pg-0 never became writable again"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    pods.patch(
        "pg-0",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"labels": {ROLE: "demoted"}}})),
    )
    .await
    .expect("label pg-0 demoted");
    let me2 = me.clone();
    let released = until(
        &leases,
        "pg-primary",
        "released-by pg-0",
        SLOW,
        move |l: &Lease| l.annotations().get("lockstep.dev/released-by") == Some(&me2),
    )
    .await;
    assert_eq!(
        released
            .spec
            .and_then(|s| s.holder_identity)
            .unwrap_or_default(),
        "",
        "the released Lease still names a holder"
    );
    until(
        &pods,
        "pg-0",
        "pg-0's container to exit 0 after the demotion",
        SLOW,
        |p: &Pod| last_exit_code(p) == Some(0),
    )
    .await;
    real.finish().await;
}

/// Whether an instance manager's log shows that it rejoined through `pg_rewind`: its
/// `Rewinding -> Standby` transition, or `pg_rewind`'s own word that nothing diverged.
fn rewound(log: &str) -> bool {
    log.contains("Rewound") || log.contains("no rewind required")
}

/// The exit code of the container's previous run.
fn last_exit_code(p: &Pod) -> Option<i32> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .last_state
        .as_ref()?
        .terminated
        .as_ref()
        .map(|t| t.exit_code)
}

/// Now as a Lease's MicroTime.
fn chrono_now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string()
}
