//! The in-place restore's contract between the operator and the instance manager: the
//! pod annotation [`RESTORE_ANNOTATION`] that tells a primary-to-be on an empty volume
//! to restore this cluster's own repository up to a target instead of running `initdb`.
//!
//! The operator writes it on pod 0 in the `RestorePrimary` step of an in-place restore
//! (`decide/restoring.rs`), before it labels the pod primary; the manager reads it from
//! the downward-API annotations file when it bootstraps. The kubelet writes the labels
//! and the annotations of one pod version together, so a manager that sees the label
//! sees the annotation. A pod made from the StatefulSet's template carries none, so a
//! restore never outlives the pod it was written on.

use super::api::RestoreSpec;

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
    let value = crate::pod::downward::go_unquote(quoted)
        .ok_or_else(|| format!("{RESTORE_ANNOTATION} is not quoted"))?;
    serde_json::from_str(&value)
        .map(Some)
        .map_err(|e| format!("{RESTORE_ANNOTATION}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machines::postgres::api::RecoveryTarget;

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
