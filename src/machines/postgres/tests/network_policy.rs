//! The per-cluster NetworkPolicy: what it lets in, and its upkeep.

use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::rendering::object;
use super::*;
use crate::machines::postgres::api::NetworkPolicySpec;
use crate::machines::postgres::observe::observe;
use crate::machines::postgres::render::netpol::network_policy_from;

fn enabled() -> PostgresClusterSpec {
    PostgresClusterSpec {
        network_policy: NetworkPolicySpec { enabled: true },
        ..spec("16.3")
    }
}

/// The peers let in on `port`, each as its pod labels or its namespace's name.
fn peers(policy: &NetworkPolicy, port: i32) -> Vec<NetworkPolicyPeer> {
    let spec = policy.spec.clone().expect("a spec");
    spec.ingress
        .unwrap_or_default()
        .into_iter()
        .filter(|r| {
            r.ports
                .iter()
                .flatten()
                .any(|p| p.port == Some(IntOrString::Int(port)))
        })
        .flat_map(|r| r.from.unwrap_or_default())
        .collect()
}

fn pod_labels(peer: &NetworkPolicyPeer) -> Option<BTreeMap<String, String>> {
    peer.pod_selector.as_ref()?.match_labels.clone()
}

fn members() -> BTreeMap<String, String> {
    render::selector(&object(enabled()))
}

#[test]
fn the_policy_selects_the_instances_and_restricts_ingress_only() {
    let policy = render::network_policy(&object(enabled())).expect("renders");
    assert_eq!(policy.metadata.name.as_deref(), Some("pg"));
    assert_eq!(policy.metadata.namespace.as_deref(), Some("db"));
    let spec = policy.spec.expect("a spec");
    assert_eq!(
        spec.pod_selector.and_then(|s| s.match_labels),
        Some(members())
    );
    assert_eq!(spec.policy_types, Some(vec!["Ingress".to_owned()]));
    assert_eq!(spec.egress, None);
}

#[test]
fn postgresql_is_open_to_the_members_the_backup_jobs_and_pods_labelled_as_the_clusters_clients() {
    let policy = render::network_policy(&object(enabled())).expect("renders");
    let from = peers(&policy, 5432);
    assert_eq!(from.len(), 3);
    assert_eq!(pod_labels(&from[0]), Some(members()));
    assert_eq!(
        pod_labels(&from[1]).and_then(|l| l.get("lockstep.dev/component").cloned()),
        Some("backup".to_owned())
    );
    assert_eq!(
        pod_labels(&from[2]),
        Some(BTreeMap::from([(
            "lockstep.dev/client".to_owned(),
            "pg".to_owned()
        )]))
    );
    assert!(
        from.iter().all(|p| p.namespace_selector.is_none()),
        "only pods of the cluster's own namespace"
    );
}

#[test]
fn the_instance_managers_are_open_to_the_members_the_backup_jobs_and_the_operators_namespace() {
    let pg = object(enabled());
    let policy = network_policy_from(&pg, Some("lockstep-system")).expect("renders");
    let from = peers(&policy, 9187);
    assert_eq!(pod_labels(&from[0]), Some(members()));
    let backup_jobs = pod_labels(&from[1]).expect("the backup Jobs' pods");
    assert_eq!(
        backup_jobs
            .get("lockstep.dev/component")
            .map(String::as_str),
        Some("backup")
    );
    assert_eq!(
        backup_jobs
            .get("app.kubernetes.io/instance")
            .map(String::as_str),
        Some("pg")
    );
    let operator = from[2].namespace_selector.clone().expect("a namespace");
    assert_eq!(
        operator.match_labels,
        Some(BTreeMap::from([(
            "kubernetes.io/metadata.name".to_owned(),
            "lockstep-system".to_owned()
        )]))
    );
    assert!(
        from[2].pod_selector.is_none(),
        "every pod of that namespace"
    );
    // The base-backup Jobs' pods carry the labels the policy lets in.
    let backup = with_backups(enabled(), None);
    let job = render::backup_job(&object(backup), "backup-t1", BackupKind::OnDemand)
        .expect("renders")
        .expect("a Job");
    let template = job.spec.expect("spec").template.metadata.expect("metadata");
    let labels = template.labels.expect("labels");
    assert!(
        backup_jobs.iter().all(|(k, v)| labels.get(k) == Some(v)),
        "{labels:?} carries {backup_jobs:?}"
    );
}

#[test]
fn an_operator_that_does_not_know_its_namespace_lets_no_namespace_in() {
    let policy = network_policy_from(&object(enabled()), None).expect("renders");
    let from = peers(&policy, 9187);
    assert_eq!(from.len(), 2);
    assert!(from.iter().all(|p| p.namespace_selector.is_none()));
}

fn cache_with(policies: Vec<NetworkPolicy>) -> crate::driver::Cache {
    let mut cache = testing::cache::<crate::machines::postgres::Postgres>(Vec::new(), Vec::new());
    cache.network_policies = crate::driver::Owned::from_objects(render::KIND_LABEL, policies);
    cache
}

/// The policy as the API server returns it once applied for `object(enabled())`.
fn live() -> NetworkPolicy {
    let mut policy = render::network_policy(&object(enabled())).expect("renders");
    policy.metadata.uid = Some("np-uid".to_owned());
    policy.metadata.resource_version = Some("1".to_owned());
    policy
}

#[test]
fn an_enabled_policy_is_in_sync_only_while_it_exists_as_rendered() {
    let pg = object(enabled());
    let o = observe(&pg, &cache_with(Vec::new()));
    assert!(!o.own.in_sync.network_policy, "missing");
    let o = observe(&pg, &cache_with(vec![live()]));
    assert!(o.own.in_sync.network_policy, "as rendered");
    assert_eq!(o.own.network_policy_uid.as_deref(), Some("np-uid"));
    let mut edited = live();
    if let Some(spec) = edited.spec.as_mut() {
        spec.ingress = None;
    }
    edited.metadata.annotations = None;
    let o = observe(&pg, &cache_with(vec![edited]));
    assert!(!o.own.in_sync.network_policy, "edited");
}

#[test]
fn a_disabled_policy_is_in_sync_only_while_there_is_none() {
    let pg = object(spec("16.3"));
    let o = observe(&pg, &cache_with(Vec::new()));
    assert!(o.own.in_sync.network_policy);
    let o = observe(&pg, &cache_with(vec![live()]));
    assert!(!o.own.in_sync.network_policy, "a policy left from before");
}

#[test]
fn the_policy_is_applied_when_enabled_and_missing() {
    let mut o = at_rest(V1, 0);
    o.own.in_sync.network_policy = false;
    let d = decide(&enabled(), &ready(V1, 0), o);
    assert_eq!(d.actions(), &[PgAction::EnsureNetworkPolicy]);
}

#[test]
fn a_policy_left_from_when_it_was_enabled_is_deleted_by_its_uid() {
    let mut o = at_rest(V1, 0);
    o.own.in_sync.network_policy = false;
    o.own.network_policy_uid = Some("np-uid".to_owned());
    let d = decide(&spec("16.3"), &ready(V1, 0), o);
    assert_eq!(
        d.actions(),
        &[PgAction::DeleteNetworkPolicy {
            uid: "np-uid".to_owned()
        }]
    );
}

#[test]
fn a_cluster_at_rest_with_its_policy_in_place_does_nothing() {
    let mut o = at_rest(V1, 0);
    o.own.network_policy_uid = Some("np-uid".to_owned());
    let d = decide(&enabled(), &ready(V1, 0), o);
    assert!(d.actions().is_empty(), "{:?}", d.actions());
}
