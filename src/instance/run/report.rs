//! What this instance tells the operator, as conditions on its own pod (`pods/status`):
//! what its server made of `spec.postgresql` ([`crate::pod::applied`]),
//! for a standby whether it streams ([`crate::pod::streaming`]), and for
//! an archiving primary whether its WAL reaches the archive
//! ([`crate::pod::archiving`]), and for a primary with
//! `spec.synchronous` whether its commits wait for standbys
//! ([`crate::pod::synchronous`]), and whether its volume holds a database
//! ([`crate::pod::volume`]), and a standby's answer to a failover's
//! survey ([`crate::pod::answers`]), and for the writable server what it
//! made of `spec.roles` and `spec.databases` ([`crate::pod::managed`]) and which
//! version of the application role's Secret its password follows
//! ([`crate::pod::app_password`]).
//!
//! # Guarantees
//! - **A write never delays a round of the manager** (its Lease renewals): the writes
//!   run on their own task, which the manager hands each round's report without
//!   waiting.
//! - **The latest report wins**: the task always writes the newest report it was given,
//!   never an older one after a newer.
//! - **Written when it changes**: each condition once after the manager starts (the pod
//!   may carry what an earlier container wrote), then only when it differs from the
//!   last one written. An idle instance makes no request.
//! - `lastTransitionTime` moves only when a condition's status does.
//!
//! # Errors
//! A failed write (the API server unreachable, the Role not yet naming a pod a scale-up
//! just made) is logged once per error and tried again every [`RETRY`] until it succeeds
//! or a newer report replaces it. The database runs on either way.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tokio::sync::watch;

use crate::pod::answers::{Answer, SURVEYED};
use crate::pod::app_password::{self, APP_PASSWORD};
use crate::pod::applied::{SETTINGS_APPLIED, SettingsReport};
use crate::pod::archived::ARCHIVED;
use crate::pod::archived::LastArchived;
use crate::pod::archiving::{ARCHIVING, Archiving};
use crate::pod::managed::{OBJECTS_APPLIED, ObjectsReport};
use crate::pod::server::{SERVER, ServerRole};
use crate::pod::streaming::{self, STREAMING};
use crate::pod::synchronous::{self, SYNCHRONOUS, Waiting};
use crate::pod::volume::{self, DATA};

/// The pause before a failed write is tried again.
pub const RETRY: Duration = Duration::from_secs(5);

/// One condition as written: status, reason, message.
pub type Said = (&'static str, &'static str, String);

/// What the manager tells the operator this round, by condition type.
pub type Report = BTreeMap<&'static str, Said>;

/// What a round has to say, each part `None` when there is nothing to say about it this
/// round.
#[derive(Debug, Default)]
pub struct Round<'a> {
    /// What the server made of the settings.
    pub settings: Option<&'a SettingsReport>,
    /// For a standby, whether it streams.
    pub streaming: Option<bool>,
    /// For an archiving primary, whether its WAL reaches the archive.
    pub archiving: Option<&'a Archiving>,
    /// For a primary with `spec.synchronous`: what its commits wait for.
    pub synchronous: Option<&'a Waiting>,
    /// Whether the volume holds a database.
    pub data: Option<bool>,
    /// For an archiving primary, the last WAL file archived and when.
    pub archived: Option<&'a (String, DateTime<Utc>)>,
    /// For a running server, what it is and on which timeline.
    pub server: Option<ServerRole>,
    /// For a standby the Lease asks, its answer to the failover's survey.
    pub answer: Option<&'a Answer>,
    /// For the writable server with `spec.roles` or `spec.databases`, what it made of
    /// them ([`crate::pod::managed`]).
    pub objects: Option<&'a ObjectsReport>,
    /// For the writable server, the version of the application role's Secret its
    /// password follows ([`crate::pod::app_password`]).
    pub app_password: Option<&'a str>,
}

/// This round's report, by condition type.
#[must_use]
pub fn report(round: &Round<'_>) -> Report {
    let mut report = Report::new();
    if let Some(settings) = round.settings {
        report.insert(SETTINGS_APPLIED, settings.condition());
    }
    if let Some(streams) = round.streaming {
        report.insert(STREAMING, streaming::condition(streams));
    }
    if let Some(archiving) = round.archiving {
        report.insert(ARCHIVING, archiving.condition());
    }
    if let Some(waiting) = round.synchronous {
        report.insert(SYNCHRONOUS, synchronous::condition(waiting));
    }
    if let Some(has_data) = round.data {
        report.insert(DATA, volume::condition(has_data));
    }
    if let Some((wal, time)) = round.archived {
        report.insert(ARCHIVED, LastArchived::condition(wal, *time));
    }
    if let Some(server) = round.server {
        report.insert(SERVER, server.condition());
    }
    if let Some(answer) = round.answer {
        report.insert(SURVEYED, answer.condition());
    }
    if let Some(objects) = round.objects {
        report.insert(OBJECTS_APPLIED, objects.condition());
    }
    if let Some(version) = round.app_password {
        report.insert(APP_PASSWORD, app_password::condition(version));
    }
    report
}

/// Hands reports to the writing task.
#[derive(Debug)]
pub struct Reporter {
    tx: watch::Sender<Report>,
    api: Api<Pod>,
    pod: String,
}

impl Reporter {
    /// Starts the task writing the reports of pod `pod` in `namespace`.
    #[must_use]
    pub fn start(client: kube::Client, namespace: &str, pod: &str) -> Self {
        let (tx, rx) = watch::channel(Report::new());
        let api = Api::namespaced(client, namespace);
        tokio::spawn(write_reports(api.clone(), pod.to_owned(), rx));
        Self {
            tx,
            api,
            pod: pod.to_owned(),
        }
    }

    /// Writes `report` now, within `bound`, for a manager about to exit (whose writing
    /// task would not get to it): whether it was written.
    pub async fn tell_before_exit(&self, report: &Report, bound: Duration) -> bool {
        let types: Vec<&str> = report.keys().copied().collect();
        let body = Patch::Strategic(patch(report, &types, chrono::Utc::now()));
        let params = PatchParams::default();
        let write = self.api.patch_status(&self.pod, &params, &body);
        match tokio::time::timeout(bound, write).await {
            Ok(Ok(_)) => true,
            Ok(Err(error)) => {
                tracing::warn!(%error, "could not tell the operator before exiting");
                false
            }
            Err(_) => {
                tracing::warn!("could not tell the operator before exiting: no answer in time");
                false
            }
        }
    }

    /// This round's report (a condition it leaves out keeps what was said of it);
    /// returns at once.
    pub fn report(&self, report: Report) {
        self.tx.send_if_modified(|latest| {
            let mut merged = latest.clone();
            merged.extend(report);
            let changed = merged != *latest;
            if changed {
                *latest = merged;
            }
            changed
        });
    }
}

/// The strategic merge patch of `pods/status` that sets the conditions of `changed`
/// (merged by their `type`, so the kubelet's conditions stay); those named in
/// `transitions` have their `lastTransitionTime` moved to `now`.
#[must_use]
pub fn patch(
    changed: &Report,
    transitions: &[&str],
    now: chrono::DateTime<chrono::Utc>,
) -> serde_json::Value {
    let conditions: Vec<serde_json::Value> = changed
        .iter()
        .map(|(type_, (status, reason, message))| {
            let mut condition = json!({
                "type": type_,
                "status": status,
                "reason": reason,
                "message": message,
            });
            if transitions.contains(type_) {
                condition["lastTransitionTime"] =
                    json!(now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
            }
            condition
        })
        .collect();
    json!({"status": {"conditions": conditions}})
}

async fn write_reports(api: Api<Pod>, pod: String, mut rx: watch::Receiver<Report>) {
    let mut written = Report::new();
    let mut last_error: Option<String> = None;
    while rx.changed().await.is_ok() {
        loop {
            let report = rx.borrow_and_update().clone();
            let changed: Report = report
                .iter()
                .filter(|(type_, said)| written.get(*type_) != Some(*said))
                .map(|(type_, said)| (*type_, said.clone()))
                .collect();
            if changed.is_empty() {
                break;
            }
            let transitions: Vec<&str> = changed
                .iter()
                .filter(|(type_, (status, _, _))| {
                    written.get(*type_).is_none_or(|(was, _, _)| was != status)
                })
                .map(|(type_, _)| *type_)
                .collect();
            let body = patch(&changed, &transitions, chrono::Utc::now());
            match api
                .patch_status(&pod, &PatchParams::default(), &Patch::Strategic(body))
                .await
            {
                Ok(_) => {
                    tracing::info!(conditions = ?changed, "reported on the pod");
                    written.extend(changed);
                    last_error = None;
                    break;
                }
                Err(error) => {
                    let error = error.to_string();
                    if last_error.as_deref() != Some(&error) {
                        tracing::warn!(%error, "reporting on the pod failed: trying again");
                        last_error = Some(error);
                    }
                    tokio::select! {
                        () = tokio::time::sleep(RETRY) => {}
                        changed = rx.changed() => if changed.is_err() { return },
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_merges_the_changed_conditions_and_moves_a_time_only_on_a_transition() {
        let settings = SettingsReport {
            refused: vec![],
            pending_restart: vec!["shared_buffers".to_owned()],
            judged: None,
        };
        let now = chrono::DateTime::from_timestamp(1_800_000_000, 0).expect("a time");
        let changed = report(&Round {
            settings: Some(&settings),
            streaming: Some(false),
            ..Round::default()
        });
        assert_eq!(
            patch(&changed, &[SETTINGS_APPLIED], now),
            json!({"status": {"conditions": [
                {
                    "type": "lockstep.dev/SettingsApplied",
                    "status": "False",
                    "reason": "PendingRestart",
                    "message": "pending restart: shared_buffers",
                    "lastTransitionTime": "2027-01-15T08:00:00Z",
                },
                {
                    "type": "lockstep.dev/Streaming",
                    "status": "False",
                    "reason": "NotStreaming",
                    "message": "its WAL receiver has not streamed for 10 s or more: it is behind the primary",
                },
            ]}})
        );
    }

    #[test]
    fn a_primary_with_synchronous_replication_says_whether_it_turned_asynchronous() {
        let (_, said) = report(&Round {
            synchronous: Some(&Waiting::Relaxed(1)),
            ..Round::default()
        })
        .remove(SYNCHRONOUS)
        .map(|(status, reason, message)| ((status, reason), message))
        .expect("a synchronous report");
        assert!(said.contains("Preferred"), "{said}");
        let waits = report(&Round {
            synchronous: Some(&Waiting::Standbys(2)),
            ..Round::default()
        });
        assert_eq!(
            waits.get(SYNCHRONOUS).map(|(s, r, _)| (*s, *r)),
            Some(("True", "Synchronous"))
        );
        assert!(!report(&Round::default()).contains_key(SYNCHRONOUS));
    }
}
