//! Comparing and patching `.status` as JSON.
//!
//! The driver compares the status it would write with the status it read *as JSON
//! values* (object key order does not matter), and writes only the difference as an
//! RFC 7386 JSON merge patch: changed keys carry their new value, removed keys carry
//! `null`. Writing the whole new status instead would leave keys that the new status
//! omits (an `Option` that became `None`) in place, and the next reconcile would see a
//! difference again: a write loop.

use serde_json::{Map, Value};

/// The JSON merge patch that turns `old` into `new`, or `None` when they are equal.
///
/// # Guarantees
/// - Applying the result to `old` with RFC 7386 semantics yields `new`, provided `new`
///   contains no `null` values (merge patches cannot set a key to `null`; the driver's
///   statuses omit absent fields instead).
/// - Only keys that differ appear in the patch, recursively through objects; arrays are
///   replaced whole.
pub fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    if old == new {
        return None;
    }
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = Map::new();
            for (key, value) in new {
                match old.get(key) {
                    Some(before) => {
                        if let Some(diff) = merge_diff(before, value) {
                            patch.insert(key.clone(), diff);
                        }
                    }
                    None => {
                        patch.insert(key.clone(), value.clone());
                    }
                }
            }
            for key in old.keys().filter(|k| !new.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            Some(Value::Object(patch))
        }
        _ => Some(new.clone()),
    }
}

/// Apply an RFC 7386 merge patch to `target` (what the API server does with it).
pub fn apply_merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(map) = target {
        for (key, value) in patch {
            if value.is_null() {
                map.remove(key);
            } else {
                apply_merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// The body of a fenced status write: the merge patch of `status`, plus
/// `metadata.resourceVersion` so that the API server rejects the write with 409 Conflict
/// if the object changed since it was read.
pub fn fenced_status_patch(resource_version: &str, status_diff: Value) -> Value {
    serde_json::json!({
        "metadata": { "resourceVersion": resource_version },
        "status": status_diff,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn roundtrip(old: Value, new: Value) {
        let patch = merge_diff(&old, &new).expect("values differ");
        let mut patched = old;
        apply_merge_patch(&mut patched, &patch);
        assert_eq!(patched, new);
    }

    #[test]
    fn equal_values_need_no_patch() {
        let status = json!({"phase": "Ready", "conditions": [{"type": "Ready"}]});
        assert_eq!(merge_diff(&status, &status.clone()), None);
    }

    #[test]
    fn key_order_does_not_matter() {
        let a: Value = serde_json::from_str(r#"{"a": 1, "b": {"c": 2, "d": 3}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"b": {"d": 3, "c": 2}, "a": 1}"#).unwrap();
        assert_eq!(merge_diff(&a, &b), None);
    }

    #[test]
    fn only_changed_keys_are_sent() {
        let old = json!({"phase": "Creating", "observedGeneration": 1, "machine": {"state": {"name": "Creating"}, "stateVersion": 1}});
        let new = json!({"phase": "Ready", "observedGeneration": 1, "machine": {"state": {"name": "Ready"}, "stateVersion": 1}});
        assert_eq!(
            merge_diff(&old, &new),
            Some(json!({"phase": "Ready", "machine": {"state": {"name": "Ready"}}}))
        );
    }

    #[test]
    fn removed_keys_are_nulled() {
        let old = json!({"step": "2/PreHook", "machine": {"lastError": "boom", "stateVersion": 1}});
        let new = json!({"machine": {"stateVersion": 1}});
        assert_eq!(
            merge_diff(&old, &new),
            Some(json!({"step": null, "machine": {"lastError": null}}))
        );
    }

    #[test]
    fn arrays_are_replaced_whole() {
        let old = json!({"conditions": [{"type": "Ready", "status": "False"}]});
        let new = json!({"conditions": [{"type": "Ready", "status": "True"}]});
        assert_eq!(merge_diff(&old, &new), Some(new.clone()));
    }

    #[test]
    fn a_missing_status_is_written_whole() {
        let new = json!({"phase": "Creating"});
        assert_eq!(merge_diff(&Value::Null, &new), Some(new.clone()));
    }

    #[test]
    fn applying_the_diff_yields_the_new_value() {
        roundtrip(
            json!({"a": {"b": 1, "c": [1, 2]}, "d": "x", "e": {"f": true}}),
            json!({"a": {"b": 2, "c": [1]}, "e": {"g": false}, "h": 0}),
        );
        roundtrip(Value::Null, json!({"a": 1}));
        roundtrip(json!({"a": 1}), json!({}));
    }

    #[test]
    fn the_fenced_patch_carries_the_resource_version() {
        let patch = fenced_status_patch("42", json!({"phase": "Ready"}));
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(patch["status"]["phase"], "Ready");
    }
}
