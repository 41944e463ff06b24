//! The PodDisruptionBudget every database gets: voluntary disruptions (node drains,
//! evictions) take one of its pods at a time.
//!
//! One at a time keeps a quorum of three to five members through a drain with room for
//! one unplanned failure (a DistributedDB of 3 keeps 2, a quorum; of 5 keeps 4, one
//! more than a quorum), and keeps a PostgresCluster's standbys from being drained
//! together. The machines' own pod deletes (upgrades, restarts) are deletes, not
//! evictions: the budget does not hold them, and they take one pod at a time anyway.
//! A cluster of one or two members has no quorum to keep through a disruption: its
//! budget still lets one pod go, so that a drain is never blocked for ever.

use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::Error;
use super::applied::with_applied_hash;

/// The budget named and owned by `metadata`, over the pods `selector` matches:
/// `maxUnavailable: 1`.
///
/// # Errors
/// [`Error`] if the object does not serialize.
pub fn one_at_a_time(
    metadata: ObjectMeta,
    selector: BTreeMap<String, String>,
) -> Result<PodDisruptionBudget, Error> {
    let pdb = PodDisruptionBudget {
        metadata,
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector),
                match_expressions: None,
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    };
    with_applied_hash(pdb, |p| &mut p.metadata)
}
