//! The identity of owned objects: standard labels, owner references, stable hashes and
//! deterministic names.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use super::Error;
use crate::driver::labels;

/// The CEL rule on the root of a Lockstep resource: its name must also be a valid
/// Service name (DNS-1035: a lower-case letter first, then letters, digits and hyphens,
/// not ending in a hyphen), since Services, pods and Jobs are named after it.
pub const NAME_RULE: &str = "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')";
/// The message of [`NAME_RULE`].
pub const NAME_MESSAGE: &str = "metadata.name must start with a lower-case letter and hold only lower-case letters, digits and '-' (no '.'): the Services named after it must be valid DNS labels";
/// The CEL rule on a port name: an IANA service name (lower-case letters, digits and
/// single hyphens, at least one letter, no hyphen at either end), as Services require.
pub const PORT_NAME_RULE: &str = "self.matches('^[a-z0-9]([a-z0-9-]*[a-z0-9])?$') && self.matches('[a-z]') && !self.contains('--')";
/// The message of [`PORT_NAME_RULE`].
pub const PORT_NAME_MESSAGE: &str = "ports[].name must be an IANA service name: lower-case letters, digits and single hyphens, at least one letter, no hyphen at either end (such as \"client\")";

/// Label naming the part of a workload an object is (`database`, `hook`, `backup`).
pub const COMPONENT: &str = "lockstep.dev/component";
/// Label carrying a run-once Job's key (its deterministic identity within the owner).
pub const JOB_KEY: &str = "lockstep.dev/job";
/// Label naming what a Job is for (see [`super::jobs::Purpose`]).
pub const JOB_PURPOSE: &str = "lockstep.dev/purpose";
/// Finalizer on every run-once Job whose outcome a decision reads: the Job (and so its
/// outcome) stays until the operator has recorded that outcome in the owner's status,
/// however it is deleted (a person, a TTL, a namespace cleanup). See
/// [`super::jobs`]'s "Evidence kept until it is read".
pub const OUTCOME_FINALIZER: &str = "lockstep.dev/outcome";
/// Annotation holding the hash of what Lockstep last applied to an object, so a change
/// of intent (including a removed field) is noticed even when the live object still
/// contains everything now desired.
pub const APPLIED_HASH: &str = "lockstep.dev/applied-hash";

/// The longest name a Job may have: its name becomes the value of the `job-name` label
/// on its pods, and label values are at most 63 characters.
pub const MAX_JOB_NAME: usize = 63;
/// The longest name a CronJob may have: the CronJob controller appends 11 characters to
/// make its Jobs' names.
pub const MAX_CRONJOB_NAME: usize = 52;

/// The labels every object Lockstep creates for an owner carries.
pub fn standard_labels(kind_label: &str, instance: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            labels::MANAGED_BY.to_owned(),
            labels::MANAGED_BY_VALUE.to_owned(),
        ),
        (labels::NAME.to_owned(), kind_label.to_owned()),
        (labels::INSTANCE.to_owned(), instance.to_owned()),
    ])
}

/// [`standard_labels`] plus [`COMPONENT`].
pub fn component_labels(
    kind_label: &str,
    instance: &str,
    component: &str,
) -> BTreeMap<String, String> {
    let mut l = standard_labels(kind_label, instance);
    l.insert(COMPONENT.to_owned(), component.to_owned());
    l
}

/// `<service>.<namespace>.svc`: where a Service is reached in the cluster.
pub fn service_host(service: &str, namespace: &str) -> String {
    format!("{service}.{namespace}.svc")
}

/// `<owner>-<ordinal>.<owner>.<namespace>.svc`: the stable DNS name of a pod of the
/// owner's StatefulSet (named like the owner, governed by a headless Service of that
/// name).
pub fn pod_host(owner: &str, namespace: &str, ordinal: i32) -> String {
    service_host(&format!("{owner}-{ordinal}.{owner}"), namespace)
}

/// The controller owner reference to `owner` (with `blockOwnerDeletion`), so garbage
/// collection removes the child with its owner.
///
/// # Errors
/// [`Error::OwnerIncomplete`] if the owner has no name or UID.
pub fn owner_reference<K>(owner: &K) -> Result<OwnerReference, Error>
where
    K: Resource<DynamicType = ()>,
{
    let kind = K::kind(&()).into_owned();
    if owner.meta().name.is_none() {
        return Err(Error::OwnerIncomplete {
            kind,
            missing: "name",
        });
    }
    let mut reference = owner
        .controller_owner_ref(&())
        .ok_or(Error::OwnerIncomplete {
            kind,
            missing: "uid",
        })?;
    reference.block_owner_deletion = Some(true);
    Ok(reference)
}

/// An owner as its children see it: they are named after it, live in its namespace and
/// carry its controller reference.
#[derive(Debug, Clone, PartialEq)]
pub struct Owner {
    /// The owner's name.
    pub name: String,
    /// The owner's namespace (its children's).
    pub namespace: String,
    /// The controller reference to the owner ([`owner_reference`]).
    pub reference: OwnerReference,
}

impl Owner {
    /// `owner` as its children see it.
    ///
    /// # Errors
    /// [`Error::OwnerIncomplete`] if the owner has no name or UID.
    pub fn of<K>(owner: &K) -> Result<Self, Error>
    where
        K: Resource<DynamicType = ()>,
    {
        Ok(Owner {
            name: owner.name_any(),
            namespace: owner.namespace().unwrap_or_default(),
            reference: owner_reference(owner)?,
        })
    }

    /// The metadata of the child called `name`, labelled `labels`.
    pub fn child(&self, name: String, labels: BTreeMap<String, String>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace.clone()),
            labels: Some(labels),
            owner_references: Some(vec![self.reference.clone()]),
            ..ObjectMeta::default()
        }
    }
}

/// 64-bit FNV-1a: stable across builds and platforms (names derived from it are
/// persisted in the cluster).
pub fn fnv64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// An 8-hex-digit hash of `parts` (joined unambiguously).
pub fn short_hash(parts: &[&str]) -> String {
    let mut bytes = Vec::new();
    for p in parts {
        bytes.extend_from_slice(&(p.len() as u64).to_le_bytes());
        bytes.extend_from_slice(p.as_bytes());
    }
    format!("{:08x}", fnv64(&bytes) & 0xffff_ffff)
}

/// `{owner}-{suffix}`, at most `max` characters: if too long, the owner part is cut and
/// a hash of the whole owner name keeps distinct owners distinct.
pub fn child_name(owner: &str, suffix: &str, max: usize) -> String {
    let full = format!("{owner}-{suffix}");
    if full.len() <= max {
        return full;
    }
    let hash = short_hash(&[owner]);
    let keep = max.saturating_sub(suffix.len() + hash.len() + 2);
    let cut: String = owner.chars().take(keep).collect();
    let cut = cut.trim_end_matches(['-', '.']);
    format!("{cut}-{hash}-{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_the_reference_vectors() {
        assert_eq!(fnv64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn short_hashes_do_not_confuse_how_parts_are_split() {
        assert_ne!(short_hash(&["ab", "c"]), short_hash(&["a", "bc"]));
        assert_eq!(short_hash(&["x"]).len(), 8);
    }

    #[test]
    fn child_names_fit_and_stay_distinct() {
        assert_eq!(child_name("db", "pre-2", 63), "db-pre-2");
        let long_a = "a".repeat(70);
        let long_b = format!("{}b", "a".repeat(69));
        let a = child_name(&long_a, "final-backup-1", 63);
        let b = child_name(&long_b, "final-backup-1", 63);
        assert!(a.len() <= 63 && b.len() <= 63);
        assert!(a.ends_with("-final-backup-1"));
        assert_ne!(a, b);
    }
}
