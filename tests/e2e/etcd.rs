//! DistributedDB running a real 3-member etcd on the real node (`lockstep-node-0`: kubelet
//! and containerd), driven by the operator, with every step checked in the database
//! itself (`etcdctl` through `kubectl exec`, a writer pod, S3 objects read back):
//!
//! - [`etcd_lifecycle_on_the_real_node`]: the DistributedDB of `examples/etcd.yaml` created → 3 members
//!   healthy → upgraded 3.6 → 3.7 pod by pod with the hooks while a writer writes
//!   through the Service (quorum never lost, every acknowledged write readable, write
//!   errors only around a restart, cluster version 3.7) → scaled 3 → 5 → 3 through the
//!   membership hooks under another writer, one member killed at 3
//!   ([`scaling::scale_under_a_writer`]) → `lockstep.dev/backup-now`:
//!   the snapshot is in S3 and restores into a fresh etcd that holds every key → delete:
//!   the final snapshot is in S3 before the finalizer goes → a new DistributedDB with
//!   `spec.bootstrap.fromBackup` naming it holds every acknowledged key
//!   ([`restore::restore_into_a_new_cluster`]).
//! - [`the_deploy_manifests_run_the_operator_on_the_real_node`]: the overlay
//!   `examples/deploy-real-node` of `examples/deploy` runs the operator image as a pod on the real node, as its
//!   own ServiceAccount, and that pod creates the etcd cluster (members healthy) and
//!   deletes it with a final backup.
//!
//! Both need the real node and build or import the images they use
//! (`tools/images/load.sh`) and the S3 server (`tools/node/s3.sh`). Without a real node
//! (`LOCKSTEP_REAL_NODE=0`, or a cluster that has none, as `tools/cluster/status.sh`
//! decides) they print why on stderr and return.
//!
//! Waits are watches with deadlines; the two things with nothing to watch (the etcd
//! cluster version and the operator pod's log) are polled under a deadline.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, EvictParams, ListParams, LogParams, PostParams};
use kube::runtime::wait::{Condition, await_condition};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::task::JoinHandle;

use lockstep::machines::distributeddb::actions::backup_key;
use lockstep::machines::distributeddb::{DistributedDB, DistributedDb};

use crate::support::{Env, Fixture, RESTRICTED, TEST_MANAGER, kubeconfig_path, restricted};

#[path = "etcd_restore.rs"]
mod restore;
#[path = "etcd_scaling.rs"]
mod scaling;
use lockstep::machines::common::security::NON_ROOT_UID;

/// The label (and taint key) of the real node (tools/node/node.sh).
pub(crate) const REAL_NODE_LABEL: &str = "lockstep.dev/real-node";
/// The images `examples/etcd.yaml` upgrades from and to (tools/images/build.sh).
pub(crate) const FROM: &str = "lockstep.local/etcd:v3.6.16";
const TO: &str = "lockstep.local/etcd:v3.7.3";
/// The image with etcdctl and the s3 helper the writer runs.
const TOOLS_IMAGE: &str = "lockstep.local/backup:1";
/// The bucket of `examples/etcd.yaml`.
const BUCKET: &str = "etcd-backups";
/// The name of the DistributedDB in `examples/etcd.yaml`.
pub(crate) const NAME: &str = "etcd";
/// Deadline of one lifecycle step on a loaded 2-core machine (pods start for real).
pub(crate) const STEP: Duration = Duration::from_secs(600);
/// Deadline of building and importing the images (a cold build compiles etcd and the
/// operator).
const BUILD: Duration = Duration::from_secs(3600);
/// Write errors may start this long before a member's pod is seen deleted (the
/// pre-hook moves the leadership away first) ...
const BEFORE_RESTART: f64 = 20.0;
/// ... and end this long after the replacement is Ready.
const AFTER_RESTART: f64 = 15.0;
/// A restart (deletion seen → replacement Ready) may take at most this long.
const MAX_RESTART: f64 = 180.0;

// ------------------------------------------------------------------ the real node

/// The real node's name, or why the real-node tier cannot run here: mirrors
/// tools/cluster (the `LOCKSTEP_REAL_NODE` switch, then a Ready node with the
/// real-node label).
pub(crate) async fn real_node(client: &Client) -> Result<String, String> {
    if std::env::var("LOCKSTEP_REAL_NODE").is_ok_and(|v| v == "0") {
        return Err("LOCKSTEP_REAL_NODE=0: the cluster runs KWOK nodes only".to_owned());
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let listed = nodes
        .list(&ListParams::default().labels(&format!("{REAL_NODE_LABEL}=true")))
        .await
        .unwrap_or_else(|e| panic!("cannot list nodes: {e}"));
    listed
        .items
        .iter()
        .find(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .map(ResourceExt::name_any)
        .ok_or_else(|| {
            format!(
                "no Ready node labelled {REAL_NODE_LABEL}=true (was the cluster started with \
                 LOCKSTEP_REAL_NODE=0?)"
            )
        })
}

/// Every pod of `ns` ran on `node` (placement honoured for the database, hook, backup,
/// writer and restore pods alike).
pub(crate) async fn assert_all_on(pods: &Api<Pod>, node: &str) {
    let listed = pods
        .list(&ListParams::default())
        .await
        .expect("list the pods");
    let elsewhere: Vec<(String, Option<String>)> = listed
        .items
        .iter()
        .map(|p| {
            (
                p.name_any(),
                p.spec.as_ref().and_then(|s| s.node_name.clone()),
            )
        })
        .filter(|(_, n)| n.as_deref() != Some(node))
        .collect();
    assert!(
        elsewhere.is_empty(),
        "pods not on the real node {node}: {elsewhere:?}"
    );
}

/// Say on the terminal (not captured) that `test` is skipped and why.
pub(crate) fn skipped(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// The directory of the running cluster (the kubeconfig's).
pub(crate) fn cluster_dir() -> PathBuf {
    kubeconfig_path()
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

pub(crate) fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Run a command of this machine (blocking, off the runtime) with `env` and `stdin`;
/// returns whether it succeeded and its stdout (stderr appended when it failed).
pub(crate) async fn run(
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    stdin: Option<String>,
    deadline: Duration,
) -> (bool, String) {
    let what = format!("{} {}", program.display(), args.join(" "));
    let task = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(&program)
            .args(&args)
            .envs(env)
            .env("KUBECONFIG", kubeconfig_path())
            .env("LOCKSTEP_CLUSTER_DIR", cluster_dir())
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes())
                .unwrap_or_else(|e| panic!("cannot write to {}: {e}", program.display()));
        }
        let out = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            text.push_str(&String::from_utf8_lossy(&out.stderr));
        }
        (out.status.success(), text)
    });
    match tokio::time::timeout(deadline, task).await {
        Ok(Ok(result)) => result,
        Ok(Err(e)) => panic!("{what}: {e}"),
        Err(_) => panic!("{what} did not finish within {deadline:?}"),
    }
}

/// `kubectl ARGS` against the test cluster; fails the test unless it succeeds.
pub(crate) async fn kubectl(args: &[&str], stdin: Option<String>) -> String {
    let (ok, out) = run(
        cluster_dir().join("bin/kubectl"),
        args.iter().map(|s| (*s).to_owned()).collect(),
        Vec::new(),
        stdin,
        STEP,
    )
    .await;
    assert!(ok, "kubectl {args:?}: {out}");
    out
}

/// `kubectl exec` of `script` (bash) in container `db` of pod `pod`, after the image's
/// `etcd-lib.sh` (so etcdctl presents the client certificate, and `$scheme` is the
/// members' URL scheme); `None` if it failed.
pub(crate) async fn exec_db(ns: &str, pod: &str, script: &str) -> Option<String> {
    let script = format!(". /usr/local/bin/etcd-lib.sh && {script}");
    let (ok, out) = run(
        cluster_dir().join("bin/kubectl"),
        [
            "-n", ns, "exec", pod, "-c", "db", "--", "bash", "-c", &script,
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect(),
        Vec::new(),
        None,
        Duration::from_secs(120),
    )
    .await;
    ok.then_some(out)
}

/// Build (if needed) and import `images` into the real node.
///
/// The operator's image is built with the profile the real-PostgreSQL tier and the demo
/// use (`image-test`, unless `LOCKSTEP_IMAGE_PROFILE` says otherwise), so one CI run
/// builds it once. With the shipped `release` profile (fat LTO, one codegen unit) this
/// tier alone built it whenever `src/` had changed: 994 s on the 2-core machine with
/// other work on its cores (docs/development.md), the KWOK tier's 1,716 s at b720b17
/// against 906 s when the image was already cached.
pub(crate) async fn load_images(images: &[&str]) {
    let profile = std::env::var("LOCKSTEP_IMAGE_PROFILE").unwrap_or_else(|_| "image-test".into());
    let (ok, out) = run(
        repo().join("tools/images/load.sh"),
        images.iter().map(|s| (*s).to_owned()).collect(),
        vec![("LOCKSTEP_IMAGE_PROFILE".to_owned(), profile)],
        None,
        BUILD,
    )
    .await;
    assert!(ok, "tools/images/load.sh {images:?}: {out}");
}

/// The in-cluster S3 server (tools/node/s3.sh), read from this machine.
struct S3 {
    env: Vec<(String, String)>,
}

/// One object: (LastModified as S3 prints it, key).
type S3Object = (String, String);

impl S3 {
    /// Deploy (or find) the server.
    async fn start() -> Self {
        let (ok, out) = run(
            repo().join("tools/node/s3.sh"),
            Vec::new(),
            Vec::new(),
            None,
            BUILD,
        )
        .await;
        assert!(ok, "tools/node/s3.sh: {out}");
        let vars: BTreeMap<&str, &str> = out.lines().filter_map(|l| l.split_once('=')).collect();
        let get = |k: &str| {
            (*vars
                .get(k)
                .unwrap_or_else(|| panic!("tools/node/s3.sh printed no {k}: {out}")))
            .to_owned()
        };
        Self {
            env: vec![
                // From this machine the pod IP is routed to the node.
                ("S3_ENDPOINT".to_owned(), get("S3_HOST_ENDPOINT")),
                ("AWS_ACCESS_KEY_ID".to_owned(), get("AWS_ACCESS_KEY_ID")),
                (
                    "AWS_SECRET_ACCESS_KEY".to_owned(),
                    get("AWS_SECRET_ACCESS_KEY"),
                ),
            ],
        }
    }

    async fn s3(&self, args: &[&str]) -> (bool, String) {
        run(
            repo().join("tools/images/backup/s3"),
            args.iter().map(|s| (*s).to_owned()).collect(),
            self.env.clone(),
            None,
            Duration::from_secs(120),
        )
        .await
    }

    /// The objects under `prefix` in [`BUCKET`], oldest first.
    async fn list(&self, prefix: &str) -> Vec<S3Object> {
        let (ok, out) = self.s3(&["lsl", BUCKET, prefix]).await;
        if !ok {
            // The bucket is created by the first backup.
            return Vec::new();
        }
        out.lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(t, k)| (t.to_owned(), k.to_owned()))
            .collect()
    }

    /// The size of object `key` (downloaded from S3).
    async fn size(&self, key: &str) -> usize {
        let file = std::env::temp_dir().join(format!("lockstep-e2e-{}.db", std::process::id()));
        let (ok, out) = self
            .s3(&[
                "get",
                &format!("{BUCKET}/{key}"),
                &file.display().to_string(),
            ])
            .await;
        assert!(ok, "s3 get {BUCKET}/{key}: {out}");
        let size = std::fs::metadata(&file).map_or(0, |m| m.len());
        let _ = std::fs::remove_file(&file);
        usize::try_from(size).unwrap_or(usize::MAX)
    }
}

/// Seconds since the epoch (the pods on the real node share this machine's clock).
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// S3's LastModified (`2026-11-30T12:01:02.000Z`) as seconds since the epoch.
fn s3_time(text: &str) -> f64 {
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("S3 LastModified {text:?}: {e}"))
        .timestamp_millis() as f64
        / 1000.0
}

/// Evict `etcd-0` (accepted) and, before it is back, `etcd-1` (refused with 429 by the
/// PodDisruptionBudget); then wait until `etcd-0`'s replacement is Ready. The evictions
/// go through a client that does not retry a 429 (kube-rs retries one by default, which
/// would wait until the budget allows the second).
async fn assert_one_eviction_at_a_time(pdbs: &Api<PodDisruptionBudget>, pods: &Api<Pod>, ns: &str) {
    // The disruption controller has counted the 3 healthy members.
    wait_long(
        pdbs,
        NAME,
        "the budget to allow one disruption",
        STEP,
        |p: Option<&PodDisruptionBudget>| {
            p.and_then(|p| p.status.as_ref())
                .is_some_and(|s| s.expected_pods == Some(3) && s.disruptions_allowed == Some(1))
        },
    )
    .await;
    let mut config = crate::support::kube_config().await;
    config.default_retry = false;
    let once: Api<Pod> = Api::namespaced(Client::try_from(config).expect("a client"), ns);
    let first = pods.get(&format!("{NAME}-0")).await.expect("etcd-0");
    once.evict(&format!("{NAME}-0"), &EvictParams::default())
        .await
        .expect("the first eviction is allowed");
    match once
        .evict(&format!("{NAME}-1"), &EvictParams::default())
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 429 => {}
        other => panic!("a second eviction while etcd-0 is away must be refused (429): {other:?}"),
    }
    let old_uid = first.uid();
    wait_long(
        pods,
        &format!("{NAME}-0"),
        "etcd-0 back Ready after its eviction",
        STEP,
        move |p: Option<&Pod>| {
            p.is_some_and(|p| {
                p.uid() != old_uid
                    && p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
        },
    )
    .await;
    eprintln!("evictions: one member at a time (the second refused with 429)");
}

// ------------------------------------------------------------------ waits

/// Wait (watch, `deadline`) until the object `name` satisfies `condition`.
pub(crate) async fn wait_long<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    deadline: Duration,
    condition: impl Condition<K>,
) -> Option<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    match tokio::time::timeout(deadline, await_condition(api.clone(), name, condition)).await {
        Ok(Ok(object)) => object,
        Ok(Err(e)) => panic!("the watch failed while waiting for {what} ({name}): {e}"),
        Err(_) => {
            let last = api.get_opt(name).await;
            panic!("timed out after {deadline:?} waiting for {what} ({name}); last seen: {last:#?}")
        }
    }
}

fn ready_at(image: &str) -> impl Fn(Option<&DistributedDB>) -> bool + Send + 'static {
    let image = image.to_owned();
    move |db: Option<&DistributedDB>| {
        db.is_some_and(|db| {
            crate::support::at_rest(db)
                && db.status.as_ref().and_then(|s| s.version.as_deref()) == Some(image.as_str())
        })
    }
}

pub(crate) async fn wait_ready_at(api: &Api<DistributedDB>, image: &str) -> DistributedDB {
    wait_long(
        api,
        NAME,
        &format!("the etcd DistributedDB Ready at {image}"),
        STEP,
        ready_at(image),
    )
    .await
    .expect("the DistributedDB exists")
}

/// Wait until the pod `name` has finished; its log, and whether it succeeded.
async fn pod_outcome(pods: &Api<Pod>, name: &str) -> (bool, String) {
    let pod = wait_long(pods, name, "the pod to finish", STEP, |p: Option<&Pod>| {
        p.and_then(|p| p.status.as_ref())
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|phase| phase == "Succeeded" || phase == "Failed")
    })
    .await
    .expect("the pod exists");
    let log = pods
        .logs(name, &LogParams::default())
        .await
        .unwrap_or_else(|e| panic!("logs of {name}: {e}"));
    let ok = pod.status.and_then(|s| s.phase).as_deref() == Some("Succeeded");
    (ok, log)
}

// ------------------------------------------------------------------ the example

/// `examples/etcd.yaml`: its S3 credentials Secret and its DistributedDB (backups
/// under `prefix` in the bucket, so that each test reads back its own snapshots).
pub(crate) fn example(prefix: &str) -> (Secret, DistributedDB) {
    let text = std::fs::read_to_string(repo().join("examples/etcd.yaml"))
        .expect("read examples/etcd.yaml");
    let mut secret = None;
    let mut db = None;
    for document in serde_yaml::Deserializer::from_str(&text) {
        let value: serde_json::Value =
            serde::Deserialize::deserialize(document).expect("examples/etcd.yaml is YAML");
        match value["kind"].as_str() {
            Some("Secret") => secret = Some(serde_json::from_value(value).expect("a Secret")),
            Some("DistributedDB") => {
                let mut value = value;
                value["spec"]["backupPolicy"]["prefix"] = json!(prefix);
                db = Some(serde_json::from_value(value).expect("a DistributedDB"));
            }
            _ => {}
        }
    }
    (
        secret.expect("examples/etcd.yaml has a Secret"),
        db.expect("examples/etcd.yaml has a DistributedDB"),
    )
}

/// `pod` placed as the example places its own pods (`spec.placement`): the writer and
/// the restore run next to the database, on the real node.
fn placed(mut pod: Pod, db: &DistributedDB) -> Pod {
    let placement = db
        .spec
        .placement
        .clone()
        .expect("examples/etcd.yaml has a placement");
    let spec = pod.spec.as_mut().expect("a pod spec");
    spec.node_selector = Some(placement.node_selector);
    spec.tolerations = Some(placement.tolerations);
    spec.affinity = placement.affinity;
    pod
}

/// The members speak TLS only, and only to a holder of a certificate of the cluster's
/// CA (`spec.tls` of `examples/etcd.yaml`): plain http to the client port is refused,
/// https without a client certificate fails its handshake, the client certificate the
/// operator issued is served; the membership's peer URLs are https.
async fn assert_tls_only(ns: &str) {
    let pod = format!("{NAME}-0");
    let plain = exec_db(ns, &pod, "curl -s http://localhost:2379/version").await;
    assert!(
        !plain.as_deref().unwrap_or_default().contains("etcdserver"),
        "plain http was served: {plain:?}"
    );
    let anonymous = exec_db(
        ns,
        &pod,
        "curl -s --cacert $DB_TLS_DIR/ca.crt https://localhost:2379/version",
    )
    .await;
    assert!(
        !anonymous
            .as_deref()
            .unwrap_or_default()
            .contains("etcdserver"),
        "https without a client certificate was served: {anonymous:?}"
    );
    let served = exec_db(ns, &pod, "etcd_curl version").await;
    assert!(
        served.as_deref().unwrap_or_default().contains("etcdserver"),
        "with the client certificate: {served:?}"
    );
    let (members, peers) = member_column(ns, &pod, 3).await;
    assert!(
        peers.len() == 3 && peers.iter().all(|u| u.starts_with("https://")),
        "peer URLs: {members}"
    );
    eprintln!("TLS: plain http and certificate-less https refused; peers {peers:?}");
}

/// `etcdctl member list -w simple` in `pod`, and its `column` (from 0: 2 the names, 3
/// the peer URLs) of every member.
pub(crate) async fn member_column(ns: &str, pod: &str, column: usize) -> (String, Vec<String>) {
    let members = exec_db(ns, pod, "etcdctl member list -w simple")
        .await
        .unwrap_or_default();
    let values = members
        .lines()
        .filter_map(|l| l.split(", ").nth(column).map(str::to_owned))
        .collect();
    (members, values)
}

/// The three members' client URLs (`$scheme` is the etcd image's `etcd-lib.sh`'s:
/// `https` with `spec.tls`).
fn endpoints(ns: &str) -> String {
    (0..3)
        .map(|i| format!("$scheme://{NAME}-{i}.{NAME}.{ns}.svc:2379"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `etcdctl endpoint status` of all three members, from `etcd-0`: (endpoint, version)
/// per member, and how many see a leader.
async fn member_status(ns: &str) -> Option<(Vec<(String, String)>, usize)> {
    let out = exec_db(
        ns,
        &format!("{NAME}-0"),
        &format!(
            "etcdctl --endpoints={} --command-timeout=10s endpoint status -w json",
            endpoints(ns)
        ),
    )
    .await?;
    let parsed: serde_json::Value = serde_json::from_str(out.trim()).ok()?;
    let members = parsed.as_array()?;
    let versions = members
        .iter()
        .map(|m| {
            (
                m["Endpoint"].as_str().unwrap_or_default().to_owned(),
                m["Status"]["version"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    let with_leader = members
        .iter()
        .filter(|m| m["Status"]["leader"].as_u64().is_some_and(|l| l != 0))
        .count();
    Some((versions, with_leader))
}

/// All three members answer `endpoint health` (a linearizable read on each) and see a
/// leader. Retried under the deadline: a member's pod may be Ready a moment before it
/// serves.
pub(crate) async fn assert_all_healthy(ns: &str, version: &str) {
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut last = String::new();
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    while Instant::now() < deadline {
        tick.tick().await;
        let health = exec_db(
            ns,
            &format!("{NAME}-0"),
            &format!(
                "etcdctl --endpoints={} --command-timeout=10s endpoint health",
                endpoints(ns)
            ),
        )
        .await;
        let status = member_status(ns).await;
        match (&health, &status) {
            (Some(h), Some((versions, leaders)))
                if h.matches("is healthy").count() == 3
                    && *leaders == 3
                    && versions.iter().all(|(_, v)| v == version) =>
            {
                return;
            }
            _ => last = format!("health {health:?}, status {status:?}"),
        }
    }
    panic!("the 3 etcd members were not all healthy at {version} within 180s: {last}");
}

// ------------------------------------------------------------------ the writer

/// The writer: one key per put through the Service, logging `ack N <time>` or
/// `err N <time>`; alongside, every half second, `q <healthy members> <time>` from an
/// `endpoint health` of the three members. Stops at `/tmp/stop`, then logs `done`.
fn writer_pod(ns: &str, name: &str, prefix: &str) -> Pod {
    let script = format!(
        r#". /usr/local/bin/etcd-lib.sh
svc=$scheme://{NAME}.{ns}.svc:2379
eps={eps}
quorum() {{
  while [ ! -f /tmp/stop ]; do
    n=$(etcdctl --endpoints=$eps --dial-timeout=2s --command-timeout=4s endpoint health 2>/dev/null | grep -c 'is healthy')
    echo "q $n $(date +%s.%N)"
    sleep 0.5
  done
}}
quorum &
i=0
while [ ! -f /tmp/stop ]; do
  i=$((i + 1))
  if etcdctl --endpoints=$svc --dial-timeout=1s --command-timeout=3s put {prefix}-$i v$i >/dev/null 2>&1; then
    echo "ack $i $(date +%s.%N)"
  else
    echo "err $i $(date +%s.%N)"
  fi
  sleep 0.05
done
wait
echo done
sleep infinity
"#,
        eps = endpoints(ns)
    );
    restricted(
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "writer",
                    "image": TOOLS_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["/bin/bash", "-c", script],
                    "env": [{"name": "DB_TLS_DIR", "value": "/etc/lockstep/tls"}],
                    "volumeMounts": [{"name": "tls", "mountPath": "/etc/lockstep/tls", "readOnly": true}],
                }],
                // The client certificate the operator issued (spec.tls).
                "volumes": [{"name": "tls", "secret": {
                    "secretName": format!("{NAME}-tls"),
                    "defaultMode": 0o440,
                    "items": [
                        {"key": "ca.crt", "path": "ca.crt"},
                        {"key": "client.crt", "path": "client.crt"},
                        {"key": "client.key", "path": "client.key"},
                    ],
                }}],
            }
        }))
        .expect("a Pod"),
        NON_ROOT_UID,
    )
}

/// A writer pod ([`writer_pod`]) running next to the database, its log followed.
struct Writer {
    name: &'static str,
    log: JoinHandle<Vec<String>>,
}

impl Writer {
    /// Start the writer `name` of keys `<prefix>-N`, placed as `db`'s pods are, and
    /// follow its log once it runs.
    async fn start(
        pods: &Api<Pod>,
        db: &DistributedDB,
        ns: &str,
        name: &'static str,
        prefix: &str,
    ) -> Self {
        pods.create(
            &PostParams::default(),
            &placed(writer_pod(ns, name, prefix), db),
        )
        .await
        .unwrap_or_else(|e| panic!("create the writer {name}: {e}"));
        wait_long(pods, name, "the writer to run", STEP, |p: Option<&Pod>| {
            p.and_then(|p| p.status.as_ref())
                .and_then(|s| s.phase.as_deref())
                == Some("Running")
        })
        .await;
        Writer {
            name,
            log: follow_log(pods.clone(), name),
        }
    }

    /// Stop it and read what it logged.
    async fn stop(self, ns: &str) -> Tally {
        kubectl(
            &["-n", ns, "exec", self.name, "--", "touch", "/tmp/stop"],
            None,
        )
        .await;
        let lines = tokio::time::timeout(STEP, self.log)
            .await
            .expect("the writer stops")
            .expect("the writer's log");
        Tally::of(&lines)
    }
}

/// The writer's log as it is written, until `done`.
fn follow_log(pods: Api<Pod>, name: &str) -> JoinHandle<Vec<String>> {
    let name = name.to_owned();
    tokio::spawn(async move {
        let params = LogParams {
            follow: true,
            ..LogParams::default()
        };
        let stream = pods
            .log_stream(&name, &params)
            .await
            .unwrap_or_else(|e| panic!("follow the log of {name}: {e}"));
        let mut lines = std::pin::pin!(stream.lines());
        let mut seen = Vec::new();
        while let Some(line) = lines.next().await {
            let line = line.unwrap_or_else(|e| panic!("the log of {name}: {e}"));
            let done = line == "done";
            seen.push(line);
            if done {
                break;
            }
        }
        seen
    })
}

/// What the writer logged.
#[derive(Default, Debug)]
struct Tally {
    /// Acknowledged keys, with when.
    acked: Vec<(u64, f64)>,
    /// Failed puts, with when.
    failed: Vec<(u64, f64)>,
    /// Quorum samples: healthy members, when.
    quorum: Vec<(u32, f64)>,
}

impl Tally {
    fn of(lines: &[String]) -> Self {
        let mut tally = Self::default();
        for line in lines {
            let mut words = line.split_whitespace();
            let (Some(kind), Some(a), Some(t)) = (words.next(), words.next(), words.next()) else {
                continue;
            };
            let Ok(t) = t.parse::<f64>() else { continue };
            match kind {
                "ack" => tally.acked.extend(a.parse().ok().map(|n| (n, t))),
                "err" => tally.failed.extend(a.parse().ok().map(|n| (n, t))),
                "q" => tally.quorum.extend(a.parse().ok().map(|n| (n, t))),
                _ => {}
            }
        }
        tally
    }
}

// ------------------------------------------------------------------ restarts

/// A member's restart as the pod watch saw it: its old pod's deletion, its
/// replacement Ready.
#[derive(Debug, Clone)]
struct Restart {
    pod: String,
    down: f64,
    up: Option<f64>,
}

/// Watch the database pods; record each deletion and when the replacement became Ready.
fn record_restarts(pods: Api<Pod>) -> (Arc<Mutex<Vec<Restart>>>, JoinHandle<()>) {
    let restarts = Arc::new(Mutex::new(Vec::<Restart>::new()));
    let task = {
        let restarts = restarts.clone();
        tokio::spawn(async move {
            let config = watcher::Config::default().labels(&format!(
                "app.kubernetes.io/instance={NAME},lockstep.dev/component=database"
            ));
            let mut deleted_uids = BTreeSet::new();
            let mut stream = std::pin::pin!(watcher(pods, config));
            while let Some(event) = stream.next().await {
                let objects = match event {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => vec![p],
                    Ok(watcher::Event::Delete(p)) => vec![p],
                    Ok(_) | Err(_) => continue,
                };
                for pod in objects {
                    let name = pod.name_any();
                    let uid = pod.uid().unwrap_or_default();
                    let ready = pod
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        });
                    let mut restarts = restarts.lock().expect("restarts");
                    if pod.metadata.deletion_timestamp.is_some() {
                        if deleted_uids.insert(uid) {
                            restarts.push(Restart {
                                pod: name,
                                down: now(),
                                up: None,
                            });
                        }
                    } else if ready
                        && !deleted_uids.contains(&uid)
                        && let Some(r) = restarts
                            .iter_mut()
                            .rev()
                            .find(|r| r.pod == name && r.up.is_none())
                    {
                        r.up = Some(now());
                    }
                }
            }
        })
    };
    (restarts, task)
}

// ------------------------------------------------------------------ the tests

/// The operator-driven etcd lifecycle on the real node, checked in the database.
#[tokio::test]
async fn etcd_lifecycle_on_the_real_node() {
    let client = crate::support::client().await;
    let node = match real_node(&client).await {
        Ok(node) => node,
        Err(why) => return skipped("etcd_lifecycle_on_the_real_node", &why),
    };
    load_images(&["etcd-3.6", "etcd-3.7", "backup"]).await;
    let s3 = S3::start().await;
    let db = Fixture::<DistributedDb>::in_env(Env::labelled("etcd", &[RESTRICTED]).await).await;
    let ns = db.env.namespace().to_owned();
    let prefix = format!("{ns}/");
    let (secret, object) = example(&prefix);
    db.env
        .api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the S3 Secret of examples/etcd.yaml");
    let pods: Api<Pod> = db.env.api();
    let operator = db.operator();

    // 1. Create: 3 members, healthy, one leader.
    let t0 = Instant::now();
    db.create_object(&object).await;
    wait_ready_at(&db.api, FROM).await;
    assert_all_healthy(&ns, "3.6.16").await;
    eprintln!("created: 3 members healthy at 3.6.16 in {:?}", t0.elapsed());
    assert_tls_only(&ns).await;

    // 1b. The PodDisruptionBudget keeps the quorum through evictions (a node drain):
    // one member may go, a second is refused while the first is away.
    assert_one_eviction_at_a_time(&db.env.api(), &pods, &ns).await;
    assert_all_healthy(&ns, "3.6.16").await;

    // 2. Upgrade under a writer.
    let writer = Writer::start(&pods, &object, &ns, "writer", "key").await;
    let (restarts, recorder) = record_restarts(pods.clone());
    // Some writes before the upgrade starts.
    wait_for_log_acks(&pods, "writer", 20).await;
    let upgrade_started = now();
    db.merge_patch(NAME, json!({"spec": {"image": TO}})).await;
    wait_ready_at(&db.api, TO).await;
    let upgrade_done = now();
    // Some writes after the last restart.
    wait_for_log_acks(&pods, "writer", 20).await;
    let tally = writer.stop(&ns).await;
    recorder.abort();
    let restarts = restarts.lock().expect("restarts").clone();

    let pods_restarted: BTreeSet<&str> = restarts.iter().map(|r| r.pod.as_str()).collect();
    assert_eq!(
        pods_restarted,
        BTreeSet::from(["etcd-0", "etcd-1", "etcd-2"]),
        "each member restarted once: {restarts:#?}"
    );
    assert_eq!(
        restarts.len(),
        3,
        "each member restarted once: {restarts:#?}"
    );
    for r in &restarts {
        let up =
            r.up.unwrap_or_else(|| panic!("{} never came back Ready: {restarts:#?}", r.pod));
        assert!(
            up - r.down <= MAX_RESTART,
            "{} took {:.1}s to restart",
            r.pod,
            up - r.down
        );
    }
    // Quorum never lost: in every sample at least 2 of the 3 members served a
    // linearizable read.
    assert!(
        tally.quorum.len() > 10,
        "too few quorum samples: {:?}",
        tally.quorum
    );
    let lost_quorum: Vec<_> = tally.quorum.iter().filter(|(n, _)| *n < 2).collect();
    assert!(
        lost_quorum.is_empty(),
        "quorum lost (healthy members, time) in {lost_quorum:?}; restarts {restarts:#?}"
    );
    // Write errors only around a restart.
    let outside: Vec<_> = tally
        .failed
        .iter()
        .filter(|(_, t)| {
            !restarts.iter().any(|r| {
                *t >= r.down - BEFORE_RESTART && *t <= r.up.unwrap_or(r.down) + AFTER_RESTART
            })
        })
        .collect();
    assert!(
        outside.is_empty(),
        "write errors outside any restart window: {outside:?}; restarts {restarts:#?}"
    );
    let during = tally
        .acked
        .iter()
        .filter(|(_, t)| *t > upgrade_started && *t < upgrade_done)
        .count();
    assert!(during > 0, "no write was acknowledged during the upgrade");
    // Every acknowledged write is readable.
    let stored = exec_db(
        &ns,
        "etcd-0",
        "etcdctl get --prefix key- --keys-only --consistency=l",
    )
    .await
    .expect("read the keys back");
    let stored: BTreeSet<&str> = stored.lines().filter(|l| !l.is_empty()).collect();
    let lost: Vec<u64> = tally
        .acked
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| !stored.contains(format!("key-{n}").as_str()))
        .collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    eprintln!(
        "writer: {} acknowledged ({during} during the upgrade), {} failed, {} lost; \
         {} quorum samples, none below 2 of 3; restarts: {}",
        tally.acked.len(),
        tally.failed.len(),
        lost.len(),
        tally.quorum.len(),
        restarts
            .iter()
            .map(|r| format!("{} {:.1}s", r.pod, r.up.unwrap_or(r.down) - r.down))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // Every member at 3.7, and the cluster version follows (the leader raises it once
    // every member runs 3.7: polled, there is nothing to watch).
    assert_all_healthy(&ns, "3.7.3").await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut version = String::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while Instant::now() < deadline && !version.contains("\"etcdcluster\":\"3.7.0\"") {
        tick.tick().await;
        version = exec_db(&ns, "etcd-0", "etcd_curl version")
            .await
            .unwrap_or_default();
    }
    assert!(
        version.contains("\"etcdcluster\":\"3.7.0\""),
        "cluster version: {version}"
    );

    // 2b. Scaling 3 -> 5 -> 3 through the membership hooks, under a writer; one member
    // killed at 3.
    let scaled_keys = scaling::scale_under_a_writer(&db, &object, &pods, &ns).await;

    // 3. On-demand backup: in S3, and a fresh etcd restored from it holds every key.
    let token = format!("e2e-{}", std::process::id());
    db.merge_patch(
        NAME,
        json!({"metadata": {"annotations": {"lockstep.dev/backup-now": token}}}),
    )
    .await;
    let job = format!("{NAME}-{}", backup_key(&token, None));
    let backed_up = {
        let job = job.clone();
        wait_long(
            &db.api,
            NAME,
            "the on-demand backup to succeed",
            STEP,
            move |d: Option<&DistributedDB>| {
                d.and_then(|d| d.status.as_ref())
                    .and_then(|s| s.last_backup.as_ref())
                    .is_some_and(|b| b.job == job && b.outcome == "Succeeded")
            },
        )
        .await
    };
    assert!(backed_up.is_some());
    let objects = s3.list(&prefix).await;
    let (_, key) = objects
        .iter()
        .find(|(_, k)| k.starts_with(&format!("{prefix}{job}-")) && k.ends_with(".db"))
        .unwrap_or_else(|| panic!("no snapshot of {job} in s3://{BUCKET}/{prefix}: {objects:?}"))
        .clone();
    let size = s3.size(&key).await;
    assert!(size > 0, "s3://{BUCKET}/{key} is empty");
    let restored = restore(&pods, &object, &key).await;
    let missing: Vec<u64> = tally
        .acked
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| !restored.contains(&format!("key-{n}")))
        .collect();
    assert!(
        missing.is_empty(),
        "the etcd restored from s3://{BUCKET}/{key} lacks acknowledged keys: {missing:?}"
    );
    assert_all_on(&pods, &node).await;
    eprintln!(
        "backup: s3://{BUCKET}/{key} ({size} bytes) restored into a fresh etcd with {} keys",
        restored.len()
    );

    // 4. Delete: the final snapshot is in S3 before the finalizer goes.
    let uid = db
        .api
        .get(NAME)
        .await
        .expect("the DistributedDB")
        .uid()
        .expect("a uid");
    db.api
        .delete(NAME, &DeleteParams::default())
        .await
        .expect("delete the DistributedDB");
    wait_long(
        &db.api,
        NAME,
        "the DistributedDB to be gone",
        STEP,
        kube::runtime::wait::conditions::is_deleted(&uid),
    )
    .await;
    let gone = now();
    let objects = s3.list(&prefix).await;
    let (time, key) = objects
        .iter()
        .find(|(_, k)| k.starts_with(&format!("{prefix}{NAME}-final-backup-")))
        .unwrap_or_else(|| panic!("no final snapshot in s3://{BUCKET}/{prefix}: {objects:?}"))
        .clone();
    assert!(
        s3_time(&time) <= gone,
        "the final snapshot ({time}) was written after the DistributedDB was gone ({gone})"
    );
    let size = s3.size(&key).await;
    assert!(size > 0, "s3://{BUCKET}/{key} is empty");
    eprintln!("final backup: s3://{BUCKET}/{key} ({size} bytes), written at {time}");

    // 5. Declarative restore: a new cluster from the final backup holds every key.
    let acked: BTreeSet<String> = tally
        .acked
        .iter()
        .map(|(n, _)| format!("key-{n}"))
        .chain(scaled_keys)
        .collect();
    restore::restore_into_a_new_cluster(&db, &object, &ns, &key, &acked).await;

    operator.stop().await;
    db.env.finish().await;
}

/// Wait until the writer has acknowledged `n` more writes than when called (read from
/// its log: polled under the deadline, a log has no watch).
async fn wait_for_log_acks(pods: &Api<Pod>, writer: &str, n: usize) {
    let count = |log: &str| log.lines().filter(|l| l.starts_with("ack ")).count();
    let logs = || async {
        pods.logs(writer, &LogParams::default())
            .await
            .unwrap_or_default()
    };
    let start = count(&logs().await);
    let deadline = Instant::now() + STEP;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let log = logs().await;
        if count(&log) >= start + n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the writer acknowledged fewer than {n} writes in {STEP:?}: {}",
            log.lines().rev().take(10).collect::<Vec<_>>().join("\n")
        );
    }
}

/// Restore s3://BUCKET/key into a fresh single-member etcd in a pod; the keys it holds.
async fn restore(pods: &Api<Pod>, db: &DistributedDB, key: &str) -> BTreeSet<String> {
    let script = format!(
        "set -e; s3 get {BUCKET}/{key} /tmp/s.db
etcdutl snapshot restore /tmp/s.db --data-dir /tmp/r --name r --initial-cluster r=http://localhost:2380 --initial-advertise-peer-urls http://localhost:2380 >/dev/null
etcd --data-dir /tmp/r --name r --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 >/tmp/etcd.log 2>&1 &
for i in $(seq 1 240); do etcdctl endpoint health >/dev/null 2>&1 && break; sleep 0.5; done
echo restored
etcdctl get --prefix key- --keys-only"
    );
    let pod: Pod = restricted(serde_json::from_value(json!({
        "metadata": {"name": "restore"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "restore",
                "image": TO,
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/bash", "-c", script],
                "env": [
                    {"name": "S3_ENDPOINT", "value": "http://s3.lockstep-s3.svc"},
                    {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": "etcd-s3", "key": "accessKey"}}},
                    {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": "etcd-s3", "key": "secretKey"}}},
                ]
            }]
        }
    }))
    .expect("a Pod"), NON_ROOT_UID);
    pods.create(&PostParams::default(), &placed(pod, db))
        .await
        .expect("create the restore pod");
    let (ok, log) = pod_outcome(pods, "restore").await;
    assert!(
        ok && log.contains("restored"),
        "restore of s3://{BUCKET}/{key}: {log}"
    );
    log.lines()
        .filter(|l| l.starts_with("key-"))
        .map(str::to_owned)
        .collect()
}

/// `examples/deploy-real-node`: the operator image as a pod on the real node, as its
/// own ServiceAccount, drives an etcd DistributedDB from creation to Ready (members
/// healthy) and through deletion with a final backup.
#[tokio::test]
async fn the_deploy_manifests_run_the_operator_on_the_real_node() {
    let client = crate::support::client().await;
    let node = match real_node(&client).await {
        Ok(node) => node,
        Err(why) => {
            return skipped(
                "the_deploy_manifests_run_the_operator_on_the_real_node",
                &why,
            );
        }
    };
    load_images(&["etcd-3.6", "backup", "lockstep"]).await;
    let s3 = S3::start().await;
    let mut env = Env::labelled("etcd-deploy", &[RESTRICTED]).await;
    env.ns.track::<DistributedDB>();
    let ns = env.namespace().to_owned();

    // The overlay, with the operator watching this test's namespace only (other tests
    // run their own operators elsewhere).
    let rendered = kubectl(
        &[
            "kustomize",
            &repo()
                .join("examples/deploy-real-node")
                .display()
                .to_string(),
        ],
        None,
    )
    .await;
    let mut manifests = Vec::new();
    for document in serde_yaml::Deserializer::from_str(&rendered) {
        let mut value: serde_json::Value =
            serde::Deserialize::deserialize(document).expect("kustomize prints YAML");
        if value["kind"] == "Deployment" {
            let env = value["spec"]["template"]["spec"]["containers"][0]["env"]
                .as_array_mut()
                .expect("the operator container has env");
            env.push(json!({"name": "LOCKSTEP_NAMESPACE", "value": ns}));
            env.push(json!({"name": "LOCKSTEP_MACHINES", "value": "distributeddb"}));
        }
        manifests.push(serde_json::to_string(&value).expect("JSON"));
    }
    let _cleanup = DeployCleanup;
    kubectl(
        &[
            "apply",
            "--server-side",
            "--field-manager",
            TEST_MANAGER,
            "--force-conflicts",
            "-f",
            "-",
        ],
        Some(manifests.join("\n---\n")),
    )
    .await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), DEPLOY_NS);
    wait_long(
        &deployments,
        DEPLOY_NAME,
        "the operator Deployment to be available",
        STEP,
        |d: Option<&Deployment>| {
            d.and_then(|d| d.status.as_ref())
                .and_then(|s| s.available_replicas)
                == Some(1)
        },
    )
    .await;
    let operator_pods: Api<Pod> = Api::namespaced(client.clone(), DEPLOY_NS);
    let running = operator_pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=lockstep"))
        .await
        .expect("list the operator pods");
    let real_nodes = running
        .items
        .iter()
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| n == node)
        })
        .count();
    assert_eq!(
        real_nodes,
        running.items.len(),
        "every operator pod runs on the real node: {:?}",
        running
            .items
            .iter()
            .map(|p| (
                p.name_any(),
                p.spec.as_ref().and_then(|s| s.node_name.clone())
            ))
            .collect::<Vec<_>>()
    );

    // The lifecycle, driven by that pod.
    let prefix = format!("{ns}/");
    let (secret, object) = example(&prefix);
    env.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the S3 Secret");
    let api: Api<DistributedDB> = env.api();
    api.create(&PostParams::default(), &object)
        .await
        .expect("create the DistributedDB");
    wait_ready_at(&api, FROM).await;
    assert_all_healthy(&ns, "3.6.16").await;
    assert_all_on(&env.api::<Pod>(), &node).await;
    let uid = api.get(NAME).await.expect("get").uid().expect("a uid");
    api.delete(NAME, &DeleteParams::default())
        .await
        .expect("delete the DistributedDB");
    wait_long(
        &api,
        NAME,
        "the DistributedDB to be gone",
        STEP,
        kube::runtime::wait::conditions::is_deleted(&uid),
    )
    .await;
    let objects = s3.list(&prefix).await;
    assert!(
        objects
            .iter()
            .any(|(_, k)| k.starts_with(&format!("{prefix}{NAME}-final-backup-"))),
        "no final snapshot in s3://{BUCKET}/{prefix}: {objects:?}"
    );
    // It was the pod that did it, as its ServiceAccount.
    let pod = running.items.first().expect("an operator pod").name_any();
    let log = operator_pods
        .logs(&pod, &LogParams::default())
        .await
        .expect("the operator's log");
    assert!(
        log.contains(&ns) && !log.contains("Forbidden"),
        "the in-cluster operator's log: {log}"
    );
    env.finish().await;
}

/// The namespace and names of `examples/deploy-real-node`.
const DEPLOY_NS: &str = "lockstep-real-node";
const DEPLOY_NAME: &str = "lockstep-real-node";

/// Removes what `examples/deploy-real-node` created (also when the test panics).
struct DeployCleanup;

impl Drop for DeployCleanup {
    fn drop(&mut self) {
        let kubectl = cluster_dir().join("bin/kubectl");
        for args in [
            vec!["delete", "namespace", DEPLOY_NS, "--wait=false"],
            vec!["delete", "clusterrolebinding", DEPLOY_NAME],
            vec!["delete", "clusterrole", DEPLOY_NAME],
        ] {
            let _ = Command::new(&kubectl)
                .args(&args)
                .arg("--ignore-not-found")
                .env("KUBECONFIG", kubeconfig_path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}
