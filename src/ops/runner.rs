//! `lockstep run`: the machine registry and the lifecycle of the operator process.
//!
//! ```text
//!  start ─► serve /healthz /readyz /metrics ─► [elect] ─► run the selected controllers
//!                                                             │
//!  SIGTERM/SIGINT ─► controllers finish in-flight reconciles ─► release lease ─► exit 0
//! ```
//!
//! # Guarantees
//! - Without leader election the controllers start at once; with it they run only while
//!   the lease is held (see [`super::leader`]).
//! - A second signal while draining exits at once (the caller's choice; see
//!   [`shutdown_on_signals`]).
//! - With a list of namespaces, each selected machine runs one controller per namespace
//!   (each with its own namespaced watches); the process is ready once all of them have
//!   listed their custom resources.
//!
//! # Adding a machine
//! One line in [`MACHINES`] and one arm in [`run_machine`].

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kube::Client;
use tokio_util::sync::CancellationToken;

use super::Error;
use super::health::{self, Status};
use super::hooks::MetricsHooks;
use super::leader::{self, LeaseConfig};
use super::metrics::Metrics;
use crate::driver::{self, Authority, Operator};
use crate::machines::distributeddb::DistributedDb;
use crate::machines::postgres::Postgres;

/// Every machine `lockstep run` knows, by its command-line name.
pub const MACHINES: &[&str] = &["distributeddb", "postgrescluster"];

/// What `lockstep run` was asked to do.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The machines to run (names from [`MACHINES`]).
    pub machines: Vec<&'static str>,
    /// Watch these namespaces, or the whole cluster when empty ([`select_namespaces`]).
    pub namespaces: Vec<String>,
    /// Where the health server listens.
    pub metrics_addr: SocketAddr,
    /// Leader election, or `None` to run the controllers unconditionally.
    pub election: Option<LeaseConfig>,
    /// Reconcile every object this often even without a change (`None`: never). An
    /// idle reconcile makes no request, so this costs CPU only.
    pub resync: Option<std::time::Duration>,
    /// How long an object's triggers must be quiet before it is reconciled
    /// ([`driver::config::Config::debounce`]).
    pub debounce: std::time::Duration,
}

/// Everything a machine's controller is given.
#[derive(Clone)]
pub struct MachineContext {
    /// The API client.
    pub client: Client,
    /// Watch one namespace, or the whole cluster.
    pub namespace: Option<String>,
    /// The process's metrics.
    pub metrics: Metrics,
    /// Called once by each machine when its custom resources have been listed.
    pub synced: Arc<dyn Fn() + Send + Sync>,
    /// Whether this process may act (the lease's validity under leader election).
    pub authority: Authority,
    /// The periodic resync ([`RunOptions::resync`]).
    pub resync: Option<std::time::Duration>,
    /// The debounce ([`RunOptions::debounce`]).
    pub debounce: std::time::Duration,
}

impl std::fmt::Debug for MachineContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MachineContext")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// A running controller: resolves when it has drained after its token was cancelled,
/// or fails.
pub type Controller = Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;

/// Parse `--machines`: names from [`MACHINES`], comma-separated, or every machine when
/// empty. Duplicates are ignored.
///
/// # Errors
/// [`Error::UnknownMachine`] for a name that is not in [`MACHINES`].
pub fn select_machines(names: &[String]) -> Result<Vec<&'static str>, Error> {
    if names.is_empty() {
        return Ok(MACHINES.to_vec());
    }
    let mut out: Vec<&'static str> = Vec::new();
    for name in names.iter().flat_map(|n| n.split(',')).map(str::trim) {
        if name.is_empty() {
            continue;
        }
        let known = MACHINES
            .iter()
            .find(|m| m.eq_ignore_ascii_case(name))
            .ok_or_else(|| Error::UnknownMachine {
                name: name.to_owned(),
                known: MACHINES.join(","),
            })?;
        if !out.contains(known) {
            out.push(known);
        }
    }
    Ok(out)
}

/// Parse `--namespace`: namespaces, comma-separated (the entries may themselves hold
/// commas), trimmed, empty entries and duplicates dropped, in their first order. None
/// at all means the whole cluster.
pub fn select_namespaces(names: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in names.iter().flat_map(|n| n.split(',')).map(str::trim) {
        if !name.is_empty() && !out.iter().any(|n| n == name) {
            out.push(name.to_owned());
        }
    }
    out
}

/// The watch scope of each controller of one machine: one per namespace, or a single
/// cluster-wide one (`None`) when `namespaces` is empty.
pub fn scopes(namespaces: &[String]) -> Vec<Option<String>> {
    if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().cloned().map(Some).collect()
    }
}

/// Start the controller of machine `name`, draining when `drain` is cancelled.
///
/// # Errors
/// [`Error::UnknownMachine`] for a name that is not in [`MACHINES`].
pub fn run_machine(
    name: &str,
    context: &MachineContext,
    drain: CancellationToken,
) -> Result<Controller, Error> {
    match name {
        "distributeddb" => Ok(drive::<DistributedDb>(context, drain)),
        "postgrescluster" => Ok(drive::<Postgres>(context, drain)),
        other => Err(Error::UnknownMachine {
            name: other.to_owned(),
            known: MACHINES.join(","),
        }),
    }
}

/// The controller of operator `O`: the driver, fed into the metrics by
/// [`MetricsHooks`] (reconciles, and the per-object series from the driver's own watch
/// of the resources). It drains when `drain` is cancelled.
pub fn drive<O: Operator>(context: &MachineContext, drain: CancellationToken) -> Controller {
    let config = match &context.namespace {
        Some(ns) => driver::config::Config::namespaced(ns),
        None => driver::config::Config::cluster_wide(),
    };
    let hooks =
        MetricsHooks::new(context.metrics.clone()).with_objects(O::NAME, context.synced.clone());
    let config = match context.resync {
        Some(period) => config.resync_every(period),
        None => config,
    }
    .hooks(hooks)
    .debounce(context.debounce)
    .authority(context.authority.clone())
    .shutdown_on(drain.cancelled_owned());
    let client = context.client.clone();
    Box::pin(async move {
        driver::controller::run::<O>(client, config).await;
        Ok(())
    })
}

/// Run the operator until `shutdown` is cancelled, then drain and return.
///
/// # Errors
/// Any [`Error`] that stops the process: the health address cannot be bound, the lease
/// cannot be used, or a controller fails.
pub async fn run(
    client: Client,
    options: RunOptions,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let metrics = Metrics::new();
    let status = Status::new(options.election.is_some());
    let watch_scopes = scopes(&options.namespaces);
    let context = MachineContext {
        client: client.clone(),
        namespace: None,
        metrics: metrics.clone(),
        synced: Arc::new(|| {}),
        authority: options
            .election
            .as_ref()
            .map_or_else(Authority::unconditional, LeaseConfig::authority),
        resync: options.resync,
        debounce: options.debounce,
    };
    // Fail before anything else when a selected machine cannot run.
    for name in &options.machines {
        let probe = CancellationToken::new();
        probe.cancel();
        drop(run_machine(name, &context, probe)?);
    }

    let listener = health::bind(options.metrics_addr).await?;
    let bound = listener.local_addr().map_err(Error::Serve)?;
    tracing::info!(addr = %bound, "serving /healthz /readyz /metrics");
    let server_stop = CancellationToken::new();
    let server = tokio::spawn(health::serve(
        listener,
        status.clone(),
        metrics.clone(),
        server_stop.clone(),
    ));
    tokio::spawn(super::memory::give_back_periodically(server_stop.clone()));

    let authority = context.authority.clone();
    let machines = options.machines.clone();
    let work_status = status.clone();
    let work: leader::Work = Box::new(move |drain: CancellationToken| {
        // Ready once every controller's custom resources have been listed, this term.
        let listed = Arc::new(AtomicUsize::new(0));
        let (count, synced_status) = (machines.len() * watch_scopes.len(), work_status.clone());
        let context = MachineContext {
            synced: Arc::new(move || {
                if listed.fetch_add(1, Ordering::SeqCst) + 1 >= count {
                    synced_status.set_synced(true);
                }
            }),
            ..context.clone()
        };
        let started: Result<Vec<Controller>, Error> = machines
            .iter()
            .flat_map(|name| watch_scopes.iter().map(move |scope| (name, scope)))
            .map(|(name, scope)| {
                let context = MachineContext {
                    namespace: scope.clone(),
                    ..context.clone()
                };
                run_machine(name, &context, drain.clone())
            })
            .collect();
        let status = work_status.clone();
        Box::pin(async move {
            let controllers = started?;
            tracing::info!(machines = controllers.len(), "controllers starting");
            let result = futures::future::try_join_all(controllers).await.map(drop);
            status.set_synced(false);
            result
        })
    });

    let result = match options.election {
        Some(config) => {
            tracing::info!(
                identity = %config.identity,
                lease = %format!("{}/{}", config.namespace, config.name),
                duration_secs = config.duration_secs,
                "leader election on"
            );
            leader::lead(client, config, authority, status, metrics, shutdown, work).await
        }
        None => {
            tracing::info!("leader election off: running the controllers");
            status.set_leader(true);
            metrics.set_leader(true);
            let mut work = work;
            work(shutdown).await
        }
    };
    server_stop.cancel();
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::warn!(%error, "health server failed"),
        Err(error) => tracing::warn!(%error, "health server task failed"),
    }
    result
}

/// Cancel `shutdown` on the first SIGTERM or SIGINT; call `second` on the next one.
///
/// # Errors
/// [`Error::Signal`] if the handlers cannot be installed.
pub fn shutdown_on_signals(
    shutdown: CancellationToken,
    second: impl FnOnce() + Send + 'static,
) -> Result<(), Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(Error::Signal)?;
    let mut int = signal(SignalKind::interrupt()).map_err(Error::Signal)?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: draining in-flight reconciles"),
            _ = int.recv() => tracing::info!("SIGINT: draining in-flight reconciles"),
        }
        shutdown.cancel();
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::warn!("second signal: exiting without draining");
        second();
    });
    Ok(())
}

/// This process's identity for the lease: `POD_NAME` in a cluster, else
/// `hostname-pid` (unique among processes on one host).
pub fn default_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "lockstep".to_owned());
    format!("{host}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selects_machines() {
        assert_eq!(select_machines(&[]).expect("all"), MACHINES.to_vec());
        assert_eq!(
            select_machines(&["DistributedDB,distributeddb".into()]).expect("one"),
            vec!["distributeddb"]
        );
        assert!(matches!(
            select_machines(&["mysql".into()]),
            Err(Error::UnknownMachine { .. })
        ));
    }

    #[test]
    fn a_namespace_list_is_split_on_commas_trimmed_and_deduplicated() {
        let given = ["prod, staging".to_owned(), "prod,,dev ".to_owned()];
        assert_eq!(select_namespaces(&given), ["prod", "staging", "dev"]);
        assert!(select_namespaces(&[]).is_empty());
        assert!(select_namespaces(&[" , ".into()]).is_empty());
    }

    #[test]
    fn each_listed_namespace_gets_a_controller_and_none_means_cluster_wide() {
        assert_eq!(scopes(&[]), [None]);
        assert_eq!(
            scopes(&["prod".into(), "dev".into()]),
            [Some("prod".to_owned()), Some("dev".to_owned())]
        );
    }

    #[test]
    fn identity_is_unique_per_process() {
        let id = default_identity();
        assert!(!id.is_empty());
        if std::env::var("POD_NAME").is_err() {
            assert!(id.ends_with(&format!("-{}", std::process::id())), "{id}");
        }
    }
}
