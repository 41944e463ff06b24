//! CustomResourceDefinitions as YAML, for `lockstep crds` and for tests.
//!
//! [`crd`] is `K::crd()` with one thing the derive cannot say: a rule at the root of the
//! schema about `metadata.name` reports that field. The API server accepts a
//! `fieldPath` only into fields the schema declares, and the derived root schema does not
//! declare `metadata`; so [`crd`] declares `metadata.name` (a string: the only thing a
//! CRD may say of it besides restrictions) and points those rules at it. Without it, a
//! refused name reads `<nil>: Invalid value: ...`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::CustomResourceExt;

/// The field path of `metadata.name`, as a validation rule's `fieldPath` gives it.
const NAME_PATH: &str = ".metadata.name";

/// The CRD of `K`, its root rules about `metadata.name` reporting that field.
pub fn crd<K: CustomResourceExt>() -> CustomResourceDefinition {
    with_name_paths(K::crd())
}

/// `crd` with `metadata.name` declared in each version's root schema and every root
/// rule that reads `self.metadata.name` (and names no field yet) reporting it, with
/// reason `FieldValueInvalid`.
pub fn with_name_paths(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let Some(root) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        let Some(rules) = root.x_kubernetes_validations.as_mut() else {
            continue;
        };
        let mut points = false;
        for rule in rules
            .iter_mut()
            .filter(|r| r.rule.contains("self.metadata.name") && r.field_path.is_none())
        {
            rule.field_path = Some(NAME_PATH.to_owned());
            rule.reason = Some("FieldValueInvalid".to_owned());
            points = true;
        }
        if points {
            let properties = root.properties.get_or_insert_with(Default::default);
            let metadata =
                properties
                    .entry("metadata".to_owned())
                    .or_insert_with(|| JSONSchemaProps {
                        type_: Some("object".to_owned()),
                        ..JSONSchemaProps::default()
                    });
            metadata
                .properties
                .get_or_insert_with(Default::default)
                .entry("name".to_owned())
                .or_insert_with(|| JSONSchemaProps {
                    type_: Some("string".to_owned()),
                    ..JSONSchemaProps::default()
                });
        }
    }
    crd
}

/// The CRD of `K` as a YAML document ([`crd`]).
///
/// # Errors
/// The serializer's error, if the CRD cannot be written as YAML.
pub fn crd_yaml<K: CustomResourceExt>() -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&crd::<K>())
}
