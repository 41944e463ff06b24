//! `kubectl lockstep`: the kubectl plugin (the `lockstep` binary run as
//! `kubectl-lockstep`, or `lockstep kubectl …`).
//!
//! | command | what it does |
//! |---|---|
//! | `status NAME` | phase, step, primary, last backup, conditions, the instances (role, Ready, restarts, node) and the last transitions |
//! | `history NAME` | every transition the status records, with its reason and message |
//! | `switchover NAME POD` | sets `lockstep.dev/switchover=<POD>:<token>` and waits until `POD` is primary and the cluster Ready, or the request is refused |
//! | `backup NAME` | sets `lockstep.dev/backup-now=<token>` and waits for that backup's outcome in `status.lastBackup` |
//! | `restore NAME [--time T \| --lsn L \| --restore-point N \| --immediate]` | sets `spec.restore` to a new token and the target (none: the end of the archive), and waits until the cluster is Ready after the in-place restore, or the restore is refused or fails |
//! | `hibernate NAME on\|off` | sets `spec.hibernate`, and waits until the cluster is asleep (`on`) or `Ready` again (`off`), or `Degraded` |
//! | `rotate-password NAME` | writes a new random password into `<name>-app` with every key made from it, and waits until the primary's role has it |
//! | `retry NAME` | when a promotion or a hook failed (`Degraded`), a new `lockstep.dev/retry-promote` (PostgresCluster) or `lockstep.dev/retry-hook` (DistributedDB) token, and waits until the step takes it on; refused when nothing waits for one |
//! | `skip-final-backup NAME` | `lockstep.dev/skip-final-backup=true`, and, if the object is being deleted, waits until it is gone |
//! | `psql NAME [--replica] [-- ARGS]` | `kubectl exec` into the primary's (or a replica's) `postgres` container, running `psql ARGS` (with a terminal when stdin is one) |
//!
//! `NAME` is `NAME` (a PostgresCluster, else a DistributedDB) or `KIND/NAME`. `status` and
//! `history` take `-o text|json|yaml`; the waiting commands take `--no-wait` and
//! `--timeout`.
//!
//! # Guarantees
//! - It only reads objects and pods, and writes the one annotation a command names (a
//!   merge patch of `metadata.annotations`), or, for `restore`, `spec.restore` (a merge
//!   patch of that one field), for `hibernate`, `spec.hibernate`, for `rotate-password`,
//!   the keys of `<name>-app` (printing none of them): never the rest of the spec, never
//!   the status.
//! - A wait ends: with the outcome (exit 0), a refusal or failure (exit 1, its message
//!   printed), or the timeout (exit 1).
//! - It prints no Secret.

pub mod view;

use std::io::{IsTerminal, Write};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::wait::await_condition;
use kube::runtime::wait::conditions::is_deleted;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::{Value, json};

use super::Error;
use super::narrate::resolve;
use crate::machines::common::annotations::{
    BACKUP_NOW, RETRY_HOOK, RETRY_PROMOTE, SKIP_FINAL_BACKUP,
};
use crate::machines::common::jobs::job_name;
use crate::machines::common::on_demand;
use crate::machines::distributeddb::DistributedDB;
use crate::machines::postgres::PostgresCluster;
use crate::machines::postgres::observe::SWITCHOVER;

/// How `status` and `history` print.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Aligned text.
    #[default]
    Text,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// `kubectl lockstep`'s arguments.
#[derive(Debug, clap::Args)]
pub struct PluginArgs {
    /// The namespace (default: the kubeconfig's).
    #[arg(long, short = 'n', global = true)]
    pub namespace: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: PluginCommand,
}

/// The options of the commands that wait.
#[derive(Debug, Clone, clap::Args)]
pub struct WaitArgs {
    /// Set the annotation and return at once.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for the outcome, in seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
}

/// A `kubectl lockstep` command.
#[derive(Debug, clap::Subcommand)]
pub enum PluginCommand {
    /// Phase, step, conditions, instances and the last transitions.
    Status {
        /// `NAME` or `KIND/NAME`.
        name: String,
        /// How to print.
        #[arg(long, short = 'o', value_enum, default_value_t)]
        output: Output,
        /// How many transitions to show.
        #[arg(long, default_value_t = 5)]
        last: usize,
    },
    /// Every recorded transition.
    History {
        /// `NAME` or `KIND/NAME`.
        name: String,
        /// How to print.
        #[arg(long, short = 'o', value_enum, default_value_t)]
        output: Output,
    },
    /// Move a PostgresCluster's primary role to `pod`, and wait for it.
    Switchover {
        /// `NAME` or `postgrescluster/NAME`.
        name: String,
        /// The pod to promote.
        pod: String,
        /// When to return.
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Take an on-demand backup, and wait for its outcome.
    Backup {
        /// `NAME` or `KIND/NAME`.
        name: String,
        /// When to return.
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Rewind a PostgresCluster in place to a point of its archive (`spec.restore`),
    /// discarding everything committed after it, and wait for it.
    Restore {
        /// `NAME` or `postgrescluster/NAME`.
        name: String,
        /// Every commit up to this moment (RFC 3339).
        #[arg(long, group = "target")]
        time: Option<String>,
        /// Up to this WAL position (`16/B374D848`).
        #[arg(long, group = "target")]
        lsn: Option<String>,
        /// Up to the restore point of this name (`pg_create_restore_point`).
        #[arg(long, group = "target")]
        restore_point: Option<String>,
        /// The end of the newest base backup.
        #[arg(long, group = "target")]
        immediate: bool,
        /// When to return (a restore replays the archive: allow for it).
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Stop every instance of a PostgresCluster and keep its volumes (`on`), or wake it
    /// with the primary it had (`off`): `spec.hibernate`. Waits for the cluster to be
    /// asleep, or `Ready` again.
    Hibernate {
        /// `NAME` or `postgrescluster/NAME`.
        name: String,
        /// `on` or `off`.
        #[arg(value_parser = ["on", "off"])]
        switch: String,
        /// When to return.
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Give a PostgresCluster's application role a new random password: every key of
    /// `<name>-app` made from it, then wait until the primary's role has it.
    RotatePassword {
        /// `NAME` or `postgrescluster/NAME`.
        name: String,
        /// When to return.
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Try a promotion (PostgresCluster) or a hook (DistributedDB) again, with a fresh
    /// retry budget.
    Retry {
        /// `NAME` or `KIND/NAME`.
        name: String,
        /// When to return.
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Delete without the final backup (or stop retrying a failing one).
    SkipFinalBackup {
        /// `NAME` or `KIND/NAME`.
        name: String,
        /// When to return.
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// psql on the primary (or a replica) of a PostgresCluster.
    Psql {
        /// `NAME` or `postgrescluster/NAME`.
        name: String,
        /// Connect to a replica instead.
        #[arg(long)]
        replica: bool,
        /// psql's own arguments, after `--` (e.g. `-- -c 'SELECT 1'`).
        #[arg(last = true)]
        args: Vec<String>,
    },
}

/// The object a command is about.
struct Found {
    resource: ApiResource,
    api: Api<DynamicObject>,
    name: String,
    namespace: String,
}

impl Found {
    fn is_postgres(&self) -> bool {
        self.resource.kind == "PostgresCluster"
    }

    async fn get(&self) -> Result<Value, Error> {
        let object = self
            .api
            .get(&self.name)
            .await
            .map_err(|source| Error::Api {
                what: format!("reading {} {}", self.resource.kind, self.name),
                source,
            })?;
        serde_json::to_value(object).map_err(|e| Error::Resolve(e.to_string()))
    }

    /// The label selector of its database pods.
    fn pod_selector(&self) -> String {
        format!(
            "app.kubernetes.io/instance={},lockstep.dev/component=database",
            self.name
        )
    }

    async fn pods(&self, client: &Client) -> Result<Vec<Value>, Error> {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &self.namespace);
        let list = pods
            .list(&ListParams::default().labels(&self.pod_selector()))
            .await
            .map_err(|source| Error::Api {
                what: format!("listing the pods of {}", self.name),
                source,
            })?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|p| serde_json::to_value(p).ok())
            .collect())
    }

    /// Set `spec.<field>` to `value` (a merge patch).
    async fn set_spec(&self, field: &str, value: Value) -> Result<(), Error> {
        let patch = json!({"spec": {field: value}});
        self.api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| Error::Api {
                what: format!("setting spec.{field} of {}", self.name),
                source,
            })?;
        Ok(())
    }

    /// Watch its database pods until `read` of them is `wanted`, or `timeout` passes.
    /// Returns what `read` last saw (`Ok` once it is `wanted`, `Err` otherwise).
    async fn wait_pods(
        &self,
        client: &Client,
        timeout: u64,
        read: impl Fn(&[Value]) -> Option<String>,
        wanted: &str,
    ) -> Result<Option<String>, Option<String>> {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &self.namespace);
        let config = watcher::Config::default().labels(&self.pod_selector());
        let (store, writer) = reflector::store();
        let mut events = std::pin::pin!(watcher(pods, config).default_backoff().reflect(writer));
        let mut last = None;
        let deadline = tokio::time::sleep(Duration::from_secs(timeout));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                () = &mut deadline => return Err(last),
                event = events.next() => {
                    if event.is_none() {
                        return Err(last);
                    }
                    let seen: Vec<Value> = store
                        .state()
                        .iter()
                        .filter_map(|p| serde_json::to_value(p.as_ref()).ok())
                        .collect();
                    last = read(&seen);
                    if last.as_deref() == Some(wanted) {
                        return Ok(last);
                    }
                }
            }
        }
    }

    async fn annotate(&self, key: &str, value: &str) -> Result<(), Error> {
        let patch = json!({"metadata": {"annotations": {key: value}}});
        self.api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| Error::Api {
                what: format!("annotating {} {} with {key}", self.resource.kind, self.name),
                source,
            })?;
        Ok(())
    }

    /// Watch the object until `done` says how it ended, or `timeout` passes.
    async fn wait(
        &self,
        timeout: u64,
        done: impl Fn(&Value) -> Option<Result<String, String>>,
    ) -> Result<Result<String, String>, Error> {
        let ended = |o: Option<&DynamicObject>| {
            o.and_then(|o| serde_json::to_value(o).ok())
                .is_some_and(|v| done(&v).is_some())
        };
        let watched = tokio::time::timeout(
            Duration::from_secs(timeout),
            await_condition(self.api.clone(), &self.name, ended),
        )
        .await;
        Ok(match watched {
            // The outcome as the watch saw it when it met the condition (a later read may
            // already show the next step: a retry taken on, then the upgrade going on).
            Ok(Ok(Some(seen))) => {
                let seen = serde_json::to_value(seen).map_err(|e| Error::Resolve(e.to_string()))?;
                view::outcome(&seen, &done)
            }
            Ok(Ok(None)) => Err(format!("{} was deleted while waiting", self.name)),
            Ok(Err(e)) => Err(format!("the watch of {} failed: {e}", self.name)),
            Err(_) => {
                let object = self.get().await?;
                let v = view::status("", &object, &[], 0);
                Err(format!(
                    "no outcome within {timeout}s (phase {}, step {})",
                    v.phase.unwrap_or_default(),
                    v.step.unwrap_or_default()
                ))
            }
        })
    }
}

/// `NAME` (a PostgresCluster, else a DistributedDB: this crate's own kinds, no discovery)
/// or `KIND/NAME` (any kind discovery finds).
async fn find(client: &Client, namespace: &str, arg: &str) -> Result<Found, Error> {
    let (resources, name): (Vec<ApiResource>, &str) = match arg.split_once('/') {
        Some((kind, name)) => (vec![resolve(client, kind).await?], name),
        None => (
            vec![
                ApiResource::erase::<PostgresCluster>(&()),
                ApiResource::erase::<DistributedDB>(&()),
            ],
            arg,
        ),
    };
    for resource in resources {
        let kind = resource.kind.clone();
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        match api.get_opt(name).await {
            Ok(Some(_)) => {
                return Ok(Found {
                    resource,
                    api,
                    name: name.to_owned(),
                    namespace: namespace.to_owned(),
                });
            }
            Ok(None) => {}
            Err(e) if kind_not_served(&e) => {}
            Err(source) => {
                return Err(Error::Api {
                    what: format!("reading {kind} {name}"),
                    source,
                });
            }
        }
    }
    Err(Error::Resolve(format!("no {arg} in namespace {namespace}")))
}

/// Whether a read failed because the API server serves no such kind here (its CRD is not
/// installed: the path answers 404): the object is then not of that kind, and a bare
/// `NAME` is looked for as the next kind.
fn kind_not_served(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

fn token() -> String {
    chrono::Utc::now().format("%Y%m%d%H%M%S").to_string()
}

fn print(out: &mut impl Write, output: Output, value: &impl serde::Serialize, text: &str) {
    let rendered = match output {
        Output::Text => text.to_owned(),
        Output::Json => serde_json::to_string_pretty(value).unwrap_or_default() + "\n",
        Output::Yaml => serde_yaml::to_string(value).unwrap_or_default(),
    };
    let _ = out.write_all(rendered.as_bytes());
}

/// The condition `type_` of `object` if it is `True`: `(reason, message)`.
fn condition_true(object: &Value, type_: &str) -> Option<(String, String)> {
    view::conditions(object)
        .into_iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| (c.reason, c.message))
}

/// Run `args` against the cluster; the process's exit status.
///
/// # Errors
/// [`Error`] when the object cannot be found or read, or the annotation not written.
pub async fn run(
    client: Client,
    default_namespace: &str,
    args: PluginArgs,
    out: &mut impl Write,
) -> Result<i32, Error> {
    let namespace = args
        .namespace
        .unwrap_or_else(|| default_namespace.to_owned());
    match args.command {
        PluginCommand::Status { name, output, last } => {
            let found = find(&client, &namespace, &name).await?;
            let object = found.get().await?;
            let pods = found.pods(&client).await?;
            let mut v = view::status(&found.resource.kind, &object, &pods, last);
            if found.is_postgres() {
                for i in &mut v.instances {
                    i.server = instance_metrics(&client, &namespace, &i.pod)
                        .await
                        .map(|text| view::server(&text));
                }
            }
            print(out, output, &v, &view::render_status(&v));
            Ok(0)
        }
        PluginCommand::History { name, output } => {
            let found = find(&client, &namespace, &name).await?;
            let t = view::transitions(&found.get().await?);
            print(out, output, &t, &view::render_history(&t));
            Ok(0)
        }
        PluginCommand::Switchover { name, pod, wait } => {
            let found = find(&client, &namespace, &name).await?;
            if !found.is_postgres() {
                return Err(Error::Resolve(format!("{name} is not a PostgresCluster")));
            }
            let value = format!("{pod}:{}", token());
            found.annotate(SWITCHOVER, &value).await?;
            let _ = writeln!(out, "{SWITCHOVER}={value} set on {}", found.name);
            if wait.no_wait {
                return Ok(0);
            }
            let outcome = found
                .wait(wait.timeout, |o| {
                    if let Some((reason, message)) = condition_true(o, "Degraded")
                        && reason == "SwitchoverRefused"
                        && message.contains(&value)
                    {
                        return Some(Err(message));
                    }
                    let primary = o.pointer("/status/primaryPod").and_then(Value::as_str);
                    let phase = o.pointer("/status/phase").and_then(Value::as_str);
                    (primary == Some(pod.as_str()) && phase == Some("Ready"))
                        .then(|| Ok(format!("{pod} is primary; {} is Ready", found.name)))
                })
                .await?;
            Ok(report(out, outcome))
        }
        PluginCommand::Backup { name, wait } => {
            let found = find(&client, &namespace, &name).await?;
            let value = token();
            found.annotate(BACKUP_NOW, &value).await?;
            let _ = writeln!(out, "{BACKUP_NOW}={value} set on {}", found.name);
            if wait.no_wait {
                return Ok(0);
            }
            let outcome = found
                .wait(wait.timeout, |o| {
                    if let Some((reason, message)) = condition_true(o, "Degraded")
                        && reason == "BackupNotConfigured"
                    {
                        return Some(Err(message));
                    }
                    // The Job serving this token, once the machine took it on: its key
                    // is chained to the requests before it, so only the record says it.
                    let acks = o.pointer("/status/machine/acks")?;
                    let served = acks.get(BACKUP_NOW).and_then(Value::as_str);
                    if served != Some(value.as_str()) {
                        return None;
                    }
                    let key = acks.get(on_demand::BACKUP_JOB).and_then(Value::as_str);
                    let job = job_name(&found.name, &on_demand::serving(&value, key));
                    let last = o.pointer("/status/lastBackup")?;
                    (last.get("job").and_then(Value::as_str) == Some(job.as_str())).then(|| {
                        let outcome = last
                            .get("outcome")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned();
                        if outcome == "Succeeded" {
                            Ok(format!("backup {job}: {outcome}"))
                        } else {
                            Err(format!("backup {job}: {outcome}"))
                        }
                    })
                })
                .await?;
            Ok(report(out, outcome))
        }
        PluginCommand::Restore {
            name,
            time,
            lsn,
            restore_point,
            immediate,
            wait,
        } => {
            let found = find(&client, &namespace, &name).await?;
            if !found.is_postgres() {
                return Err(Error::Resolve(format!("{name} is not a PostgresCluster")));
            }
            let target = match (time, lsn, restore_point, immediate) {
                (Some(t), _, _, _) => json!({"time": t}),
                (None, Some(l), _, _) => json!({"lsn": l}),
                (None, None, Some(n), _) => json!({"name": n}),
                (None, None, None, true) => json!({"immediate": true}),
                (None, None, None, false) => Value::Null,
            };
            let value = token();
            found
                .set_spec("restore", json!({"token": value, "target": target}))
                .await?;
            let _ = writeln!(out, "spec.restore.token={value} set on {}", found.name);
            if wait.no_wait {
                return Ok(0);
            }
            let outcome = found
                .wait(wait.timeout, |o| {
                    if let Some((reason, message)) = condition_true(o, "Degraded")
                        && (reason == "RestoreRefused" || reason == "RestoreFailed")
                        && message.contains(&value)
                    {
                        return Some(Err(message));
                    }
                    let served = o
                        .pointer("/status/machine/acks/spec.restore.token")
                        .and_then(Value::as_str);
                    let phase = o.pointer("/status/phase").and_then(Value::as_str);
                    (served == Some(value.as_str()) && phase == Some("Ready"))
                        .then(|| Ok(format!("{} is Ready, restored", found.name)))
                })
                .await?;
            Ok(report(out, outcome))
        }
        PluginCommand::Hibernate { name, switch, wait } => {
            let found = find(&client, &namespace, &name).await?;
            if !found.is_postgres() {
                return Err(Error::Resolve(format!("{name} is not a PostgresCluster")));
            }
            let on = switch == "on";
            found.set_spec("hibernate", json!(on)).await?;
            let _ = writeln!(out, "spec.hibernate={on} set on {}", found.name);
            if wait.no_wait {
                return Ok(0);
            }
            let outcome = found
                .wait(wait.timeout, |o| view::hibernation_settled(o, on))
                .await?;
            Ok(report(out, outcome))
        }
        PluginCommand::RotatePassword { name, wait } => {
            let found = find(&client, &namespace, &name).await?;
            if !found.is_postgres() {
                return Err(Error::Resolve(format!("{name} is not a PostgresCluster")));
            }
            let pg: crate::machines::postgres::PostgresCluster =
                serde_json::from_value(found.get().await?)
                    .map_err(|e| Error::Resolve(format!("reading {name}: {e}")))?;
            let secret = crate::machines::postgres::render::app::app_name(&pg);
            let keys = crate::machines::postgres::render::app::rotated_keys(&pg);
            let secrets: Api<k8s_openapi::api::core::v1::Secret> =
                Api::namespaced(client.clone(), &namespace);
            let written = secrets
                .patch(
                    &secret,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"stringData": keys})),
                )
                .await
                .map_err(|source| Error::Api {
                    what: format!("writing a new password into {secret}"),
                    source,
                })?;
            let version = written.metadata.resource_version.unwrap_or_default();
            let _ = writeln!(
                out,
                "{secret}: a new password and every key made from it (version {version})"
            );
            if wait.no_wait {
                return Ok(0);
            }
            let followed = found
                .wait_pods(&client, wait.timeout, view::app_password_version, &version)
                .await;
            let outcome = match followed {
                Ok(_) => Ok(format!("the primary's role {secret} has the new password")),
                Err(follows) => Err(format!(
                    "the primary's role does not have the new password after {}s (it follows version {}); its manager applies it within a minute of the write",
                    wait.timeout,
                    follows.as_deref().unwrap_or("none reported")
                )),
            };
            Ok(report(out, outcome))
        }
        PluginCommand::Retry { name, wait } => {
            let found = find(&client, &namespace, &name).await?;
            let object = found.get().await?;
            let Some(waiting) = view::retry_waits(&object) else {
                let v = view::status("", &object, &[], 0);
                let _ = writeln!(
                    out,
                    "nothing waits for a retry in {} (phase {}): a retry answers a failed promotion or hook",
                    found.name,
                    v.phase.unwrap_or_default()
                );
                return Ok(1);
            };
            let key = if found.is_postgres() {
                RETRY_PROMOTE
            } else {
                RETRY_HOOK
            };
            let value = token();
            found.annotate(key, &value).await?;
            let _ = writeln!(out, "{key}={value} set on {} ({waiting})", found.name);
            if wait.no_wait {
                return Ok(0);
            }
            let outcome = found
                .wait(wait.timeout, |o| {
                    view::retry_taken(o, &value).then(|| {
                        Ok(format!(
                            "taken on: {}",
                            view::last_message(o).unwrap_or_default()
                        ))
                    })
                })
                .await?;
            Ok(report(out, outcome))
        }
        PluginCommand::SkipFinalBackup { name, wait } => {
            let found = find(&client, &namespace, &name).await?;
            found.annotate(SKIP_FINAL_BACKUP, "true").await?;
            let _ = writeln!(out, "{SKIP_FINAL_BACKUP}=true set on {}", found.name);
            let object = found.get().await?;
            if object.pointer("/metadata/deletionTimestamp").is_none() {
                let _ = writeln!(
                    out,
                    "{} is not being deleted: deleting it will skip the final backup",
                    found.name
                );
                return Ok(0);
            }
            if wait.no_wait {
                return Ok(0);
            }
            let uid = object
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let gone = tokio::time::timeout(
                Duration::from_secs(wait.timeout),
                await_condition(found.api.clone(), &found.name, is_deleted(&uid)),
            )
            .await;
            let outcome = match gone {
                Ok(Ok(_)) => Ok(format!("{} is deleted, without a final backup", found.name)),
                Ok(Err(e)) => Err(format!("the watch of {} failed: {e}", found.name)),
                Err(_) => Err(format!(
                    "{} is still there after {}s",
                    found.name, wait.timeout
                )),
            };
            Ok(report(out, outcome))
        }
        PluginCommand::Psql {
            name,
            replica,
            args,
        } => {
            let found = find(&client, &namespace, &name).await?;
            let pods: Vec<view::InstanceView> = found
                .pods(&client)
                .await?
                .iter()
                .map(view::instance)
                .collect();
            let want = if replica { "replica" } else { "primary" };
            let Some(pod) = pods
                .iter()
                .find(|p| p.ready && p.role.as_deref() == Some(want))
            else {
                let _ = writeln!(out, "no Ready {want} in {}", found.name);
                return Ok(1);
            };
            // A terminal gets one (psql's prompt and line editing); a pipe or a script
            // gets plain stdin, so `psql NAME -- -c …` runs anywhere.
            let tty = if std::io::stdin().is_terminal() {
                "-it"
            } else {
                "-i"
            };
            let status = std::process::Command::new("kubectl")
                .args([
                    "exec", tty, "-n", &namespace, &pod.pod, "-c", "postgres", "--", "psql", "-U",
                    "postgres",
                ])
                .args(&args)
                .status()
                .map_err(|e| Error::Resolve(format!("running kubectl exec: {e}")))?;
            Ok(status.code().unwrap_or(1))
        }
    }
}

/// How long one instance's `/metrics` may take before `status` shows dashes for it.
const METRICS_BOUND: Duration = Duration::from_secs(3);

/// The `/metrics` text of PostgreSQL pod `pod`'s instance manager, read through the API
/// server's pod proxy (so the plugin needs no route to the pods; the person needs `get`
/// on `pods/proxy`); `None` when it cannot be read in time (the pod is not running, or
/// that right is missing): `status` then shows dashes.
async fn instance_metrics(client: &Client, namespace: &str, pod: &str) -> Option<String> {
    let port = crate::machines::postgres::render::METRICS_PORT;
    let request = http::Request::get(format!(
        "/api/v1/namespaces/{namespace}/pods/{pod}:{port}/proxy/metrics"
    ))
    .body(Vec::new())
    .ok()?;
    tokio::time::timeout(METRICS_BOUND, client.request_text(request))
        .await
        .ok()?
        .ok()
}

fn report(out: &mut impl Write, outcome: Result<String, String>) -> i32 {
    match outcome {
        Ok(message) => {
            let _ = writeln!(out, "{message}");
            0
        }
        Err(message) => {
            let _ = writeln!(out, "failed: {message}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("404 page not found", "NotFound")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn a_kind_whose_crd_is_not_installed_is_passed_over_and_other_failures_are_not() {
        assert!(kind_not_served(&api(404)));
        assert!(!kind_not_served(&api(403)));
        assert!(!kind_not_served(&api(500)));
    }
}
