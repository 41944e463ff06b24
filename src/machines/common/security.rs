//! The security context of every pod Lockstep renders: each one is admitted in a
//! namespace labelled `pod-security.kubernetes.io/enforce: restricted`.
//!
//! # Guarantees
//! A pod passed through [`restrict`] meets the `restricted` Pod Security Standard as
//! far as its security contexts go: the pod runs as a non-root user and group
//! (`runAsNonRoot: true`, a non-zero `runAsUser`), under the runtime's default seccomp
//! profile, with its volumes' group set to `fsGroup` (so a non-root user can write
//! them), and every container and init container drops every capability and cannot
//! gain privileges (`allowPrivilegeEscalation: false`).
//!
//! # Assumptions
//! The pod's volumes are of the kinds `restricted` allows (claims, `emptyDir`,
//! ConfigMaps, Secrets, the downward API): the renderers use no others. The images run
//! as the user given here: nothing in them needs root.

use k8s_openapi::api::core::v1::{
    Capabilities, PodSecurityContext, PodSpec, SeccompProfile, SecurityContext,
};

/// The uid and gid the pods of a DistributedDB run as (the `nonroot` user of
/// distroless images, and of the images `tools/images` builds).
pub const NON_ROOT_UID: i64 = 65532;

/// The pod-level context: `uid` as user, group and volume group, non-root, the
/// runtime's default seccomp profile. The kubelet changes the group of a volume only
/// when its root does not have it yet (`OnRootMismatch`), not on every mount of a data
/// directory that may hold millions of files.
#[must_use]
pub fn pod_context(uid: i64) -> PodSecurityContext {
    PodSecurityContext {
        run_as_user: Some(uid),
        run_as_group: Some(uid),
        fs_group: Some(uid),
        fs_group_change_policy: Some("OnRootMismatch".to_owned()),
        run_as_non_root: Some(true),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_owned(),
            localhost_profile: None,
        }),
        ..PodSecurityContext::default()
    }
}

/// The container-level context: no capability, no privilege escalation.
#[must_use]
pub fn container_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            add: None,
        }),
        ..SecurityContext::default()
    }
}

/// `pod` runs as `uid` ([`pod_context`]) and each of its containers and init
/// containers with [`container_context`].
pub fn restrict(pod: &mut PodSpec, uid: i64) {
    pod.security_context = Some(pod_context(uid));
    for container in pod
        .containers
        .iter_mut()
        .chain(pod.init_containers.iter_mut().flatten())
    {
        container.security_context = Some(container_context());
    }
}
