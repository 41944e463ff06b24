//! The `lockstep` command: run the operators, or generate their CRDs and tables.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use lockstep::machines::{Generated, crd_files, machine_files};
use lockstep::ops::leader::LeaseConfig;
use lockstep::ops::logging::{self, LogFormat};
use lockstep::ops::memory;
use lockstep::ops::narrate::{self, Target};
use lockstep::ops::runner::{self, RunOptions};
use tokio_util::sync::CancellationToken;

/// Lockstep: Kubernetes operators whose lifecycles are declared state machines.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// Log format.
    #[arg(
        long,
        global = true,
        env = "LOCKSTEP_LOG_FORMAT",
        value_enum,
        default_value_t
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write every kind's CustomResourceDefinition into a directory.
    Crds(GenerateArgs),
    /// Write every machine's transition table (YAML) and statechart (Markdown).
    Machines(GenerateArgs),
    /// Run the operators (the controllers of the selected machines).
    Run(RunArgs),
    /// Print one line per transition of one object as it happens, until it is deleted.
    Narrate(NarrateArgs),
    /// Run as PID 1 of a PostgreSQL container: the instance manager (the agent's machine,
    /// the fence, supervision of postgres, the Lease).
    Instance(Box<InstanceCmd>),
    /// Copy this binary into a directory (the init container of PostgreSQL pods, which
    /// then run `<dir>/lockstep instance`).
    InstallInstance(InstallArgs),
    /// The kubectl plugin's commands (`kubectl lockstep …` when this binary is installed
    /// as `kubectl-lockstep`): status, history, switchover, backup, restore, hibernate,
    /// rotate-password, retry, skip-final-backup, psql.
    Kubectl(KubectlArgs),
}

/// `kubectl lockstep …`: the kubectl plugin, run when this binary is called
/// `kubectl-lockstep` (`ln -s "$(command -v lockstep)" ~/bin/kubectl-lockstep`).
#[derive(Debug, Parser)]
#[command(
    name = "kubectl lockstep",
    version,
    about = "Lockstep's kubectl plugin"
)]
struct PluginCli {
    #[command(flatten)]
    args: KubectlArgs,
}

#[derive(Debug, clap::Args)]
struct KubectlArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(flatten)]
    plugin: lockstep::ops::plugin::PluginArgs,
}

#[derive(Debug, clap::Args)]
struct InstallArgs {
    /// The directory (a volume shared with the PostgreSQL container).
    #[arg(long, default_value = "/lockstep/bin")]
    to: PathBuf,
}

#[derive(Debug, clap::Args)]
struct InstanceCmd {
    /// Run the liveness check instead (the container's probe): exit 0 alive, 1 dead.
    #[arg(long)]
    liveness: bool,
    #[command(flatten)]
    args: lockstep::instance::run::args::InstanceArgs,
}

/// Where to find the cluster.
#[derive(Debug, clap::Args)]
struct ClusterArgs {
    /// A kubeconfig file; by default `KUBECONFIG` (one or more files), `~/.kube/config`,
    /// or the in-cluster ServiceAccount.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The machines to run, comma-separated (default: all).
    #[arg(long, value_delimiter = ',', env = "LOCKSTEP_MACHINES")]
    machines: Vec<String>,
    /// Watch only these namespaces, comma-separated (default: the whole cluster).
    #[arg(long, value_delimiter = ',', env = "LOCKSTEP_NAMESPACE")]
    namespace: Vec<String>,
    /// Run the controllers only while holding a coordination.k8s.io Lease.
    #[arg(long, env = "LOCKSTEP_LEADER_ELECTION")]
    leader_election: bool,
    /// The Lease's name.
    #[arg(long, default_value = "lockstep-leader", env = "LOCKSTEP_LEASE_NAME")]
    lease_name: String,
    /// The Lease's namespace (default: `POD_NAMESPACE`, else the kubeconfig's namespace).
    #[arg(long, env = "LOCKSTEP_LEASE_NAMESPACE")]
    lease_namespace: Option<String>,
    /// How long the lease stays valid without renewal, in seconds; a standby takes over
    /// within this long after the leader dies.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(2..))]
    lease_duration: u64,
    /// This process's identity in the Lease (default: `POD_NAME`, else hostname-pid).
    #[arg(long)]
    identity: Option<String>,
    /// Reconcile every object this often, in seconds, even when nothing changed (a
    /// safety net for missed events; an unchanged object costs no request). 0: never.
    #[arg(long, default_value_t = 600, env = "LOCKSTEP_RESYNC_PERIOD")]
    resync_period: u64,
    /// How long the changes of an object's owned objects must be quiet before they wake
    /// it, in milliseconds (at most three times as long): a burst of changes costs one
    /// reconcile, and a decision waits at most this long after the last change. The
    /// object's own changes, requeues and retries are not held. 0: at once.
    #[arg(long, default_value_t = 1000, env = "LOCKSTEP_DEBOUNCE_MS")]
    debounce_ms: u64,
    /// Threads that run the controllers. 0 (the default): the main thread alone. The
    /// work is mostly waiting on the API server, and one thread saves the cross-thread
    /// wake-ups that cost more CPU than they gain (docs/decisions/0004-wakeups.md).
    #[arg(long, default_value_t = 0, env = "LOCKSTEP_WORKER_THREADS")]
    worker_threads: usize,
    /// Where to serve /healthz, /readyz and /metrics.
    #[arg(long, default_value = "0.0.0.0:8080", env = "LOCKSTEP_METRICS_ADDR")]
    metrics_addr: std::net::SocketAddr,
    /// The image whose `/lockstep` the PostgreSQL pods' init container copies in: this
    /// operator's own image (set it to the same reference as the Deployment's).
    #[arg(
        long,
        env = "LOCKSTEP_INSTANCE_IMAGE",
        default_value = lockstep::machines::postgres::render::DEFAULT_INSTANCE_IMAGE
    )]
    instance_image: String,
    /// The namespace the operator runs in (the chart sets `POD_NAMESPACE` from the
    /// downward API): a PostgresCluster's NetworkPolicy lets its pods reach the instance
    /// managers' port. Unset (an operator outside the cluster): no namespace is let in.
    #[arg(long, env = "POD_NAMESPACE")]
    operator_namespace: Option<String>,
    /// The repository of a PostgresCluster's server image when its `spec.image` is
    /// unset: the image is `<repository>:<spec.version>`.
    #[arg(
        long,
        env = "LOCKSTEP_POSTGRES_IMAGE_REPOSITORY",
        default_value = lockstep::machines::postgres::actions::DEFAULT_POSTGRES_IMAGE_REPOSITORY
    )]
    postgres_image_repository: String,
}

#[derive(Debug, clap::Args)]
struct NarrateArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// `KIND/NAME`, for example `distributeddb/demo`.
    target: String,
    /// The object's namespace (default: the kubeconfig's namespace).
    #[arg(long, short = 'n')]
    namespace: Option<String>,
}

#[derive(Debug, clap::Args)]
struct GenerateArgs {
    /// Where to write.
    #[arg(long, default_value = ".")]
    out_dir: PathBuf,
    /// Write nothing; fail if any file on disk differs from what would be written.
    #[arg(long)]
    check: bool,
}

fn main() -> anyhow::Result<ExitCode> {
    let as_plugin = std::env::args_os()
        .next()
        .and_then(|a| {
            PathBuf::from(a)
                .file_name()
                .map(|n| n == "kubectl-lockstep")
        })
        .unwrap_or(false);
    if as_plugin {
        let cli = PluginCli::parse();
        return tokio_runtime()?.block_on(kubectl(cli.args));
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Crds(args) => generate(&args, with_kustomization(crd_files()?)),
        Command::Machines(args) => generate(&args, machine_files()?),
        Command::Run(args) => {
            memory::tune_allocator();
            logging::init(cli.log_format);
            operator_runtime(args.worker_threads)?.block_on(run(args))
        }
        Command::Narrate(args) => {
            logging::init(cli.log_format);
            tokio_runtime()?.block_on(narrate(args))
        }
        Command::Kubectl(args) => tokio_runtime()?.block_on(kubectl(args)),
        Command::InstallInstance(args) => {
            let path = lockstep::instance::run::install::install(&args.to)?;
            println!("installed {}", path.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Instance(cmd) => {
            if !cmd.liveness {
                logging::init(cli.log_format);
                // Before any thread exists: as PID 1, split into a reaper and the manager.
                if let Err(e) = lockstep::instance::run::init::become_init() {
                    tracing::warn!(error = %e, "orphans will not be reaped");
                }
            }
            tokio_runtime()?.block_on(instance(*cmd))
        }
    }
}

/// The operator's runtime: on the main thread alone for `threads` = 0, else on that
/// many worker threads.
fn operator_runtime(threads: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    match threads {
        0 => build_runtime(tokio::runtime::Builder::new_current_thread()),
        n => build_runtime({
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n);
            b
        }),
    }
}

fn tokio_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    build_runtime(tokio::runtime::Builder::new_multi_thread())
}

fn build_runtime(mut builder: tokio::runtime::Builder) -> anyhow::Result<tokio::runtime::Runtime> {
    builder
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// The client config: the named kubeconfig, or `Config::infer` (env, default file,
/// in-cluster).
async fn kube_config(args: &ClusterArgs) -> anyhow::Result<kube::Config> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|source| {
                lockstep::ops::Error::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                }
            })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|source| lockstep::ops::Error::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                })?
        }
        None => kube::Config::infer()
            .await
            .context("cannot configure a client from KUBECONFIG, ~/.kube/config or the in-cluster environment")?,
    };
    Ok(config)
}

async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    lockstep::machines::postgres::render::set_instance_image(args.instance_image.clone());
    lockstep::machines::postgres::render::set_operator_namespace(args.operator_namespace.clone());
    lockstep::machines::postgres::actions::set_postgres_image_repository(
        args.postgres_image_repository.clone(),
    );
    let machines = runner::select_machines(&args.machines)?;
    let config = kube_config(&args.cluster).await?;
    let default_namespace = config.default_namespace.clone();
    let client = kube::Client::try_from(config).map_err(lockstep::ops::Error::Config)?;
    let election = args.leader_election.then(|| LeaseConfig {
        name: args.lease_name.clone(),
        namespace: args
            .lease_namespace
            .clone()
            .or_else(|| {
                std::env::var("POD_NAMESPACE")
                    .ok()
                    .filter(|n| !n.is_empty())
            })
            .unwrap_or(default_namespace),
        identity: args
            .identity
            .clone()
            .unwrap_or_else(runner::default_identity),
        duration_secs: args.lease_duration,
    });
    let options = RunOptions {
        machines,
        namespaces: runner::select_namespaces(&args.namespace),
        metrics_addr: args.metrics_addr,
        election,
        resync: (args.resync_period > 0)
            .then(|| std::time::Duration::from_secs(args.resync_period)),
        debounce: std::time::Duration::from_millis(args.debounce_ms),
    };
    tracing::info!(
        machines = ?options.machines,
        namespaces = %if options.namespaces.is_empty() {
            "<all>".to_owned()
        } else {
            options.namespaces.join(",")
        },
        "lockstep run"
    );
    let shutdown = CancellationToken::new();
    runner::shutdown_on_signals(shutdown.clone(), || std::process::exit(130))?;
    runner::run(client, options, shutdown).await?;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

async fn instance(cmd: InstanceCmd) -> anyhow::Result<ExitCode> {
    use lockstep::instance::run::manager::{Manager, liveness};
    let status = if cmd.liveness {
        liveness(&cmd.args).await
    } else {
        match Manager::new(cmd.args).await {
            Ok(manager) => manager.run().await?,
            Err(e) => {
                // A container that cannot start at all says why, and exits 2 when the
                // cause is its configuration (what a person fixes), as the agent does.
                tracing::error!(error = %e, "cannot start");
                e.status()
            }
        }
    };
    Ok(ExitCode::from(u8::try_from(status).unwrap_or(1)))
}

async fn narrate(args: NarrateArgs) -> anyhow::Result<ExitCode> {
    let config = kube_config(&args.cluster).await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config).map_err(lockstep::ops::Error::Config)?;
    let target = Target::parse(&args.target, namespace)?;
    let mut out = std::io::stdout();
    narrate::narrate(client, &target, &mut out).await?;
    Ok(ExitCode::SUCCESS)
}

async fn kubectl(args: KubectlArgs) -> anyhow::Result<ExitCode> {
    let config = kube_config(&args.cluster).await?;
    let namespace = config.default_namespace.clone();
    let client = kube::Client::try_from(config).map_err(lockstep::ops::Error::Config)?;
    let mut out = std::io::stdout();
    let code = lockstep::ops::plugin::run(client, &namespace, args.plugin, &mut out).await?;
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// Add `kustomization.yaml` listing every CRD, so that `kubectl apply -k crds` installs
/// them and `examples/deploy` can include the directory.
fn with_kustomization(mut files: Vec<Generated>) -> Vec<Generated> {
    let mut content = String::from(
        "# Generated by `lockstep crds`; do not edit.\n\
         # Every CRD, for `kubectl apply --server-side -k crds` (examples/deploy includes this).\n\
         apiVersion: kustomize.config.k8s.io/v1beta1\n\
         kind: Kustomization\n",
    );
    if files.is_empty() {
        content.push_str("resources: []\n");
    } else {
        content.push_str("resources:\n");
        for file in &files {
            content.push_str(&format!("  - {}\n", file.file.display()));
        }
    }
    files.push(Generated {
        file: "kustomization.yaml".into(),
        content,
    });
    files
}

/// Write `files` under `args.out_dir`, or with `--check` report the stale ones.
fn generate(args: &GenerateArgs, files: Vec<Generated>) -> anyhow::Result<ExitCode> {
    let mut stale = Vec::new();
    for file in &files {
        let path = args.out_dir.join(&file.file);
        if args.check {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(file.content.as_str()) {
                stale.push(path);
            }
        } else {
            write(&path, &file.content)?;
        }
    }
    if stale.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    for path in &stale {
        eprintln!(
            "stale: {} (regenerate with `make generate`)",
            path.display()
        );
    }
    Ok(ExitCode::FAILURE)
}

fn write(path: &Path, content: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, content).with_context(|| format!("writing {}", path.display()))
}
