//! The instance manager's access to the API server: a projected service-account token
//! that expires after [`TOKEN_SECONDS`], with the cluster's CA and the namespace,
//! mounted where an in-cluster client reads them ([`PATH`]) in the `postgres` container
//! only. The pod itself mounts no token (`automountServiceAccountToken: false`), so the
//! init container that copies the manager in has none.
//!
//! # Guarantees
//! - **Short-lived**: the kubelet asks the API server for a token valid
//!   [`TOKEN_SECONDS`] and replaces the file at 80 % of that; the manager's client reads
//!   the file again every minute. A token copied out of a pod stops working within
//!   [`TOKEN_SECONDS`], not the year a legacy token lasted.
//! - **Bound to the pod**: a projected token names its pod, and the API server refuses
//!   it once that pod is deleted.
//!
//! # Assumptions
//! - The audience is the API server's own (none is named): a token with an audience of
//!   its own would be refused unless the API server lists it in `--api-audiences`, which
//!   Lockstep cannot require of the clusters it runs on.
//! - The manager and PostgreSQL share the container: a SQL superuser can read the token
//!   (`pg_read_file`) and act as a member toward the API server for as long as it lasts
//!   (`docs/security.md`). The application role is not a superuser.

use k8s_openapi::api::core::v1::{
    ConfigMapProjection, DownwardAPIProjection, DownwardAPIVolumeFile, KeyToPath,
    ObjectFieldSelector, ProjectedVolumeSource, ServiceAccountTokenProjection, Volume, VolumeMount,
    VolumeProjection,
};

/// How long a projected token is valid, in seconds: the shortest the API server grants.
pub const TOKEN_SECONDS: i64 = 600;

/// Where an in-cluster client reads the token, the CA and the namespace.
pub const PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The volume's name.
const VOLUME: &str = "api-access";

/// The projected volume and its mount (read-only, at [`PATH`]).
pub fn volume() -> (Volume, VolumeMount) {
    let token = VolumeProjection {
        service_account_token: Some(ServiceAccountTokenProjection {
            audience: None,
            expiration_seconds: Some(TOKEN_SECONDS),
            path: "token".to_owned(),
            ..ServiceAccountTokenProjection::default()
        }),
        ..VolumeProjection::default()
    };
    let ca = VolumeProjection {
        config_map: Some(ConfigMapProjection {
            name: "kube-root-ca.crt".to_owned(),
            items: Some(vec![KeyToPath {
                key: "ca.crt".to_owned(),
                path: "ca.crt".to_owned(),
                ..KeyToPath::default()
            }]),
            optional: None,
        }),
        ..VolumeProjection::default()
    };
    let namespace = VolumeProjection {
        downward_api: Some(DownwardAPIProjection {
            items: Some(vec![DownwardAPIVolumeFile {
                path: "namespace".to_owned(),
                field_ref: Some(ObjectFieldSelector {
                    api_version: Some("v1".to_owned()),
                    field_path: "metadata.namespace".to_owned(),
                }),
                ..DownwardAPIVolumeFile::default()
            }]),
        }),
        ..VolumeProjection::default()
    };
    (
        Volume {
            name: VOLUME.to_owned(),
            projected: Some(ProjectedVolumeSource {
                sources: Some(vec![token, ca, namespace]),
                ..ProjectedVolumeSource::default()
            }),
            ..Volume::default()
        },
        VolumeMount {
            name: VOLUME.to_owned(),
            mount_path: PATH.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
    )
}
