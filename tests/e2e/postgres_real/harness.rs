//! The real tier's harness: a namespace on the real node with the operator in this
//! process ([`Real`]), its clusters, writers and waits, and what it reads of the pods.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::PostParams;
use kube::runtime::wait::await_condition;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::task::JoinHandle;

use lockstep::engine::conditions;
use lockstep::machines::postgres::table::reason::FAILOVER_STARTED;
use lockstep::machines::postgres::{Postgres, PostgresCluster};

use super::{Tally, scrape};
use crate::postgres::history;
use crate::support::{
    Env, Fixture, InProcessOperator, RESTRICTED, kubeconfig_path, restricted, wait_for_all_within,
};
use lockstep::machines::postgres::render::POSTGRES_UID;

pub(super) const ROLE: &str = "lockstep.dev/role";
/// The instances' image (`tools/images/build.sh --name postgres-15-bare`): the server
/// binaries and pgBackRest, no `curl`, no `perl` and no file of Lockstep's own: the
/// pods run the instance manager their init container copies in.
pub(super) const IMAGE: &str = "lockstep.local/postgres:15-bare";
/// What runs beside the instances: the writer pods (`psql`), and the backup and
/// restore Jobs (`spec.backup.image`: their scripts upload with `curl`)
/// (`tools/images/build.sh --name postgres-15`).
pub(super) const TOOLS_IMAGE: &str = "ghcr.io/lockstep-dev/postgres:15";
/// The upgrade target (`tools/images/build.sh --name postgres-15-next`).
pub(super) const NEXT_IMAGE: &str = "lockstep.local/postgres:15-next";
/// The local cluster's node-local class (`tools/cluster/storageclasses.yaml`).
pub(super) const STORAGE_CLASS: &str = "local";
/// Creating, upgrading, failing over real instances on a loaded 2-core machine.
pub(super) const SLOW: Duration = Duration::from_secs(300);

/// Whether the cluster has the real node (`LOCKSTEP_REAL_NODE=0` starts none).
pub(super) fn real_node() -> bool {
    if std::env::var("LOCKSTEP_REAL_NODE").is_ok_and(|v| v == "0") {
        eprintln!("LOCKSTEP_REAL_NODE=0: no real node, the real-PostgreSQL tier does not run");
        return false;
    }
    true
}

/// `kubectl` of the running cluster (next to its kubeconfig).
pub(super) fn kubectl(args: &[&str]) -> (bool, String) {
    let kubeconfig = kubeconfig_path();
    let bin = kubeconfig
        .parent()
        .map_or_else(|| PathBuf::from("kubectl"), |d| d.join("bin/kubectl"));
    let out = Command::new(&bin)
        .env("KUBECONFIG", &kubeconfig)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        text.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    (out.status.success(), text)
}

/// Wait on a watch of `name` until `condition`, for at most `deadline`.
pub(super) async fn until<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    deadline: Duration,
    condition: impl Fn(&K) -> bool + Send + 'static,
) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    match within(api, name, what, deadline, condition).await {
        Some(object) => object,
        None => panic!("timed out after {deadline:?} waiting for {what} ({name})"),
    }
}

/// Wait on a watch of `name` until `condition`, for at most `deadline`: `None` when the
/// deadline passes first (a vanished object or a failed watch still panic).
pub(super) async fn within<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    deadline: Duration,
    condition: impl Fn(&K) -> bool + Send + 'static,
) -> Option<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let watched = await_condition(api.clone(), name, move |o: Option<&K>| {
        o.is_some_and(&condition)
    });
    match tokio::time::timeout(deadline, watched).await {
        Ok(Ok(Some(object))) => Some(object),
        Ok(Ok(None)) => panic!("{name} is gone while waiting for {what}"),
        Ok(Err(e)) => panic!("the watch failed while waiting for {what} ({name}): {e}"),
        Err(_) => None,
    }
}

pub(crate) fn is_ready_at(pg: &PostgresCluster, image: &str) -> bool {
    let Some(status) = &pg.status else {
        return false;
    };
    status.image.as_deref() == Some(image)
        && status.engine.phase.as_deref() == Some("Ready")
        && status.engine.observed_generation == pg.metadata.generation
        && status
            .engine
            .condition(conditions::READY)
            .is_some_and(|c| c.status == conditions::status::TRUE)
}

/// A real-node namespace with the CRD and the operator in this process.
pub(crate) struct Real {
    pub(crate) pg: Fixture<Postgres>,
    operator: Option<InProcessOperator>,
}

impl Real {
    pub(super) async fn new(prefix: &str) -> Self {
        let env = Env::labelled(prefix, &[("lockstep.dev/real-node", "true"), RESTRICTED]).await;
        let pg = Fixture::<Postgres>::in_env(env).await;
        let operator = Some(pg.operator());
        Self { pg, operator }
    }

    /// A real-node namespace `env` (labelled as [`Real::new`]'s) whose clusters an
    /// operator installed in the cluster manages, with the CRD it installed: this
    /// process runs no operator and applies no CRD.
    pub(crate) async fn managed_elsewhere(env: Env) -> Self {
        let pg = Fixture::<Postgres>::with_installed_crd(env).await;
        Self { pg, operator: None }
    }

    pub(crate) fn ns(&self) -> &str {
        self.pg.env.namespace()
    }

    pub(crate) fn kubectl(&self, args: &[&str]) -> (bool, String) {
        let mut all = vec!["-n", self.ns()];
        all.extend_from_slice(args);
        kubectl(&all)
    }

    /// Create the cluster `name` (`replicas` instances of [`IMAGE`]) with `extra` spec
    /// fields and wait until it is Ready.
    pub(super) async fn cluster(
        &self,
        name: &str,
        replicas: usize,
        extra: serde_json::Value,
    ) -> PostgresCluster {
        self.cluster_at(name, replicas, "15", IMAGE, extra).await
    }

    /// [`Self::cluster`] at `version`, its instances running `image`.
    pub(super) async fn cluster_at(
        &self,
        name: &str,
        replicas: usize,
        version: &str,
        image: &str,
        extra: serde_json::Value,
    ) -> PostgresCluster {
        let mut spec = json!({
            "version": version,
            "image": image,
            "replicas": replicas,
            "storageSize": "1Gi",
            "storageClassName": STORAGE_CLASS,
        });
        crate::support::merge_json(&mut spec, extra);
        let object = PostgresCluster::new(
            name,
            serde_json::from_value(spec).expect("a valid PostgresCluster spec"),
        );
        self.pg.create_object(&object).await;
        self.ready_at(name, image).await
    }

    pub(crate) async fn ready_at(&self, name: &str, image: &str) -> PostgresCluster {
        let image = image.to_owned();
        let pg = self
            .cluster_until(name, &format!("Ready at {image}"), move |pg| {
                is_ready_at(pg, &image)
            })
            .await;
        self.all_ready(name).await;
        pg
    }

    /// Every instance pod of `name` Ready (PostgreSQL answers `pg_isready`), watched
    /// with a deadline.
    pub(super) async fn all_ready(&self, name: &str) {
        let pods: Api<Pod> = self.pg.env.api();
        let selector = format!("app.kubernetes.io/instance={name},lockstep.dev/component=database");
        wait_for_all_within(
            &pods,
            &selector,
            &format!("every instance of {name} Ready"),
            SLOW,
            |pods: &[Pod]| !pods.is_empty() && pods.iter().all(pod_ready),
        )
        .await;
    }

    /// Every instance: its role label, UID and container restarts.
    pub(crate) async fn roles(&self, name: &str) -> BTreeMap<String, (String, String, i32)> {
        let pods: Api<Pod> = self.pg.env.api();
        let selector = format!("app.kubernetes.io/instance={name},lockstep.dev/component=database");
        pods.list(&kube::api::ListParams::default().labels(&selector))
            .await
            .expect("list pods")
            .items
            .into_iter()
            .map(|p| {
                let role = p.labels().get(ROLE).cloned().unwrap_or_default();
                let restarts = p
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .map_or(0, |c| c.iter().map(|c| c.restart_count).sum());
                (p.name_any(), (role, p.uid().unwrap_or_default(), restarts))
            })
            .collect()
    }

    /// Kill `old`'s postmaster, and again each time its container brings it back, until
    /// the machine has begun a failover (one after any already in its history); then wait until the cluster is Ready with another
    /// primary. A server that crashes once and restarts in place within seconds is, by
    /// design, not failed over (it comes back as the primary it was, still holding the
    /// Lease), so a single kill would make the test a race between the kubelet's restart
    /// and the operator's two reconciles: a primary that keeps dying is what fails over.
    pub(super) async fn kill_primary(&self, name: &str, old: &str) -> PostgresCluster {
        let deadline = std::time::Instant::now() + SLOW;
        let mut kills = 0;
        // The latest failover's start (the history keeps the last few transitions, so
        // a later one is told by its time, not by a count).
        let latest = |pg: &PostgresCluster| {
            history(pg)
                .into_iter()
                .filter(|h| h.reason == FAILOVER_STARTED)
                .map(|h| h.at)
                .max()
        };
        let at = self.pg.api.get(name).await.expect("the cluster");
        let before = latest(&at);
        // Ready again at the image it runs now.
        let image = at
            .status
            .as_ref()
            .and_then(|s| s.image.clone())
            .expect("a Ready cluster names its image");
        loop {
            let pg = self.pg.api.get(name).await.expect("the cluster");
            if latest(&pg) > before {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no failover began after {kills} kills of {old}'s postmaster"
            );
            let (ok, _) = self.kubectl(&[
                "exec",
                old,
                "-c",
                "postgres",
                "--",
                "bash",
                "-c",
                "kill -KILL \"$(head -1 \"$PGDATA/postmaster.pid\")\"",
            ]);
            kills += usize::from(ok);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert!(kills > 0, "the failover began before {old} was killed");
        let old = old.to_owned();
        self.cluster_until(name, "Ready with a new primary", move |pg| {
            is_ready_at(pg, &image)
                && pg
                    .status
                    .as_ref()
                    .and_then(|s| s.primary_pod.as_deref())
                    .is_some_and(|p| p != old)
        })
        .await
    }

    /// Scrape `pod`'s `/metrics` (its manager's, port `metrics`) until every line of
    /// `wanted` is there, for at most [`SLOW`] (an HTTP endpoint: nothing to watch). A
    /// wanted line ending in ` *` stands for the series with any value.
    pub(super) async fn metrics_say(&self, pod: &str, wanted: &[&str]) {
        let (ok, ip) = self.kubectl(&["get", "pod", pod, "-o", "jsonpath={.status.podIP}"]);
        assert!(ok, "{ip}");
        let deadline = std::time::Instant::now() + SLOW;
        loop {
            let text = scrape(ip.trim(), 9187).unwrap_or_default();
            let says = |w: &str| match w.strip_suffix(" *") {
                Some(series) => text
                    .lines()
                    .any(|l| l.split_once(' ').is_some_and(|(s, _)| s == series)),
                None => text.lines().any(|l| l == w),
            };
            if wanted.iter().all(|w| says(w)) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{pod}'s /metrics never said {wanted:?}:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Poll `sql` on `pod` until it answers `want` (a setting reaches a server through
    /// its files: there is nothing to watch), for at most [`SLOW`].
    pub(super) async fn shows(&self, pod: &str, sql: &str, want: &str) {
        let deadline = std::time::Instant::now() + SLOW;
        loop {
            let (ok, out) = self.psql_on(pod, sql);
            if ok && out.trim() == want {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{pod} never answered {want:?} to {sql:?} (last: {out:?})"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// What `script` prints in `pod`'s PostgreSQL container, run again until `kubectl exec`
    /// reaches the container, for at most [`SLOW`]. An exec that does not reach it (the
    /// container stopping or starting again) prints what a person would look at about
    /// cluster `name` once, so the log says why.
    pub(super) async fn output_of(&self, name: &str, pod: &str, script: &str) -> String {
        let deadline = std::time::Instant::now() + SLOW;
        let mut explained = false;
        loop {
            let (ok, out) =
                self.kubectl(&["exec", pod, "-c", "postgres", "--", "bash", "-c", script]);
            if ok {
                return out;
            }
            if !std::mem::replace(&mut explained, true) {
                eprintln!("exec in {pod} failed: {out}\n{}", self.explain(name));
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{pod} never ran {script:?} (last: {out})"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Switch `pod`'s current WAL file out and wait until the archive holds it, so that
    /// everything committed on `pod` so far is recoverable from the archive.
    pub(super) async fn archive_now(&self, pod: &str) {
        let (ok, file) = self.psql_on(pod, "SELECT pg_walfile_name(pg_switch_wal())");
        assert!(ok, "{file}");
        self.shows(
            pod,
            &format!(
                "SELECT last_archived_wal >= '{}' FROM pg_stat_archiver",
                file.trim()
            ),
            "t",
        )
        .await;
    }

    /// Wait on a watch of cluster `name` until `condition`, for at most [`SLOW`]; on
    /// timeout, print what the cluster, its pods, its Lease and its events say (the
    /// operator runs in this process, so nothing else would keep it) and panic.
    pub(crate) async fn cluster_until(
        &self,
        name: &str,
        what: &str,
        condition: impl Fn(&PostgresCluster) -> bool + Send + 'static,
    ) -> PostgresCluster {
        match within(&self.pg.api, name, what, SLOW, condition).await {
            Some(pg) => pg,
            None => {
                eprintln!("{}", self.explain(name));
                panic!("timed out after {SLOW:?} waiting for {what} ({name})")
            }
        }
    }

    /// What a person would look at when cluster `name` is stuck: its status, its pods,
    /// its Lease, the namespace's events, and the tail of each instance's log.
    pub(crate) fn explain(&self, name: &str) -> String {
        let mut out = format!("--- why {name} is stuck ---\n");
        let mut show = |title: &str, args: &[&str]| {
            let (_, text) = self.kubectl(args);
            out.push_str(&format!("# {title}\n{text}\n"));
        };
        show("status", &["get", "pgc", name, "-o", "jsonpath={.status}"]);
        show("pods", &["get", "pods", "-o", "wide", "--show-labels"]);
        show("leases", &["get", "leases", "-o", "yaml"]);
        show("events", &["get", "events", "--sort-by=.lastTimestamp"]);
        let selector = format!("app.kubernetes.io/instance={name},lockstep.dev/component=database");
        let (_, pods) = self.kubectl(&["get", "pods", "-l", &selector, "-o", "name"]);
        for pod in pods.lines() {
            show(
                &format!("{pod} log"),
                &["logs", pod, "-c", "postgres", "--tail=60"],
            );
            show(
                &format!("{pod} previous log"),
                &["logs", pod, "-c", "postgres", "--previous", "--tail=60"],
            );
        }
        out
    }

    /// The server clock of `pod` now, as an RFC 3339 instant in UTC with microseconds: a
    /// recovery target read between two commits on the same server lies strictly between
    /// them.
    pub(super) fn server_now(&self, pod: &str) -> String {
        let (ok, now) = self.psql_on(
            pod,
            "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
        );
        assert!(ok, "{now}");
        now
    }

    pub(crate) fn psql_on(&self, pod: &str, sql: &str) -> (bool, String) {
        self.kubectl(&[
            "exec",
            pod,
            "-c",
            "postgres",
            "--",
            "psql",
            "-X",
            "-A",
            "-t",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "/var/run/postgresql",
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-c",
            sql,
        ])
    }

    /// Whether `pod` serves a writable server over TCP (the temporary local-only servers
    /// of a bootstrap listen on the socket only).
    pub(super) fn writable_over_tcp(&self, pod: &str) -> bool {
        let (ok, out) = self.kubectl(&[
            "exec", pod, "-c", "postgres", "--", "bash", "-c",
            "PGPASSWORD=\"$POSTGRES_PASSWORD\" psql -X -A -t -q -h 127.0.0.1 -U postgres -d postgres -c 'SELECT NOT pg_is_in_recovery()'",
        ]);
        ok && out.trim() == "t"
    }

    /// psql from the client pod through `<name>-rw`.
    pub(crate) fn psql_rw(&self, name: &str, sql: &str) -> (bool, String) {
        let host = format!("{name}-rw");
        self.kubectl(&[
            "exec",
            "client",
            "--",
            "psql",
            "-X",
            "-A",
            "-t",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            &host,
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-c",
            sql,
        ])
    }

    /// The client pod: writes `INSERT INTO acks(id)` through `<name>-rw` one transaction
    /// at a time (each psql bounded by `timeout 10`) and logs `ack <id>` for every
    /// acknowledged commit; stops when `/tmp/stop` exists.
    pub(crate) async fn start_client(&self, name: &str) {
        self.start_writer("client", &format!("{name}-rw"), name, 1)
            .await;
    }

    /// A writer pod `pod` against `host` (a Service or a pod IP) with the superuser of
    /// cluster `name`, ids from `first`: each attempt logs `begin <id>` before it and
    /// `ack|err <id> <start> <end>` after it (wall-clock seconds around the psql call; an
    /// `ack` only for a commit the server acknowledged). Writes while `/tmp/write` exists, stops when `/tmp/stop` does.
    /// Returns once its pod is Ready: the writer has reached `host` and created `acks`.
    pub(super) async fn start_writer(&self, pod: &str, host: &str, name: &str, first: u64) {
        let secret = format!("{name}-credentials");
        let script = format!(
            r#"export PGHOST={host} PGUSER=postgres PGDATABASE=postgres PGCONNECT_TIMEOUT=3
until psql -X -q -c "CREATE TABLE IF NOT EXISTS acks (id bigint PRIMARY KEY, srv text NOT NULL DEFAULT host(inet_server_addr()), at timestamptz NOT NULL DEFAULT clock_timestamp())" 2>/dev/null; do sleep 0.5; done
echo ready
touch /tmp/ready
i=$(({first} - 1))
while [ ! -f /tmp/stop ]; do
  if [ -f /tmp/write ]; then
    rm -f /tmp/idle
    i=$((i + 1))
    echo "begin $i"
    start=$EPOCHREALTIME
    if timeout 10 psql -X -q -v ON_ERROR_STOP=1 -c "INSERT INTO acks (id) VALUES ($i)" >/dev/null 2>&1; then
      echo "ack $i $start $EPOCHREALTIME"
    else
      echo "err $i $start $EPOCHREALTIME"
    fi
  else
    touch /tmp/idle
  fi
  sleep 0.05
done
echo stopped
exec sleep infinity
"#
        );
        let object: Pod = restricted(serde_json::from_value(json!({
            "metadata": {"name": pod},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "client",
                    "image": TOOLS_IMAGE,
                    "command": ["bash", "-c", script],
                    "readinessProbe": {"exec": {"command": ["test", "-f", "/tmp/ready"]}, "periodSeconds": 1},
                    "env": [{"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {"name": secret, "key": "superuserPassword"}}}],
                }],
            }
        }))
        .expect("a Pod"), POSTGRES_UID);
        let pods: Api<Pod> = self.pg.env.api();
        pods.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("create the writer pod {pod}: {e}"));
        // Not just Running: kube-proxy programs `<name>-rw` some time after the database
        // pods are Ready, and until then a connection is refused. The writer turns Ready
        // once it has created `acks` through `host`, so the caller can write there.
        let created = tokio::time::Instant::now();
        until(
            &pods,
            pod,
            &format!("the writer pod at {host}"),
            SLOW,
            pod_ready,
        )
        .await;
        eprintln!(
            "(writer) {pod} reached {host} {:.1}s after its creation",
            created.elapsed().as_secs_f64()
        );
    }

    /// Start or stop writing (the loop keeps running).
    pub(crate) fn writing(&self, on: bool) {
        self.writing_on("client", on);
    }

    /// Start or stop writing in the writer pod `pod`. Stopping returns once the writer
    /// is idle (`/tmp/idle`, touched by its loop only when it found no `/tmp/write`): no
    /// insert is in flight, and every one it made is in its log.
    pub(super) fn writing_on(&self, pod: &str, on: bool) {
        let cmd = if on {
            "touch /tmp/write"
        } else {
            "rm -f /tmp/write /tmp/idle; until [ -f /tmp/idle ]; do sleep 0.1; done"
        };
        let (ok, out) = self.kubectl(&["exec", pod, "--", "timeout", "60", "bash", "-c", cmd]);
        assert!(ok, "{pod}: {out}");
    }

    /// Wait until the client has `n` more acknowledged commits than it had at `from`.
    pub(crate) async fn acks_grow(&self, from: usize, n: usize) -> usize {
        self.acks_grow_on("client", from, n).await
    }

    /// [`Self::acks_grow`] of the writer pod `pod`.
    pub(super) async fn acks_grow_on(&self, pod: &str, from: usize, n: usize) -> usize {
        let deadline = tokio::time::Instant::now() + SLOW;
        loop {
            let acks = self.acks_of(pod).len();
            if acks >= from + n {
                return acks;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{pod} acknowledged {acks} commits, waiting for {}",
                from + n
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Stop the writer for good and count what cluster `name` kept of what it was told.
    pub(crate) fn tally(&self, name: &str) -> Tally {
        let acked = self.stop_client();
        let rows = self.rows(name);
        let lost = acked
            .iter()
            .copied()
            .filter(|id| !rows.contains_key(id))
            .collect();
        Tally { acked, rows, lost }
    }

    /// Under the writer (30 commits acknowledged first), kill `old`'s postmaster; once a
    /// new primary is Ready, every pod Ready and 20 more commits acknowledged, stop and
    /// count. Returns the new primary, the commits acknowledged before the kill, and the
    /// tally.
    pub(super) async fn kill_primary_under_the_writer(
        &self,
        name: &str,
        old: &str,
    ) -> (String, usize, Tally) {
        self.start_client(name).await;
        self.writing(true);
        let before = self.acks_grow(0, 30).await;
        let pg = self.kill_primary(name, old).await;
        let new = primary_of(&pg);
        self.all_ready(name).await;
        let after = self.acks().len();
        self.acks_grow(after, 20).await;
        (new, before, self.tally(name))
    }

    /// Stop the writer for good and return the acknowledged ids.
    pub(super) fn stop_client(&self) -> BTreeSet<u64> {
        self.stop_writer("client");
        self.acks()
    }

    /// Stop the writer pod `pod` for good (its current insert finishes first).
    pub(super) fn stop_writer(&self, pod: &str) {
        let (ok, out) = self.kubectl(&["exec", pod, "--", "touch", "/tmp/stop"]);
        assert!(ok, "{pod}: {out}");
        // The loop finishes its current insert (bounded by `timeout 10`), then says so.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !self.kubectl(&["logs", pod]).1.contains("stopped") {
            assert!(
                std::time::Instant::now() < deadline,
                "the writer {pod} did not stop"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub(crate) fn acks(&self) -> BTreeSet<u64> {
        self.acks_of("client")
    }

    pub(super) fn acks_of(&self, pod: &str) -> BTreeSet<u64> {
        self.attempts(pod)
            .into_iter()
            .filter(|a| a.acked)
            .map(|a| a.id)
            .collect()
    }

    /// The highest id the client has begun an insert of (logged as `begin <id>` before
    /// the insert, so an attempt still in flight counts): once writing stopped, every
    /// insert the writer makes later has a higher id.
    pub(crate) fn begun(&self) -> u64 {
        let (ok, out) = self.kubectl(&["logs", "client"]);
        assert!(ok, "client logs: {out}");
        out.lines()
            .filter_map(|l| l.strip_prefix("begin ")?.trim().parse().ok())
            .max()
            .unwrap_or(0)
    }

    /// Every insert the writer pod `pod` attempted, in order.
    pub(super) fn attempts(&self, pod: &str) -> Vec<Attempt> {
        let (ok, out) = self.kubectl(&["logs", pod]);
        assert!(ok, "{pod} logs: {out}");
        out.lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let acked = match f.next()? {
                    "ack" => true,
                    "err" => false,
                    _ => return None,
                };
                Some(Attempt {
                    acked,
                    id: f.next()?.parse().ok()?,
                    start: f.next()?.parse().ok()?,
                    end: f.next()?.parse().ok()?,
                })
            })
            .collect()
    }

    /// `(id, server address)` of every row in `acks`, read through `<name>-rw`.
    pub(super) fn rows(&self, name: &str) -> BTreeMap<u64, String> {
        let (ok, out) = self.psql_rw(name, "SELECT id, srv FROM acks ORDER BY id");
        assert!(ok, "read acks through {name}-rw: {out}");
        out.lines()
            .filter_map(|l| {
                let (id, srv) = l.split_once('|')?;
                Some((id.parse().ok()?, srv.to_owned()))
            })
            .collect()
    }

    pub(crate) async fn finish(mut self) {
        if let Some(operator) = self.operator.take() {
            operator.stop().await;
        }
        let Self { pg, .. } = self;
        pg.env.finish().await;
    }
}

/// One insert of a writer pod: its id, whether the server acknowledged it, and the
/// writer's wall clock (epoch seconds) before and after the call.
#[derive(Debug, Clone, Copy)]
pub(super) struct Attempt {
    pub(super) acked: bool,
    pub(super) id: u64,
    pub(super) start: f64,
    pub(super) end: f64,
}

pub(super) fn pod_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Replication as the primary sees it: `application_name|state` per standby, read
/// through `<name>-rw` (so also: the Service reaches the one writable server).
pub(super) fn streaming_standbys(real: &Real, name: &str) -> BTreeSet<String> {
    let (ok, out) = real.psql_rw(
        name,
        "SELECT application_name FROM pg_stat_replication WHERE state = 'streaming'",
    );
    if !ok {
        return BTreeSet::new();
    }
    out.lines().map(str::to_owned).collect()
}

/// After a failover from `old` to `new`: `old` is labelled `replica` again, and every
/// replica streams from `new`.
/// (The old primary's pod is deleted as the target is promoted and labelled `replica`
/// once its successor is seen: waited for on a watch, with a deadline.)
pub(super) async fn rejoined_as_a_replica(real: &Real, name: &str, old: &str, new: &str) {
    let pods: Api<Pod> = real.pg.env.api();
    let selector = format!("app.kubernetes.io/instance={name},lockstep.dev/component=database");
    let labelled = wait_for_all_within(
        &pods,
        &selector,
        &format!("{old} labelled replica again"),
        SLOW,
        |pods: &[Pod]| {
            pods.iter().any(|p| {
                p.name_any() == old && p.labels().get(ROLE).map(String::as_str) == Some("replica")
            })
        },
    )
    .await;
    let replicas: Vec<String> = labelled
        .iter()
        .filter(|p| {
            p.name_any() != new && p.labels().get(ROLE).map(String::as_str) == Some("replica")
        })
        .map(ResourceExt::name_any)
        .collect();
    standbys_become(real, name, &replicas).await;
}

pub(super) async fn standbys_become(real: &Real, name: &str, want: &[String]) {
    let want: BTreeSet<String> = want.iter().cloned().collect();
    let deadline = tokio::time::Instant::now() + SLOW;
    loop {
        let got = streaming_standbys(real, name);
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "pg_stat_replication through {name}-rw: streaming {got:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Watches `<name>-rw`'s EndpointSlices and records the most pods they selected at once
/// (every endpoint, Ready or not: what the Service routes to or may route to).
pub(super) struct RwWatch {
    most: Arc<Mutex<usize>>,
    seen: Arc<Mutex<Vec<Vec<String>>>>,
    task: JoinHandle<()>,
}

impl RwWatch {
    pub(super) async fn start(env: &Env, name: &str) -> Self {
        let api: Api<EndpointSlice> = env.api();
        let most = Arc::new(Mutex::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let selector = format!("kubernetes.io/service-name={name}-rw");
        let task = {
            let (most, seen) = (most.clone(), seen.clone());
            tokio::spawn(async move {
                let mut tx = Some(tx);
                let mut slices: BTreeMap<String, Vec<String>> = BTreeMap::new();
                let config = watcher::Config::default().labels(&selector);
                let mut stream = std::pin::pin!(watcher(api, config));
                while let Some(Ok(event)) = stream.next().await {
                    match event {
                        watcher::Event::InitDone => {
                            if let Some(tx) = tx.take() {
                                let _ = tx.send(());
                            }
                        }
                        watcher::Event::Apply(s) | watcher::Event::InitApply(s) => {
                            let pods = s
                                .endpoints
                                .iter()
                                .flatten()
                                .filter_map(|e| e.target_ref.as_ref()?.name.clone())
                                .collect();
                            slices.insert(s.name_any(), pods);
                        }
                        watcher::Event::Delete(s) => {
                            slices.remove(&s.name_any());
                        }
                        watcher::Event::Init => {}
                    }
                    let now: BTreeSet<String> = slices.values().flatten().cloned().collect();
                    if let Ok(mut most) = most.lock() {
                        *most = (*most).max(now.len());
                    }
                    if let Ok(mut seen) = seen.lock() {
                        let now: Vec<String> = now.into_iter().collect();
                        if seen.last() != Some(&now) {
                            seen.push(now);
                        }
                    }
                }
            })
        };
        let _ = rx.await;
        Self { most, seen, task }
    }

    pub(super) fn most(&self) -> usize {
        self.most.lock().map_or(usize::MAX, |m| *m)
    }

    pub(super) fn seen(&self) -> Vec<Vec<String>> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for RwWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Wait until `name` is Ready with a primary other than `old`; returns it.
pub(super) async fn failed_over_from(real: &Real, name: &str, old: &str) -> String {
    let old = old.to_owned();
    let pg = until(
        &real.pg.api,
        name,
        "Ready with a new primary",
        SLOW,
        move |pg| {
            pg.status.as_ref().is_some_and(|s| {
                s.engine.phase.as_deref() == Some("Ready")
                    && s.primary_pod.as_deref().is_some_and(|p| p != old)
            })
        },
    )
    .await;
    primary_of(&pg)
}

pub(crate) fn primary_of(pg: &PostgresCluster) -> String {
    pg.status
        .as_ref()
        .and_then(|s| s.primary_pod.clone())
        .expect("a Ready cluster names its primary")
}
