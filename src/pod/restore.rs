//! A restore's request as both sides read it: `spec.restore` and the recovery targets
//! (CRD types the operator takes from the spec), pgBackRest's arguments for a target,
//! and the in-place restore's contract between the operator and the instance manager:
//! the pod annotation [`RESTORE_ANNOTATION`] that tells a primary-to-be on an empty
//! volume to restore this cluster's own repository up to a target instead of running
//! `initdb`.
//!
//! The operator writes it on pod 0 in the `RestorePrimary` step of an in-place restore
//! (`decide/restoring.rs`), before it labels the pod primary; the manager reads it from
//! the downward-API annotations file when it bootstraps. The kubelet writes the labels
//! and the annotations of one pod version together, so a manager that sees the label
//! sees the annotation. A pod made from the StatefulSet's template carries none, so a
//! restore never outlives the pod it was written on.

use chrono::{DateTime, Utc};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

/// `spec.restore`: a request to rewind the running cluster to a point of its own
/// archive.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSpec {
    /// Any new value runs the restore once (a value already served does nothing, so a
    /// retry of the same request is harmless).
    #[schemars(length(min = 1, max = 63))]
    pub token: String,
    /// Where recovery stops and the restored primary is promoted. Absent: the end of
    /// the archive.
    pub target: Option<RecoveryTarget>,
}

/// `spec.bootstrap.recovery.target` and `spec.restore.target`: exactly one of its fields.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new(
        "[has(self.time), has(self.lsn), has(self.name), has(self.immediate)].filter(x, x).size() == 1 && (!has(self.immediate) || self.immediate)"
    )
    .message("set exactly one of time, lsn, name and immediate (true)")
)]
pub struct RecoveryTarget {
    /// Replay every transaction committed up to this moment (RFC 3339, inclusive).
    pub time: Option<DateTime<Utc>>,
    /// Replay up to this WAL position (`16/B374D848`, inclusive).
    #[schemars(regex(pattern = "^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$"))]
    pub lsn: Option<String>,
    /// Replay up to the restore point of this name (`pg_create_restore_point`).
    #[schemars(length(min = 1, max = 63))]
    pub name: Option<String>,
    /// `true`: stop as soon as the base backup is consistent.
    pub immediate: Option<bool>,
}

/// pgBackRest's restore `--type` and `--target` for a recovery target (absent: the end
/// of the archive).
#[must_use]
pub fn target_args(target: Option<&RecoveryTarget>) -> (&'static str, Option<String>) {
    match target {
        None => ("default", None),
        Some(t) => match (&t.time, &t.lsn, &t.name) {
            // pgBackRest's form (and PostgreSQL's): `YYYY-MM-DD HH:MM:SS[.f]+00`.
            (Some(time), _, _) => (
                "time",
                Some(time.format("%Y-%m-%d %H:%M:%S%.f+00").to_string()),
            ),
            (None, Some(lsn), _) => ("lsn", Some(lsn.clone())),
            (None, None, Some(name)) => ("name", Some(name.clone())),
            (None, None, None) => ("immediate", None),
        },
    }
}

/// The pod annotation: the [`RestoreSpec`] being served, as JSON.
pub const RESTORE_ANNOTATION: &str = "lockstep.dev/restore";

/// The annotation's value for `request`.
#[must_use]
pub fn annotation_value(request: &RestoreSpec) -> String {
    // A struct of strings and a bool always serializes.
    serde_json::to_string(request).unwrap_or_default()
}

/// The restore a downward-API annotations file (`key="value"` per line, values
/// Go-quoted) asks for: `None` when the annotation is absent.
///
/// # Errors
/// The annotation is present but is not a quoted [`RestoreSpec`]: the manager must not
/// run `initdb` in place of a restore it was asked for.
pub fn from_annotations(text: &str) -> Result<Option<RestoreSpec>, String> {
    let Some(quoted) = text.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key == RESTORE_ANNOTATION).then_some(value.trim())
    }) else {
        return Ok(None);
    };
    let value = super::downward::go_unquote(quoted)
        .ok_or_else(|| format!("{RESTORE_ANNOTATION} is not quoted"))?;
    serde_json::from_str(&value)
        .map(Some)
        .map_err(|e| format!("{RESTORE_ANNOTATION}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_annotation_carries_the_request_through_the_downward_api_file() {
        let request = RestoreSpec {
            token: "before-migration".to_owned(),
            target: Some(RecoveryTarget {
                time: "2026-12-04T06:30:00Z".parse().ok(),
                ..RecoveryTarget::default()
            }),
        };
        let value = annotation_value(&request);
        // The kubelet writes each value Go-quoted.
        let quoted = format!("{value:?}");
        let file = format!("other=\"x\"\n{RESTORE_ANNOTATION}={quoted}\n");
        assert_eq!(from_annotations(&file), Ok(Some(request)));
    }

    #[test]
    fn no_annotation_is_no_restore_and_a_garbled_one_is_an_error() {
        assert_eq!(from_annotations("other=\"x\"\n"), Ok(None));
        assert!(from_annotations(&format!("{RESTORE_ANNOTATION}=\"{{\"\n")).is_err());
    }
}
