//! The semantic drift check.
//!
//! Lockstep renders the object it wants and asks one question of the live copy: *does it
//! already contain everything we would apply?* Fields the API server or another
//! controller added (defaults such as `terminationMessagePath`, `clusterIP`,
//! `revisionHistoryLimit`, status, managed fields) are not ours and never count as
//! drift, so an object at rest is never re-applied and there is no update loop.
//!
//! Rules, for `desired ⊆ live`:
//! - objects: every key of `desired` is in `live` with a contained value; a desired
//!   `null`, `""`, `{}` or `[]` is also satisfied by an absent key (the API server drops
//!   empty values, such as an environment variable's empty `value`);
//! - arrays: the same length, and each element contained in the element at the same
//!   index (lists are ordered and their elements are ours, so an extra element is
//!   drift);
//! - strings: equal, or the same Kubernetes quantity (`0.5` and `500m`);
//! - numbers: numerically equal;
//! - anything else: equal.
//!
//! A field Lockstep *stops* setting is not drift by these rules; [`super::meta::APPLIED_HASH`]
//! covers that, since the hash of the rendered object changes with it.

use serde_json::Value;

use super::quantity;

/// Whether `live` contains everything in `desired`.
pub fn contains(live: &Value, desired: &Value) -> bool {
    match (desired, live) {
        (Value::Object(want), Value::Object(have)) => {
            want.iter().all(|(key, w)| match have.get(key) {
                Some(h) => contains(h, w),
                None => is_empty(w),
            })
        }
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| contains(h, w))
        }
        (Value::String(want), Value::String(have)) => quantity::same(want, have),
        (Value::Number(want), Value::Number(have)) => {
            want == have || want.as_f64().is_some_and(|w| Some(w) == have.as_f64())
        }
        (want, Value::Null) => is_empty(want),
        (want, have) => want == have,
    }
}

/// `null`, `""`, `{}` or `[]`.
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// [`contains`] for typed objects.
///
/// # Errors
/// [`super::Error::Serialize`] if either object does not serialize.
pub fn typed_contains<T: serde::Serialize>(live: &T, desired: &T) -> Result<bool, super::Error> {
    let to_value = |v: &T, what: &str| {
        serde_json::to_value(v).map_err(|source| super::Error::Serialize {
            what: what.to_owned(),
            source,
        })
    };
    Ok(contains(
        &to_value(live, "the live object")?,
        &to_value(desired, "the desired object")?,
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn api_server_defaults_are_not_drift() {
        let desired = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "db", "image": "db:1", "ports": [{"containerPort": 8080}]}
        ]}}}});
        let live = json!({"spec": {"revisionHistoryLimit": 10, "template": {"spec": {
            "dnsPolicy": "ClusterFirst",
            "containers": [{"name": "db", "image": "db:1",
                "terminationMessagePath": "/dev/termination-log",
                "ports": [{"containerPort": 8080, "protocol": "TCP"}]}]
        }}}, "status": {"replicas": 3}});
        assert!(contains(&live, &desired));
    }

    #[test]
    fn a_changed_or_missing_field_is_drift() {
        let desired = json!({"spec": {"replicas": 3, "image": "db:2"}});
        assert!(!contains(
            &json!({"spec": {"replicas": 3, "image": "db:1"}}),
            &desired
        ));
        assert!(!contains(&json!({"spec": {"image": "db:2"}}), &desired));
    }

    #[test]
    fn an_extra_list_element_is_drift() {
        let desired = json!({"env": [{"name": "A", "value": "1"}]});
        let live = json!({"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]});
        assert!(!contains(&live, &desired));
    }

    #[test]
    fn canonicalized_quantities_are_not_drift() {
        let desired = json!({"requests": {"cpu": "0.5", "memory": "1024Mi"}});
        let live = json!({"requests": {"cpu": "500m", "memory": "1Gi"}});
        assert!(contains(&live, &desired));
    }

    #[test]
    fn empty_values_match_absent_ones() {
        let desired = json!({"metadata": {"annotations": {}}, "args": [], "x": null});
        assert!(contains(&json!({"metadata": {}}), &desired));
        let env = json!({"env": [{"name": "S3_PREFIX", "value": ""}]});
        assert!(contains(&json!({"env": [{"name": "S3_PREFIX"}]}), &env));
    }
}
