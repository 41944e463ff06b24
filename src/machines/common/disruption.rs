//! The PodDisruptionBudget every database gets: voluntary disruptions (node drains,
//! evictions) take one of its pods at a time.
//!
//! One at a time keeps a quorum of three to five members through a drain with room for
//! one unplanned failure (a DistributedDB of 3 keeps 2, a quorum; of 5 keeps 4, one
//! more than a quorum), and keeps a PostgresCluster's standbys from being drained
//! together. A DistributedDB upgrade replaces its members through the eviction API, so
//! the same budget holds it against a drain it has not seen yet; a PostgresCluster's
//! own pod deletes (restarts, demotions) are deletes, which take one pod at a time
//! anyway. A cluster of one or two members has no quorum to keep through a disruption:
//! its budget still lets one pod go, so that a drain is never blocked for ever.
//!
//! A pod that is not Ready may always be evicted (`unhealthyPodEvictionPolicy:
//! AlwaysAllow`): it serves nothing, and a budget that already counts it as down must
//! not keep a drain, or an upgrade replacing it, from taking it.

use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::Error;
use super::applied::with_applied_hash;

/// The budget named and owned by `metadata`, over the pods `selector` matches:
/// `maxUnavailable: 1`, unhealthy pods always evictable.
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
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".to_owned()),
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
