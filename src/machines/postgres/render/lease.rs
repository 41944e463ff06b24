//! The primary Lease and the pods' identity: the ServiceAccount, Role and RoleBinding
//! that let them get, update and patch that Lease and nothing else.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role as RbacRole, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::ResourceExt;

use super::{metadata, namespace};
use crate::machines::common::Error;
use crate::machines::common::applied::with_applied_hash;
use crate::machines::postgres::actions::LsnGate;
use crate::machines::postgres::api::PostgresCluster;
use crate::machines::postgres::observe::{NEVER_HELD, RELEASED_BY, RELEASED_LSN};
use crate::pod::answers::SURVEY;
use crate::pod::managed::password_secrets;

/// The environment variable carrying the lease duration `L` a pod's fence runs with
/// (fixed when the pod is created; the operator reads it back: a pod created under a
/// longer `L` than the spec's now may still be writable that long).
pub const LEASE_SECONDS_ENV: &str = "LOCKSTEP_LEASE_SECONDS";

/// `<name>-primary`: the Lease naming the pod allowed to be writable.
pub fn lease_name(pg: &PostgresCluster) -> String {
    format!("{}-primary", pg.name_any())
}

/// `<name>-instance`: the pods' ServiceAccount, and its Role and RoleBinding.
pub fn instance_name(pg: &PostgresCluster) -> String {
    format!("{}-instance", pg.name_any())
}

/// A time as the API server's `MicroTime`.
pub fn micro_time(at: chrono::DateTime<chrono::Utc>) -> MicroTime {
    MicroTime(
        k8s_openapi::jiff::Timestamp::from_second(at.timestamp())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

/// The primary Lease naming `holder` (`<pod-name>/<pod-uid>`) at `at`, or nobody.
///
/// Its `renewTime` is `at` even when it names nobody: a Lease created in place of one
/// that vanished must expire `L + S` after its creation, when any former holder has
/// certainly stopped (it could not renew a Lease that did not exist), never stay
/// unexpired for want of a renewal time (`docs/decisions/0002-zero-loss.md`).
///
/// Its `leaseDurationSeconds` is `seconds`: for a Lease created in place of one that
/// vanished, the longest `L` any former holder may run with, so that its expiry waits
/// for them all. `never_held` marks a Lease created before anything of the cluster
/// existed (the annotation [`NEVER_HELD`]).
///
/// # Errors
/// [`Error`] if the owner has no UID.
pub fn lease(
    pg: &PostgresCluster,
    holder: Option<&str>,
    at: chrono::DateTime<chrono::Utc>,
    seconds: i64,
    never_held: bool,
) -> Result<Lease, Error> {
    let at = micro_time(at);
    let mut metadata = metadata(pg, lease_name(pg))?;
    if never_held {
        metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(NEVER_HELD.to_owned(), "true".to_owned());
    }
    Ok(Lease {
        metadata,
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            lease_duration_seconds: Some(i32::try_from(seconds).unwrap_or(i32::MAX)),
            acquire_time: holder.map(|_| at.clone()),
            renew_time: Some(at),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        }),
    })
}

fn lease_seconds(pg: &PostgresCluster) -> i32 {
    i32::try_from(pg.spec.fencing.lease_duration_seconds).unwrap_or(i32::MAX)
}

/// The merge patch handing the primary Lease to `holder` (or nobody) at `at`: it
/// clears `released-by` and `never-held`, and `released-lsn` too when `gate` waives it.
pub fn lease_hand_over(
    pg: &PostgresCluster,
    holder: Option<&str>,
    gate: LsnGate,
    transitions: i32,
    at: chrono::DateTime<chrono::Utc>,
) -> serde_json::Value {
    let at = micro_time(at);
    let mut annotations = serde_json::Map::new();
    annotations.insert(RELEASED_BY.to_owned(), serde_json::Value::Null);
    annotations.insert(NEVER_HELD.to_owned(), serde_json::Value::Null);
    if gate == LsnGate::Waive {
        annotations.insert(RELEASED_LSN.to_owned(), serde_json::Value::Null);
    }
    serde_json::json!({
        "metadata": {"annotations": annotations},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": lease_seconds(pg),
            "renewTime": at,
            "acquireTime": at,
            "leaseTransitions": transitions,
        }
    })
}

/// The merge patch asking the standbys to answer the survey `token` (the annotation
/// [`SURVEY`]): it changes nothing else, so a holder's renewal is not disturbed.
pub fn lease_survey(token: &str) -> serde_json::Value {
    serde_json::json!({"metadata": {"annotations": {SURVEY: token}}})
}

/// The pods' ServiceAccount `<name>-instance`. It mounts no token by default: the pods
/// project a short-lived one into the manager's container only ([`super::api_access`]).
///
/// # Errors
/// [`Error`] if the owner has no UID or the object does not serialize.
pub fn service_account(pg: &PostgresCluster) -> Result<ServiceAccount, Error> {
    let sa = ServiceAccount {
        metadata: metadata(pg, instance_name(pg))?,
        automount_service_account_token: Some(false),
        ..ServiceAccount::default()
    };
    with_applied_hash(sa, |s| &mut s.metadata)
}

/// The pods' Role: get, update and patch the Lease `<name>-primary`, and patch the
/// status of the cluster's own pods (`<name>-0` … `<name>-<replicas - 1>`: each
/// reports its settings there, [`crate::pod::applied`]); nothing else.
///
/// # Errors
/// [`Error`] if the owner has no UID or the object does not serialize.
pub fn instance_role(pg: &PostgresCluster) -> Result<RbacRole, Error> {
    let name = pg.name_any();
    let role = RbacRole {
        metadata: metadata(pg, instance_name(pg))?,
        rules: Some(vec![
            PolicyRule {
                api_groups: Some(vec!["coordination.k8s.io".to_owned()]),
                resources: Some(vec!["leases".to_owned()]),
                resource_names: Some(vec![lease_name(pg)]),
                verbs: ["get", "update", "patch"].map(str::to_owned).to_vec(),
                ..PolicyRule::default()
            },
            PolicyRule {
                api_groups: Some(vec![String::new()]),
                resources: Some(vec!["pods/status".to_owned()]),
                resource_names: Some(
                    (0..pg.spec.replicas.max(1))
                        .map(|k| format!("{name}-{k}"))
                        .collect(),
                ),
                verbs: vec!["patch".to_owned()],
                ..PolicyRule::default()
            },
        ]),
    };
    let mut role = role;
    let mut secrets = password_secrets(&pg.spec.roles);
    // The application role's password follows its Secret (`instance::run::app_password`).
    secrets.insert(super::app::app_name(pg));
    if let Some(rules) = role.rules.as_mut() {
        // The primary's manager reads the passwords of `spec.roles` and of the
        // application role (and only those).
        rules.push(PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["secrets".to_owned()]),
            resource_names: Some(secrets.into_iter().collect()),
            verbs: vec!["get".to_owned()],
            ..PolicyRule::default()
        });
    }
    with_applied_hash(role, |r| &mut r.metadata)
}

/// The RoleBinding of the pods' ServiceAccount to their Role.
///
/// # Errors
/// [`Error`] if the owner has no UID or the object does not serialize.
pub fn instance_binding(pg: &PostgresCluster) -> Result<RoleBinding, Error> {
    let binding = RoleBinding {
        metadata: metadata(pg, instance_name(pg))?,
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            kind: "Role".to_owned(),
            name: instance_name(pg),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: instance_name(pg),
            namespace: Some(namespace(pg)),
            api_group: None,
        }]),
    };
    with_applied_hash(binding, |b| &mut b.metadata)
}
