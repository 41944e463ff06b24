//! The per-cluster NetworkPolicy (`spec.networkPolicy.enabled`): who may open a
//! connection to the cluster's pods.
//!
//! # Guarantees
//! - Ingress only (`policyTypes: [Ingress]`): the pods' own connections (replication,
//!   the WAL archive's S3, the API server) are not restricted by it.
//! - It selects the instances only ([`super::selector`]); the backup Jobs' pods accept
//!   no connections and are not selected.
//! - PostgreSQL's port ([`PORT`]) is open to the cluster's members, to its backup Jobs
//!   (`lockstep.dev/component: backup` with the cluster's standard labels: a `pg_dump`
//!   backup connects to `<name>-rw`) and to the pods of the cluster's namespace
//!   labelled [`CLIENT_LABEL`]` = <name>`; the instance managers' port
//!   ([`METRICS_PORT`]) to the members, to the backup Jobs (a base backup asks the
//!   primary's manager) and to every pod of the operator's namespace, when the operator
//!   knows it ([`set_operator_namespace`]).
//!
//! # Assumptions
//! - NetworkPolicies match pods by labels and act at L4: a pod that carries a member's
//!   or a client's labels passes. Replication shares PostgreSQL's port; what restricts it
//!   to the members is `pg_hba` and the replication role's certificate, not this policy.
//! - The network plugin enforces NetworkPolicies; where it does not, the object is
//!   applied and changes nothing.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::{KIND_LABEL, METRICS_PORT, PORT, metadata, selector};
use crate::machines::common::Error;
use crate::machines::common::applied::with_applied_hash;
use crate::machines::common::meta;
use crate::machines::postgres::api::PostgresCluster;

/// The label a client pod carries, with the cluster's name as its value, to reach
/// PostgreSQL's port through the NetworkPolicy.
pub const CLIENT_LABEL: &str = "lockstep.dev/client";
/// The label every namespace carries with its own name (set by the API server).
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

static OPERATOR_NAMESPACE: OnceLock<Option<String>> = OnceLock::new();

/// Sets the namespace the operator runs in (the chart's `POD_NAMESPACE`), once per
/// process; a later call is ignored, so every render of a process agrees. `None` or
/// empty: unknown (an operator run outside the cluster), and no namespace is let in.
pub fn set_operator_namespace(namespace: Option<String>) {
    let _ = OPERATOR_NAMESPACE.set(namespace.filter(|n| !n.is_empty()));
}

/// The operator's namespace, if it was set.
pub fn operator_namespace() -> Option<&'static str> {
    OPERATOR_NAMESPACE.get().and_then(|n| n.as_deref())
}

/// The NetworkPolicy's name: the cluster's.
pub fn network_policy_name(pg: &PostgresCluster) -> String {
    pg.name_any()
}

fn pods(labels: BTreeMap<String, String>) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        pod_selector: Some(LabelSelector {
            match_labels: Some(labels),
            match_expressions: None,
        }),
        ..NetworkPolicyPeer::default()
    }
}

fn namespace(name: &str) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                NAMESPACE_NAME_LABEL.to_owned(),
                name.to_owned(),
            )])),
            match_expressions: None,
        }),
        ..NetworkPolicyPeer::default()
    }
}

fn rule(port: i32, from: Vec<NetworkPolicyPeer>) -> NetworkPolicyIngressRule {
    NetworkPolicyIngressRule {
        from: Some(from),
        ports: Some(vec![NetworkPolicyPort {
            protocol: Some("TCP".to_owned()),
            port: Some(IntOrString::Int(port)),
            end_port: None,
        }]),
    }
}

/// The cluster's NetworkPolicy, in the operator's namespace as last set
/// ([`set_operator_namespace`]).
///
/// # Errors
/// [`Error`] if the owner has no UID or the object does not serialize.
pub fn network_policy(pg: &PostgresCluster) -> Result<NetworkPolicy, Error> {
    network_policy_from(pg, operator_namespace())
}

/// The cluster's NetworkPolicy, letting in the operator's namespace `operator` if known.
///
/// # Errors
/// [`Error`] if the owner has no UID or the object does not serialize.
pub fn network_policy_from(
    pg: &PostgresCluster,
    operator: Option<&str>,
) -> Result<NetworkPolicy, Error> {
    let members = pods(selector(pg));
    let clients = pods(BTreeMap::from([(CLIENT_LABEL.to_owned(), pg.name_any())]));
    let jobs = pods(meta::component_labels(KIND_LABEL, &pg.name_any(), "backup"));
    let mut managers = vec![members.clone(), jobs.clone()];
    managers.extend(operator.map(namespace));
    let policy = NetworkPolicy {
        metadata: metadata(pg, network_policy_name(pg))?,
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(selector(pg)),
                match_expressions: None,
            }),
            policy_types: Some(vec!["Ingress".to_owned()]),
            ingress: Some(vec![
                rule(PORT, vec![members, jobs, clients]),
                rule(METRICS_PORT, managers),
            ]),
            egress: None,
        }),
    };
    with_applied_hash(policy, |p| &mut p.metadata)
}
