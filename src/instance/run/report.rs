//! What this instance made of `spec.postgresql`, told to the operator as the condition
//! of [`crate::machines::postgres::applied`] on its own pod (`pods/status`).
//!
//! # Guarantees
//! - **A write never delays a round of the manager** (its Lease renewals): the writes
//!   run on their own task, which the manager hands each round's report without
//!   waiting.
//! - **The latest report wins**: the task always writes the newest report it was given,
//!   never an older one after a newer.
//! - **Written when it changes**: once after the manager starts (the pod may carry what
//!   an earlier container wrote), then only when the report differs from the last one
//!   written. An idle instance makes no request.
//! - `lastTransitionTime` moves only when the condition's status does.
//!
//! # Errors
//! A failed write (the API server unreachable, the Role not yet naming a pod a scale-up
//! just made) is logged once per error and tried again every [`RETRY`] until it succeeds
//! or a newer report replaces it. The database runs on either way.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tokio::sync::watch;

use crate::machines::postgres::applied::{SETTINGS_APPLIED, SettingsReport};

/// The pause before a failed write is tried again.
pub const RETRY: Duration = Duration::from_secs(5);

/// Hands reports to the writing task.
#[derive(Debug)]
pub struct Reporter {
    tx: watch::Sender<Option<SettingsReport>>,
}

impl Reporter {
    /// Starts the task writing the reports of pod `pod` in `namespace`.
    #[must_use]
    pub fn start(client: kube::Client, namespace: &str, pod: &str) -> Self {
        let (tx, rx) = watch::channel(None);
        tokio::spawn(write_reports(
            Api::namespaced(client, namespace),
            pod.to_owned(),
            rx,
        ));
        Self { tx }
    }

    /// This round's report; returns at once.
    pub fn report(&self, report: SettingsReport) {
        self.tx.send_if_modified(|latest| {
            let changed = latest.as_ref() != Some(&report);
            if changed {
                *latest = Some(report);
            }
            changed
        });
    }
}

/// The strategic merge patch of `pods/status` that sets the condition (merged by its
/// `type`, so the kubelet's conditions stay); with `transition`, it moves
/// `lastTransitionTime` to `now`.
#[must_use]
pub fn patch(
    report: &SettingsReport,
    transition: bool,
    now: chrono::DateTime<chrono::Utc>,
) -> serde_json::Value {
    let (status, reason, message) = report.condition();
    let mut condition = json!({
        "type": SETTINGS_APPLIED,
        "status": status,
        "reason": reason,
        "message": message,
    });
    if transition {
        condition["lastTransitionTime"] =
            json!(now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    }
    json!({"status": {"conditions": [condition]}})
}

async fn write_reports(
    api: Api<Pod>,
    pod: String,
    mut rx: watch::Receiver<Option<SettingsReport>>,
) {
    let mut written: Option<SettingsReport> = None;
    let mut last_error: Option<String> = None;
    while rx.changed().await.is_ok() {
        loop {
            let Some(report) = rx.borrow_and_update().clone() else {
                break;
            };
            if written.as_ref() == Some(&report) {
                break;
            }
            let transition = written
                .as_ref()
                .is_none_or(|w| w.applied() != report.applied());
            let body = patch(&report, transition, chrono::Utc::now());
            match api
                .patch_status(&pod, &PatchParams::default(), &Patch::Strategic(body))
                .await
            {
                Ok(_) => {
                    tracing::info!(condition = SETTINGS_APPLIED, report = ?report, "reported the settings on the pod");
                    written = Some(report);
                    last_error = None;
                    break;
                }
                Err(error) => {
                    let error = error.to_string();
                    if last_error.as_deref() != Some(&error) {
                        tracing::warn!(%error, "reporting the settings on the pod failed: trying again");
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
    fn the_patch_merges_one_condition_and_moves_its_time_only_on_a_transition() {
        let report = SettingsReport {
            refused: vec![],
            pending_restart: vec!["shared_buffers".to_owned()],
        };
        let now = chrono::DateTime::from_timestamp(1_800_000_000, 0).expect("a time");
        assert_eq!(
            patch(&report, true, now),
            json!({"status": {"conditions": [{
                "type": "lockstep.dev/SettingsApplied",
                "status": "False",
                "reason": "PendingRestart",
                "message": "pending restart: shared_buffers",
                "lastTransitionTime": "2027-01-15T08:00:00Z",
            }]}})
        );
        assert!(
            patch(&report, false, now)["status"]["conditions"][0]
                .get("lastTransitionTime")
                .is_none()
        );
    }
}
