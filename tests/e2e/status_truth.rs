//! Status that never says something false, and Job outcomes that are never lost, on
//! the real control plane with KWOK pods:
//! - a replacement pod held NotReady in the middle of an upgrade shows, within seconds,
//!   in `readyReplicas` (the `READY` column), in `Available`, and in `Progressing`,
//!   which names the pod and what it waits for;
//! - a finished on-demand backup Job deleted while the operator is down stays (its
//!   `lockstep.dev/outcome` finalizer holds it) until the restarted operator has recorded
//!   its outcome, and then goes;
//! - one whose finalizer someone removed as well is reported: `Degraded` with
//!   `BackupOutcomeUnknown` naming the token and what to do, one Warning Event, and
//!   `lastBackup` saying its outcome is unknown;
//! - a final backup Job that a terminating namespace refuses to create (the object
//!   already `Finalizing`, or deleted with its namespace while at rest) is reported
//!   `Degraded` with `RequestRefused`, naming `lockstep.dev/skip-final-backup`, and
//!   setting that annotation lets the deletion, and the namespace's, finish.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;

use lockstep::engine::conditions::{self, reason};
use lockstep::machines::common::annotations::SKIP_FINAL_BACKUP;
use lockstep::machines::common::finalize::FINAL_BACKUP_FAILED;
use lockstep::machines::common::meta::OUTCOME_FINALIZER;
use lockstep::machines::common::on_demand::{BACKUP_OUTCOME_UNKNOWN, key as backup_key};
use lockstep::machines::distributeddb::status::AVAILABLE;
use lockstep::machines::distributeddb::{DistributedDB, DistributedDb};

use crate::support::{Fixture, events_about, wait_for, wait_for_all, wait_gone};

/// What "within seconds" means here.
const PROMPTLY: Duration = Duration::from_secs(10);

type Db = Fixture<DistributedDb>;

fn condition<'a>(db: &'a DistributedDB, type_: &str) -> Option<&'a lockstep::engine::Condition> {
    db.status.as_ref()?.engine.condition(type_)
}

fn ready_replicas(db: &DistributedDB) -> Option<i32> {
    db.status.as_ref()?.ready_replicas
}

/// Wait at most [`PROMPTLY`] for `what` of the object `name`.
async fn promptly(
    db: &Db,
    name: &str,
    what: &str,
    test: impl Fn(&DistributedDB) -> bool + Send + 'static,
) -> DistributedDB {
    match tokio::time::timeout(PROMPTLY, db.until(name, what, test)).await {
        Ok(object) => object,
        Err(_) => {
            let last = db.api.get_opt(name).await;
            panic!("not within {PROMPTLY:?}: {what}; last seen: {last:#?}")
        }
    }
}

#[tokio::test]
async fn a_replacement_held_not_ready_mid_upgrade_shows_in_ready_available_and_progressing() {
    let db = Db::new("truth-upgrade").await;
    let operator = db.operator();
    // Pods become Ready 5 s after they are bound: time to hold the replacement first.
    let spec = serde_json::from_value(json!({
        "replicas": 3,
        "image": "registry.example/db:1",
        "storage": {"size": "1Gi"},
        "podAnnotations": {"lockstep.dev/kwok-ready-delay-ms": "5000",
                           "lockstep.dev/kwok-ready-jitter-ms": "0"},
    }))
    .expect("a spec");
    db.create_object(&DistributedDB::new("held", spec)).await;
    db.until("held", "Ready with 3 pods Ready", |d| {
        d.status.as_ref().and_then(|s| s.engine.phase.as_deref()) == Some("Ready")
            && ready_replicas(d) == Some(3)
    })
    .await;
    let pods: Api<Pod> = db.env.api();
    let before = pods.get("held-2").await.expect("held-2").uid();

    // Upgrade; hold the replacement of held-2 NotReady as soon as it exists.
    let mut watch = watcher(
        pods.clone(),
        watcher::Config::default().fields("metadata.name=held-2"),
    )
    .boxed();
    db.merge_patch("held", json!({"spec": {"image": "registry.example/db:2"}}))
        .await;
    let replacement = tokio::time::timeout(crate::support::DEADLINE, async {
        while let Some(event) = watch.next().await {
            let pods = match event.expect("the pod watch") {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => vec![p],
                _ => Vec::new(),
            };
            if let Some(p) = pods.into_iter().find(|p| p.uid() != before) {
                return p;
            }
        }
        panic!("the pod watch ended")
    })
    .await
    .expect("held-2 is recreated");
    let hold = json!({"metadata": {"labels": {"lockstep.dev/kwok-notready": "true"}}});
    pods.patch("held-2", &PatchParams::default(), &Patch::Merge(&hold))
        .await
        .expect("label the replacement NotReady");

    // Within seconds, whatever the upgrade's own writes: 2 of 3 Ready, Available says
    // so, and Progressing names the pod and what it waits for.
    let seen = promptly(
        &db,
        "held",
        "2 Ready, Available 2 of 3, Progressing on held-2",
        |d| {
            let available = condition(d, AVAILABLE).is_some_and(|c| {
                c.status == conditions::status::TRUE
                    && c.message.starts_with("2 of 3 members Ready")
            });
            let progressing = condition(d, conditions::PROGRESSING).is_some_and(|c| {
                c.status == conditions::status::TRUE
                    && c.message.contains("held-2")
                    && c.message.contains("Ready")
                    && c.message.contains("waiting since")
            });
            ready_replicas(d) == Some(2) && available && progressing
        },
    )
    .await;
    let ready_pods = pods
        .list(&kube::api::ListParams::default().labels("app.kubernetes.io/instance=held"))
        .await
        .expect("list pods")
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count();
    assert_eq!(
        Some(i32::try_from(ready_pods).unwrap_or(0)),
        ready_replicas(&seen),
        "READY matches the pods"
    );
    assert_eq!(replacement.name_any(), "held-2");

    // Let it go: the upgrade finishes.
    let release = json!({"metadata": {"labels": {"lockstep.dev/kwok-notready": null}}});
    pods.patch("held-2", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .expect("unlabel the replacement");
    db.until("held", "Ready at db:2 with 3 pods Ready", |d| {
        d.status.as_ref().is_some_and(|s| {
            s.engine.phase.as_deref() == Some("Ready")
                && s.version.as_deref() == Some("registry.example/db:2")
                && s.ready_replicas == Some(3)
        })
    })
    .await;
    operator.stop().await;
    db.env.finish().await;
}

/// A one-replica DistributedDB `name` with backups, Ready, whose on-demand backup for
/// `token` has finished while the operator was stopped. Returns the Job.
async fn backup_finished_while_down(db: &Db, name: &str, token: &str) -> Job {
    let operator = db.operator();
    let spec = serde_json::from_value(json!({
        "replicas": 1,
        "image": "registry.example/db:1",
        "storage": {"size": "1Gi"},
        // Suspended: a run spanning 03:00 UTC would otherwise meet a scheduled backup Job.
        "backupPolicy": {"schedule": "0 3 * * *", "suspend": true,
            "s3Endpoint": "https://s3.example",
            "s3CredentialsSecret": "s3", "bucket": "backups",
            "image": "registry.example/db-backup:1",
            "podAnnotations": {"lockstep.dev/kwok-complete-delay-ms": "2000"}},
    }))
    .expect("a spec");
    db.create_object(&DistributedDB::new(name, spec)).await;
    db.until(name, "Ready", |d| {
        d.status.as_ref().and_then(|s| s.engine.phase.as_deref()) == Some("Ready")
    })
    .await;
    db.merge_patch(
        name,
        json!({"metadata": {"annotations": {"lockstep.dev/backup-now": token}}}),
    )
    .await;
    db.until(name, "BackingUp", |d| {
        d.status.as_ref().and_then(|s| s.engine.phase.as_deref()) == Some("BackingUp")
    })
    .await;
    operator.stop().await;

    let jobs: Api<Job> = db.env.api();
    let job_name = format!("{name}-{}", backup_key(token, None));
    let job = wait_for(
        &jobs,
        &job_name,
        "the backup Job to succeed",
        |j: Option<&Job>| {
            j.and_then(|j| j.status.as_ref())
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Complete" && c.status == "True")
                })
        },
    )
    .await
    .expect("the Job");
    assert!(
        job.finalizers().iter().any(|f| f == OUTCOME_FINALIZER),
        "a backup Job is created held by {OUTCOME_FINALIZER}: {:?}",
        job.finalizers()
    );
    job
}

#[tokio::test]
async fn a_backup_job_deleted_while_the_operator_is_down_keeps_its_outcome_until_recorded() {
    let db = Db::new("truth-backup").await;
    let job = backup_finished_while_down(&db, "kept", "first").await;
    let jobs: Api<Job> = db.env.api();

    // A TTL controller or a person deletes it: it stays, marked, with its outcome.
    jobs.delete(&job.name_any(), &DeleteParams::background())
        .await
        .expect("delete the Job");
    let marked = jobs.get(&job.name_any()).await.expect("still there");
    assert!(marked.metadata.deletion_timestamp.is_some());

    // The restarted operator records the outcome, then lets the Job go.
    let operator = db.operator();
    let name = job.name_any();
    let expected = name.clone();
    db.until(
        "kept",
        "lastBackup Succeeded from the deleted Job, Ready",
        move |d| {
            d.status.as_ref().is_some_and(|s| {
                s.engine.phase.as_deref() == Some("Ready")
                    && s.last_backup
                        .as_ref()
                        .is_some_and(|b| b.job == expected && b.outcome == "Succeeded")
            })
        },
    )
    .await;
    wait_gone(
        &jobs,
        &name,
        &job.uid().unwrap_or_default(),
        "the Job, once recorded",
    )
    .await;
    let db_now = db.api.get("kept").await.expect("the object");
    let degraded = condition(&db_now, conditions::DEGRADED).expect("Degraded");
    assert_eq!(degraded.status, conditions::status::FALSE, "{degraded:?}");
    operator.stop().await;
    db.env.finish().await;
}

#[tokio::test]
async fn a_backup_job_whose_finalizer_someone_removed_is_reported_not_only_in_history() {
    let db = Db::new("truth-lost").await;
    let job = backup_finished_while_down(&db, "lost", "second").await;
    let jobs: Api<Job> = db.env.api();
    let strip = json!({"metadata": {"finalizers": null}});
    jobs.patch(
        &job.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&strip),
    )
    .await
    .expect("remove the finalizer");
    jobs.delete(&job.name_any(), &DeleteParams::background())
        .await
        .expect("delete the Job");
    wait_gone(
        &jobs,
        &job.name_any(),
        &job.uid().unwrap_or_default(),
        "the stripped Job",
    )
    .await;

    // The restarted operator cannot know the outcome, and says so where people look.
    let operator = db.operator();
    let seen = db
        .until(
            "lost",
            "Degraded BackupOutcomeUnknown, lastBackup Unknown",
            |d| {
                let degraded = condition(d, conditions::DEGRADED).is_some_and(|c| {
                    c.status == conditions::status::TRUE && c.reason == BACKUP_OUTCOME_UNKNOWN
                });
                let unknown = d
                    .status
                    .as_ref()
                    .and_then(|s| s.last_backup.as_ref())
                    .is_some_and(|b| b.outcome.starts_with("Unknown"));
                degraded && unknown
            },
        )
        .await;
    let degraded = condition(&seen, conditions::DEGRADED).expect("Degraded");
    assert!(
        degraded.message.contains("lockstep.dev/backup-now=second")
            && degraded
                .message
                .contains("set a new lockstep.dev/backup-now token"),
        "names the token and what to do: {}",
        degraded.message
    );
    // The Event follows the status write: wait for it.
    let unknown = |e: &Event| {
        e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("lost")
            && e.type_.as_deref() == Some("Warning")
            && e.reason.as_deref() == Some(BACKUP_OUTCOME_UNKNOWN)
    };
    let events: Api<Event> = db.env.api();
    wait_for_all(&events, "", "the BackupOutcomeUnknown Warning", |all| {
        all.iter().any(unknown)
    })
    .await;
    let warnings: Vec<_> = events_about(&db.env.client, db.env.namespace(), "lost")
        .await
        .into_iter()
        .filter(|e| unknown(e))
        .collect();
    assert_eq!(warnings.len(), 1, "one Warning Event: {warnings:#?}");

    // A new token clears it.
    db.merge_patch(
        "lost",
        json!({"metadata": {"annotations": {"lockstep.dev/backup-now": "third"}}}),
    )
    .await;
    db.until("lost", "Ready, not Degraded, after a new backup", |d| {
        d.status.as_ref().and_then(|s| s.engine.phase.as_deref()) == Some("Ready")
            && condition(d, conditions::DEGRADED)
                .is_some_and(|c| c.status == conditions::status::FALSE)
            && d.status
                .as_ref()
                .and_then(|s| s.last_backup.as_ref())
                .is_some_and(|b| b.outcome == "Succeeded")
    })
    .await;
    operator.stop().await;
    db.env.finish().await;
}

/// One replica with backups; its backup Jobs fail in KWOK when `failing`.
fn backed_up(failing: bool) -> lockstep::machines::distributeddb::DistributedDBSpec {
    let labels = if failing {
        json!({"lockstep.dev/kwok-fail": "true"})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "replicas": 1,
        "image": "registry.example/db:1",
        "storage": {"size": "1Gi"},
        // Suspended: a run spanning 03:00 UTC would otherwise meet a scheduled backup Job.
        "backupPolicy": {"schedule": "0 3 * * *", "suspend": true,
            "s3Endpoint": "https://s3.example",
            "s3CredentialsSecret": "s3", "bucket": "backups",
            "image": "registry.example/db-backup:1", "podLabels": labels},
    }))
    .expect("a spec")
}

fn phase(d: &DistributedDB) -> Option<&str> {
    d.status.as_ref()?.engine.phase.as_deref()
}

fn degraded_for(d: &DistributedDB, why: &str) -> bool {
    condition(d, conditions::DEGRADED)
        .is_some_and(|c| c.status == conditions::status::TRUE && c.reason == why)
}

#[tokio::test]
async fn a_final_backup_a_terminating_namespace_refuses_names_the_skip_annotation_which_ends_the_deletion()
 {
    let db = Db::new("truth-ns").await;
    let operator = db.operator();
    let finalizing = db
        .create_object(&DistributedDB::new("finalizing", backed_up(true)))
        .await;
    let resting = db
        .create_object(&DistributedDB::new("resting", backed_up(false)))
        .await;
    for name in ["finalizing", "resting"] {
        db.until(name, "Ready", |d| phase(d) == Some("Ready")).await;
    }
    // `finalizing` is deleted first: its first final backup fails, and it waits to retry.
    db.api
        .delete("finalizing", &DeleteParams::default())
        .await
        .expect("delete finalizing");
    db.until("finalizing", "Finalizing, its final backup failed", |d| {
        phase(d) == Some("Finalizing") && degraded_for(d, FINAL_BACKUP_FAILED)
    })
    .await;

    // The namespace goes: nothing can be created in it any more, final backup Jobs
    // included, and the namespace controller deletes `resting` too.
    let namespaces: Api<Namespace> = Api::all(db.env.client.clone());
    let namespace = namespaces
        .get(db.env.namespace())
        .await
        .expect("the test namespace");
    namespaces
        .delete(db.env.namespace(), &DeleteParams::background())
        .await
        .expect("delete the namespace");
    for name in ["finalizing", "resting"] {
        // (At rest, a refused re-apply of what the namespace controller deleted may
        // come first, before the object itself is being deleted.)
        let refused = db
            .until(
                name,
                "Degraded RequestRefused creating the final backup",
                |d| {
                    d.metadata.deletion_timestamp.is_some()
                        && degraded_for(d, reason::REQUEST_REFUSED)
                        && condition(d, conditions::DEGRADED)
                            .is_some_and(|c| c.message.contains("final-backup"))
                },
            )
            .await;
        assert_eq!(
            phase(&refused),
            Some("Finalizing"),
            "{name}: the state that creates the final backup Job"
        );
        let message = &condition(&refused, conditions::DEGRADED)
            .expect("Degraded")
            .message;
        assert!(
            message.contains("being terminated") && message.contains(SKIP_FINAL_BACKUP),
            "{name}: names the terminating namespace and the way out: {message}"
        );
    }

    // The way out the message names ends both deletions, and so the namespace's.
    for name in ["finalizing", "resting"] {
        db.merge_patch(
            name,
            json!({"metadata": {"annotations": {SKIP_FINAL_BACKUP: "true"}}}),
        )
        .await;
    }
    for object in [finalizing, resting] {
        wait_gone(
            &db.api,
            &object.name_any(),
            &object.uid().unwrap_or_default(),
            "the DistributedDB to be deleted",
        )
        .await;
    }
    wait_gone(
        &namespaces,
        db.env.namespace(),
        &namespace.uid().unwrap_or_default(),
        "the namespace to be deleted",
    )
    .await;
    operator.stop().await;
    db.env.finish().await;
}
