//! What every end-to-end test needs: a client for the local control plane, a namespace of
//! its own, CRDs, waits on watches with deadlines, the operator in-process or as a child
//! process, and a count of the API requests a client makes.
//!
//! # Assumptions
//! - A control plane is running (`make -f tools/cluster/cluster.mk cluster-up`) and
//!   `KUBECONFIG` (default `target/cluster/kubeconfig`) points at it. Without one every
//!   test fails, saying so; none is skipped.
//!
//! # Guarantees
//! - Nothing here sleeps: every wait is a watch with a deadline ([`DEADLINE`]) that
//!   fails the test with what it was waiting for and what it saw last.
//! - Each [`Env`] has a namespace of its own, deleted when the test ends (also when it
//!   panics), after Lockstep's finalizers on the kinds it tracks are stripped so that
//!   nothing keeps the namespace terminating.

#![allow(dead_code)] // Each test module uses its own part of the support.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams,
    PostParams,
};
use kube::client::{Body, ClientBuilder};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{Condition, await_condition, conditions};
use kube::runtime::watcher;
use kube::{Api, Client, CustomResourceExt, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use lockstep::driver::{self, Operator};

/// How long any single wait may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(90);

/// The field manager tests apply with (distinct from the operator's `lockstep`).
pub const TEST_MANAGER: &str = "lockstep-e2e";

/// The kubeconfig of the control plane: `$KUBECONFIG`, else `target/cluster/kubeconfig`.
pub fn kubeconfig_path() -> PathBuf {
    match std::env::var_os("KUBECONFIG") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("target/cluster/kubeconfig"),
    }
}

fn no_cluster(why: impl std::fmt::Display) -> ! {
    panic!(
        "no control plane for the e2e tests: {why}\n\
         start one with `make -f tools/cluster/cluster.mk cluster-up` \
         (or point KUBECONFIG at a running cluster)"
    )
}

/// The client configuration for the control plane. Fails the test if there is none.
pub async fn kube_config() -> kube::Config {
    let path = kubeconfig_path();
    if !path.exists() {
        no_cluster(format!("{} does not exist", path.display()));
    }
    let kubeconfig = Kubeconfig::read_from(&path)
        .unwrap_or_else(|e| no_cluster(format!("cannot read {}: {e}", path.display())));
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| no_cluster(format!("cannot use {}: {e}", path.display())))
}

/// Fail the test unless the API server answers within a few seconds.
async fn ensure_reachable(client: &Client) {
    match tokio::time::timeout(Duration::from_secs(10), client.apiserver_version()).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => no_cluster(format!(
            "the API server at {} refused: {e}",
            kubeconfig_path().display()
        )),
        Err(_) => no_cluster(format!(
            "the API server of {} did not answer within 10s",
            kubeconfig_path().display()
        )),
    }
}

/// A client for the control plane. Fails the test if none is reachable.
pub async fn client() -> Client {
    let client = Client::try_from(kube_config().await).unwrap_or_else(|e| no_cluster(e));
    ensure_reachable(&client).await;
    client
}

/// One request a client made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The HTTP method.
    pub method: http::Method,
    /// The path, without the query.
    pub path: String,
    /// The query string (empty when none).
    pub query: String,
}

impl Request {
    /// Anything but a GET changes the cluster.
    pub fn is_mutating(&self) -> bool {
        self.method != http::Method::GET
    }

    /// A long-running watch (the reflectors' own traffic).
    pub fn is_watch(&self) -> bool {
        self.query.split('&').any(|kv| kv == "watch=true")
    }

    /// A write to the status subresource.
    pub fn is_status_write(&self) -> bool {
        self.is_mutating() && self.path.ends_with("/status")
    }
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.method, self.path)?;
        if !self.query.is_empty() {
            write!(f, "?{}", self.query)?;
        }
        Ok(())
    }
}

/// Every request made through a [`counted_client`], in order.
#[derive(Debug, Clone, Default)]
pub struct RequestLog(Arc<Mutex<Vec<Request>>>);

impl RequestLog {
    fn record(&self, request: &http::Request<Body>) {
        let uri = request.uri();
        let entry = Request {
            method: request.method().clone(),
            path: uri.path().to_owned(),
            query: uri.query().unwrap_or_default().to_owned(),
        };
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(entry);
    }

    /// A mark to count from: the number of requests so far.
    pub fn mark(&self) -> usize {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// The requests made since `mark`.
    pub fn since(&self, mark: usize) -> Vec<Request> {
        let log = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        log.get(mark..).map(<[Request]>::to_vec).unwrap_or_default()
    }
}

/// A client whose every request is recorded in `log` (a tower layer around the kube
/// client's HTTP service).
pub async fn counted_client(log: &RequestLog) -> Client {
    let log = log.clone();
    let counting = tower::util::MapRequestLayer::new(move |request: http::Request<Body>| {
        log.record(&request);
        request
    });
    let client = ClientBuilder::try_from(kube_config().await)
        .unwrap_or_else(|e| no_cluster(e))
        .with_layer(&counting)
        .build();
    ensure_reachable(&client).await;
    client
}

/// Wait, through a watch, until the object `name` satisfies `condition`; fail the test
/// after [`DEADLINE`] with `what` and the object as last seen. Returns the object (`None`
/// when the condition was met by its absence).
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    condition: impl Condition<K>,
) -> Option<K>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + 'static,
{
    match tokio::time::timeout(DEADLINE, await_condition(api.clone(), name, condition)).await {
        Ok(Ok(object)) => object,
        Ok(Err(e)) => panic!("the watch failed while waiting for {what} ({name}): {e}"),
        Err(_) => {
            let last = api.get_opt(name).await;
            panic!("timed out after {DEADLINE:?} waiting for {what} ({name}); last seen: {last:#?}")
        }
    }
}

/// Wait until the object `name` with `uid` is gone.
pub async fn wait_gone<K>(api: &Api<K>, name: &str, uid: &str, what: &str)
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + 'static,
{
    wait_for(api, name, what, conditions::is_deleted(uid)).await;
}

/// Wait until the objects `api` lists with `selector` satisfy `condition` as a set.
/// Returns them.
pub async fn wait_for_all<K>(
    api: &Api<K>,
    selector: &str,
    what: &str,
    condition: impl Fn(&[K]) -> bool,
) -> Vec<K>
where
    K: Resource + Clone + Debug + DeserializeOwned + serde::Serialize + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    wait_for_all_within(api, selector, what, DEADLINE, condition).await
}

/// [`wait_for_all`] with a deadline of its own (real pods take longer than KWOK's).
pub async fn wait_for_all_within<K>(
    api: &Api<K>,
    selector: &str,
    what: &str,
    deadline: Duration,
    condition: impl Fn(&[K]) -> bool,
) -> Vec<K>
where
    K: Resource + Clone + Debug + DeserializeOwned + serde::Serialize + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, writer) = kube::runtime::reflector::store::<K>();
    let stream = kube::runtime::reflector(
        writer,
        watcher(api.clone(), watcher::Config::default().labels(selector)),
    );
    let mut stream = std::pin::pin!(stream);
    let waited = tokio::time::timeout(deadline, async {
        let mut listed = false;
        while let Some(event) = stream.next().await {
            match event {
                Err(e) => panic!("the watch failed while waiting for {what}: {e}"),
                Ok(watcher::Event::InitDone) => listed = true,
                Ok(_) => {}
            }
            if listed {
                let objects: Vec<K> = reader.state().iter().map(|o| (**o).clone()).collect();
                if condition(&objects) {
                    return objects;
                }
            }
        }
        panic!("the watch ended while waiting for {what}")
    })
    .await;
    match waited {
        Ok(objects) => objects,
        Err(_) => {
            let last: Vec<String> = reader
                .state()
                .iter()
                .map(|o| {
                    format!(
                        "{}: {:?}",
                        o.name_any(),
                        serde_json::to_value(&**o)
                            .ok()
                            .and_then(|v| v.get("status").cloned())
                    )
                })
                .collect();
            panic!(
                "timed out after {deadline:?} waiting for {what} ({selector}); last seen: {last:#?}"
            )
        }
    }
}

/// Apply (server-side) a CRD and wait until it is Established.
pub async fn install_crd(client: &Client, crd: &CustomResourceDefinition) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.name_any();
    let mut crd = crd.clone();
    crd.metadata.managed_fields = None;
    crd.metadata.resource_version = None;
    api.patch(
        &name,
        &PatchParams::apply(TEST_MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap_or_else(|e| panic!("cannot install the CRD {name}: {e}"));
    wait_for(
        &api,
        &name,
        "the CRD to be Established",
        conditions::is_crd_established(),
    )
    .await;
}

/// Install the CRD of a Rust custom resource type.
pub async fn install_crd_of<K: CustomResourceExt>(client: &Client) {
    install_crd(client, &lockstep::driver::crd::<K>()).await;
}

/// Install every CRD in `crds/*.yaml` (as `lockstep crds` writes them).
pub async fn install_crds_from_dir(client: &Client) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        let crd: CustomResourceDefinition = serde_yaml::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not a CRD: {e}", file.display()));
        install_crd(client, &crd).await;
    }
}

/// The namespace label under which the API server admits only pods that meet the
/// `restricted` Pod Security Standard, and refuses any other naming the field: the
/// real-node tier's namespaces carry it, so a pod the operator renders (or a test
/// creates) that is not `restricted` fails the test with the API server's own message.
pub const RESTRICTED: (&str, &str) = ("pod-security.kubernetes.io/enforce", "restricted");

/// `pod` made `restricted` as the operator's own pods are
/// ([`lockstep::machines::common::security::restrict`]), running as `uid`: what every
/// pod a test creates in a [`RESTRICTED`] namespace goes through.
pub fn restricted(mut pod: Pod, uid: i64) -> Pod {
    if let Some(spec) = pod.spec.as_mut() {
        lockstep::machines::common::security::restrict(spec, uid);
    }
    pod
}

/// A namespace of one test. Deleted by [`TestNamespace::delete`], or when dropped.
pub struct TestNamespace {
    /// The namespace's name (generated, unique).
    pub name: String,
    client: Client,
    tracked: Vec<ApiResource>,
    deleted: bool,
}

impl TestNamespace {
    /// Create a namespace named `<prefix>-<random>`, labelled `lockstep.dev/e2e=true` and
    /// [`RESTRICTED`]: every pod the operator's objects make there (a StatefulSet's, a
    /// Job's) must meet the `restricted` Pod Security Standard, or the API server
    /// refuses it and the test fails.
    pub async fn create(client: &Client, prefix: &str) -> Self {
        Self::create_labelled(client, prefix, &[]).await
    }

    /// [`TestNamespace::create`] with more labels (e.g. `lockstep.dev/real-node=true`,
    /// which puts its pods on the real node).
    pub async fn create_labelled(client: &Client, prefix: &str, extra: &[(&str, &str)]) -> Self {
        let api: Api<Namespace> = Api::all(client.clone());
        let mut labels: BTreeMap<String, String> = [
            ("lockstep.dev/e2e".to_owned(), "true".to_owned()),
            (RESTRICTED.0.to_owned(), RESTRICTED.1.to_owned()),
        ]
        .into();
        labels.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let namespace = Namespace {
            metadata: ObjectMeta {
                generate_name: Some(format!("{prefix}-")),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let created = api
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|e| panic!("cannot create a test namespace: {e}"));
        let name = created.name_any();
        // Namespaced objects can be created once the namespace's default ServiceAccount
        // exists (pods need it).
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client.clone(), &name);
        wait_for(
            &accounts,
            "default",
            "the namespace's default ServiceAccount",
            conditions::is_created(),
        )
        .await;
        Self {
            name,
            client: client.clone(),
            tracked: Vec::new(),
            deleted: false,
        }
    }

    /// Strip Lockstep finalizers from objects of kind `K` in this namespace before it is
    /// deleted (an operator stopped mid-test would otherwise keep it terminating).
    pub fn track<K: Resource<DynamicType = ()>>(&mut self) {
        self.tracked.push(ApiResource::erase::<K>(&()));
    }

    /// Delete the namespace now (without waiting for it to be gone).
    pub async fn delete(mut self) {
        self.deleted = true;
        cleanup(&self.client, &self.name, &self.tracked).await;
    }
}

async fn cleanup(client: &Client, namespace: &str, tracked: &[ApiResource]) {
    for resource in tracked {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
        let Ok(list) = api.list(&ListParams::default()).await else {
            continue;
        };
        for object in list {
            let kept: Vec<&String> = object
                .finalizers()
                .iter()
                .filter(|f| !f.starts_with("lockstep.dev/"))
                .collect();
            if kept.len() != object.finalizers().len() {
                let patch = serde_json::json!({"metadata": {"finalizers": kept}});
                let _ = api
                    .patch(
                        &object.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await;
            }
        }
    }
    let api: Api<Namespace> = Api::all(client.clone());
    if let Err(e) = api.delete(namespace, &DeleteParams::background()).await {
        eprintln!("could not delete the test namespace {namespace}: {e}");
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if self.deleted {
            return;
        }
        // Drop cannot await, and the test's runtime may be shutting down: clean up on a
        // thread with a runtime (and client) of its own.
        let (name, tracked) = (self.name.clone(), std::mem::take(&mut self.tracked));
        let cleaned = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                let Ok(client) = Client::try_from(kube_config().await) else {
                    return;
                };
                cleanup(&client, &name, &tracked).await;
            });
        })
        .join();
        if cleaned.is_err() {
            eprintln!("could not delete the test namespace {}", self.name);
        }
    }
}

/// A test's world: a client and a namespace of its own.
pub struct Env {
    /// A client that is not counted.
    pub client: Client,
    /// The test's namespace.
    pub ns: TestNamespace,
}

/// Send `tracing` output to the test's captured output, filtered by `RUST_LOG`
/// (nothing when unset).
pub fn init_tracing() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("RUST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
        }
    });
}

impl Env {
    /// Connect (failing the test if there is no control plane) and create a namespace
    /// `<prefix>-<random>`.
    pub async fn new(prefix: &str) -> Self {
        Self::labelled(prefix, &[]).await
    }

    /// [`Env::new`] with more namespace labels.
    pub async fn labelled(prefix: &str, extra: &[(&str, &str)]) -> Self {
        init_tracing();
        let client = client().await;
        let ns = TestNamespace::create_labelled(&client, prefix, extra).await;
        Self { client, ns }
    }

    /// The test namespace's name.
    pub fn namespace(&self) -> &str {
        &self.ns.name
    }

    /// An `Api` of `K` in the test namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        Api::namespaced(self.client.clone(), &self.ns.name)
    }

    /// Delete the namespace (also done on drop; this one reports nothing and waits for
    /// the delete request only).
    pub async fn finish(self) {
        self.ns.delete().await;
    }
}

/// An operator running in this test process, on a task of the test's runtime.
pub struct InProcessOperator {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl InProcessOperator {
    /// Start `driver::run::<O>` with `config` (a graceful-shutdown signal is added).
    pub fn start<O: Operator>(client: Client, config: driver::Config) -> Self
    where
        O::Resource: Send + Sync,
    {
        let (stop, stopped) = oneshot::channel::<()>();
        let config = config.shutdown_on(async move {
            let _ = stopped.await;
        });
        let task = tokio::spawn(driver::run::<O>(client, config));
        Self {
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Shut down gracefully (running reconciles finish) and wait for it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            match tokio::time::timeout(DEADLINE, task).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => panic!("the operator task failed: {e}"),
                Err(_) => panic!("the operator did not shut down within {DEADLINE:?}"),
            }
        }
    }
}

impl Drop for InProcessOperator {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The real `lockstep` binary, started as a child process (for crash and restart tests:
/// [`OperatorProcess::kill9`]). Killed when dropped.
pub struct OperatorProcess {
    child: Option<Child>,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
}

impl OperatorProcess {
    /// The path of the binary cargo built for this test run.
    pub fn binary() -> &'static str {
        env!("CARGO_BIN_EXE_lockstep")
    }

    /// Start `lockstep <args>` with `KUBECONFIG` set to the test cluster's; its output
    /// goes to `target/e2e-logs/<log_name>.log`.
    pub fn spawn(args: &[&str], log_name: &str) -> Self {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/e2e-logs");
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let log = dir.join(format!("{log_name}.log"));
        let out = std::fs::File::create(&log)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
        let err = out
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot share {}: {e}", log.display()));
        let child = Command::new(Self::binary())
            .args(args)
            .env("KUBECONFIG", kubeconfig_path())
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_owned()),
            )
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", Self::binary()));
        Self {
            child: Some(child),
            log,
        }
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kill it with SIGKILL (no graceful shutdown) and reap it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Wait for it to exit by itself, at most [`DEADLINE`].
    pub async fn wait(&mut self) -> ExitStatus {
        let Some(mut child) = self.child.take() else {
            panic!("lockstep was already reaped");
        };
        let pid = child.id();
        let waited = tokio::task::spawn_blocking(move || child.wait());
        match tokio::time::timeout(DEADLINE, waited).await {
            Ok(Ok(Ok(status))) => status,
            Ok(Ok(Err(e))) => panic!("cannot wait for lockstep: {e}"),
            Ok(Err(e)) => panic!("cannot wait for lockstep: {e}"),
            Err(_) => {
                // The child moved to the waiting thread: kill it by pid.
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                panic!(
                    "lockstep did not exit within {DEADLINE:?}; see {}",
                    self.log.display()
                )
            }
        }
    }

    /// Its output so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Events recorded about an object (events.k8s.io), oldest first.
pub async fn events_about(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), namespace);
    let mut events: Vec<_> = api
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("cannot list events: {e}"))
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect();
    events.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    events
}

/// Merge the JSON object `extra` into `base`, key by key (a JSON merge patch without
/// deletions): how tests vary a base spec.
/// A DistributedDB at rest for its current generation: phase `Ready`, condition
/// `Ready` True.
pub(crate) fn at_rest(db: &lockstep::machines::distributeddb::DistributedDB) -> bool {
    use lockstep::engine::conditions;
    let Some(status) = &db.status else {
        return false;
    };
    status.engine.phase.as_deref() == Some("Ready")
        && status.engine.observed_generation == db.metadata.generation
        && status
            .engine
            .condition(conditions::READY)
            .is_some_and(|c| c.status == conditions::status::TRUE)
}

pub fn merge_json(base: &mut serde_json::Value, extra: serde_json::Value) {
    match (base, extra) {
        (serde_json::Value::Object(b), serde_json::Value::Object(e)) => {
            for (k, v) in e {
                merge_json(b.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (b, e) => *b = e,
    }
}

/// What every machine's tests start from: a namespace with the machine's CRD installed
/// and an S3 credentials Secret `s3`, its custom resources' API, and the operator `O` to
/// run in-process against the namespace. Each machine's tests add their own waits in an
/// `impl Fixture<TheirMachine>`.
pub struct Fixture<O: Operator> {
    /// The test's world.
    pub env: Env,
    /// The custom resource in the test namespace.
    pub api: Api<O::Resource>,
    operator: std::marker::PhantomData<O>,
}

impl<O> Fixture<O>
where
    O: Operator,
    O::Resource: CustomResourceExt,
{
    /// A namespace `<prefix>-<random>` with the CRD installed and the S3 credentials
    /// Secret.
    pub async fn new(prefix: &str) -> Self {
        Self::in_env(Env::new(prefix).await).await
    }

    /// [`Fixture::new`] in an [`Env`] made by the caller.
    pub async fn in_env(env: Env) -> Self {
        install_crd_of::<O::Resource>(&env.client).await;
        Self::with_installed_crd(env).await
    }

    /// [`Fixture::in_env`] where the CRD is someone else's to install (a Helm chart's):
    /// nothing is applied to it.
    pub async fn with_installed_crd(mut env: Env) -> Self {
        env.ns.track::<O::Resource>();
        let secret: k8s_openapi::api::core::v1::Secret =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "s3"},
                "stringData": {"accessKey": "e2e-access", "secretKey": "e2e-secret"}
            }))
            .expect("a Secret");
        env.api::<k8s_openapi::api::core::v1::Secret>()
            .create(&PostParams::default(), &secret)
            .await
            .expect("create the S3 credentials Secret");
        let api = env.api();
        Self {
            env,
            api,
            operator: std::marker::PhantomData,
        }
    }

    /// Start the operator in this process, watching the test namespace.
    pub fn operator(&self) -> InProcessOperator {
        InProcessOperator::start::<O>(
            self.env.client.clone(),
            driver::Config::namespaced(self.env.namespace()),
        )
    }

    /// Create `object`.
    pub async fn create_object(&self, object: &O::Resource) -> O::Resource {
        self.api
            .create(&PostParams::default(), object)
            .await
            .unwrap_or_else(|e| panic!("create {}: {e}", object.name_any()))
    }

    /// Merge-patch the object `name`.
    pub async fn merge_patch(&self, name: &str, patch: serde_json::Value) {
        self.api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("patch {name} with {patch}: {e}"));
    }

    /// Wait (on a watch, with the deadline) until the object `name` exists and
    /// `condition` holds; `what` says what for, in the failure.
    pub async fn until(
        &self,
        name: &str,
        what: &str,
        condition: impl Fn(&O::Resource) -> bool + Send + 'static,
    ) -> O::Resource {
        wait_for(
            &self.api,
            name,
            what,
            move |object: Option<&O::Resource>| object.is_some_and(&condition),
        )
        .await
        .expect("the object exists")
    }
}

/// Reconciles started, finished, and finished idle (nothing written, nothing done), as
/// the driver's hooks report them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReconcileCounts {
    /// Reconciles started.
    pub started: u64,
    /// Reconciles finished.
    pub finished: u64,
    /// Reconciles finished idle.
    pub idle: u64,
}

/// Driver hooks that count reconciles into a watch channel.
pub struct ReconcileProbe(pub tokio::sync::watch::Sender<ReconcileCounts>);

impl driver::DriverHooks for ReconcileProbe {
    fn reconcile_started(&self, _: &driver::Target<'_>) {
        self.0.send_modify(|c| c.started += 1);
    }

    fn reconcile_finished(&self, _: &driver::Target<'_>, _: Duration, finished: driver::Finished) {
        self.0.send_modify(|c| {
            c.finished += 1;
            if finished == driver::Finished::Idle {
                c.idle += 1;
            }
        });
    }
}

/// Wait (with the deadline) until the reconcile counts satisfy `condition`.
pub async fn counts_until(
    counts: &mut tokio::sync::watch::Receiver<ReconcileCounts>,
    what: &str,
    condition: impl FnMut(&ReconcileCounts) -> bool,
) -> ReconcileCounts {
    let waited = match tokio::time::timeout(DEADLINE, counts.wait_for(condition)).await {
        Ok(Ok(c)) => Some(*c),
        Ok(Err(_)) => panic!("the operator stopped while waiting for {what}"),
        Err(_) => None,
    };
    waited.unwrap_or_else(|| {
        panic!(
            "timed out after {DEADLINE:?} waiting for {what}: {:?}",
            *counts.borrow()
        )
    })
}

/// The pods' side of the primary Lease, as their agents would play it (KWOK runs no
/// containers, so no agent): every second, a Lease whose holder pod exists with that
/// UID, is not terminating and is labelled `primary` is renewed (`renewTime` now, the
/// `L` it names kept); one whose holder is labelled `demoted` is released as a clean
/// stop does (`released-by`, a `released-lsn`, no holder). A holder labelled `primary`
/// also reports itself promoted under the Lease's term, as its manager would once its
/// server is writable (the pod condition `lockstep.dev/Server`). A holder whose pod is
/// gone or terminating renews nothing, as a dead server does. Without it the operator
/// counts a primary that never renews as hung (`PrimaryNotRenewing`) and a planned
/// switchover waits for a release that never comes. The real agent is tested in
/// `postgres_real.rs` and `tests/pg_scripts/`. Used by the KWOK tier's PostgresCluster
/// tests (`postgres.rs`, `operability.rs`).
pub struct LeaseAgents(JoinHandle<()>);

impl LeaseAgents {
    /// Play the agents of every PostgreSQL pod in `env`'s namespace until dropped.
    pub fn start(env: &Env) -> Self {
        let leases: Api<Lease> = env.api();
        let pods: Api<Pod> = env.api();
        LeaseAgents(tokio::spawn(async move {
            loop {
                if let Ok(list) = leases.list(&Default::default()).await {
                    for lease in list {
                        agent_step(&leases, &pods, &lease).await;
                    }
                }
                // The agents' period R (2 s in the pods), halved.
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }))
    }
}

impl Drop for LeaseAgents {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The holder `p` reports a writable server holding `lease`'s term, unless it already
/// does (its manager writes the condition only when it changes).
async fn report_promoted(pods: &Api<Pod>, p: &Pod, lease: &Lease) {
    let term = lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0);
    let message = format!("a primary on timeline 1, holding Lease term {term}");
    let said = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "lockstep.dev/Server"))
        .and_then(|c| c.message.clone());
    if said.as_deref() == Some(message.as_str()) {
        return;
    }
    let condition = serde_json::json!({"status": {"conditions": [{
        "type": "lockstep.dev/Server", "status": "True", "reason": "Primary",
        "message": message,
    }]}});
    let _ = pods
        .patch_status(
            &p.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(condition),
        )
        .await;
}

/// One look of the holder's agent at `lease` (see [`LeaseAgents`]).
async fn agent_step(leases: &Api<Lease>, pods: &Api<Pod>, lease: &Lease) {
    let Some(holder) = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .filter(|h| !h.is_empty())
    else {
        return;
    };
    let Some((pod, uid)) = holder.split_once('/') else {
        return;
    };
    let Ok(p) = pods.get(pod).await else {
        return;
    };
    if p.metadata.uid.as_deref() != Some(uid) || p.metadata.deletion_timestamp.is_some() {
        return;
    }
    let now = chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    let role = p.labels().get("lockstep.dev/role").map(String::as_str);
    if role == Some("primary") {
        report_promoted(pods, &p, lease).await;
    }
    let patch = match role {
        Some("primary") => serde_json::json!({"spec": {"renewTime": now}}),
        Some("demoted") => serde_json::json!({
            "metadata": {"annotations": {
                "lockstep.dev/released-by": holder,
                "lockstep.dev/released-lsn": "0/0",
            }},
            "spec": {"holderIdentity": null},
        }),
        _ => return,
    };
    // Preconditioned on the Lease as read, as the agent's PUT is: a hand-over in
    // between wins, and the next look sees it.
    let mut patch = patch;
    patch["metadata"]["resourceVersion"] = serde_json::json!(lease.resource_version());
    let _ = leases
        .patch(
            &lease.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await;
}
