//! Stamping rendered objects with the hash of what Lockstep applies.
//!
//! The drift check ([`super::subset`]) asks whether the live object contains the rendered
//! one, so a field Lockstep *stops* setting would never count as drift. Stamping the
//! rendered object with [`APPLIED_HASH`] (the hash of the object as rendered without it)
//! closes that gap: any change of intent changes the annotation, and the stale live
//! object no longer contains the new rendering.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use super::Error;
use super::meta::{APPLIED_HASH, short_hash};

/// Set [`APPLIED_HASH`] on `object` to the hash of the object as rendered without it.
///
/// # Errors
/// [`Error::Serialize`] if the object does not serialize.
pub fn with_applied_hash<T: Serialize>(
    mut object: T,
    meta: impl Fn(&mut T) -> &mut ObjectMeta,
) -> Result<T, Error> {
    let json = serde_json::to_string(&object).map_err(|source| Error::Serialize {
        what: "a rendered object".to_owned(),
        source,
    })?;
    let hash = short_hash(&[&json]);
    meta(&mut object)
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(APPLIED_HASH.to_owned(), hash);
    Ok(object)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    fn config_map(value: &str) -> ConfigMap {
        ConfigMap {
            data: Some(BTreeMap::from([("k".to_owned(), value.to_owned())])),
            ..ConfigMap::default()
        }
    }

    fn hash_of(cm: &ConfigMap) -> Option<String> {
        cm.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(APPLIED_HASH))
            .cloned()
    }

    #[test]
    fn the_same_rendering_gets_the_same_stamp_and_a_change_a_new_one() {
        let stamp = |v| with_applied_hash(config_map(v), |c| &mut c.metadata).ok();
        let (a, again, b) = (stamp("1"), stamp("1"), stamp("2"));
        assert!(a.as_ref().and_then(hash_of).is_some());
        assert_eq!(
            a.as_ref().and_then(hash_of),
            again.as_ref().and_then(hash_of)
        );
        assert_ne!(a.as_ref().and_then(hash_of), b.as_ref().and_then(hash_of));
    }
}
