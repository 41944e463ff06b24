//! CustomResourceDefinitions as YAML, for `lockstep crds` and for tests.

use kube::CustomResourceExt;

/// The CRD of `K` as a YAML document.
///
/// # Errors
/// The serializer's error, if the CRD cannot be written as YAML.
pub fn crd_yaml<K: CustomResourceExt>() -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&K::crd())
}
