//! The endpoint token: the shared secret that authorises a write to an instance
//! manager's endpoints (`POST /backup`, `instance::run::auth`).
//!
//! One Secret per cluster, `<name>-endpoint-token`, one key ([`TOKEN_KEY`]): 32 random
//! alphanumeric characters, drawn when it is rendered. The instances read it from a
//! file (a Secret volume, mode `0440`, at [`TOKEN_PATH`]); the base-backup Jobs from an
//! environment variable ([`TOKEN_ENV`]) that `basebackup.sh` hands to curl on stdin.
//!
//! # Guarantees
//! - **Created once, never re-rendered**: like the credentials Secret, it is a
//!   create-if-absent ([`crate::driver::Op::create`]; `AlreadyExists` counts as
//!   success), so the value the pods and Jobs read never changes while they run.
//! - **Before anything reads it**: it is the first request of every StatefulSet apply
//!   (before any pod exists, and again when the StatefulSet is restored) and of every
//!   backup Job's creation (a cluster created before the token existed gets it before
//!   its first Job).
//! - **Kept, not owned** (no owner reference), like `<name>-credentials` and the volume
//!   claims: an owned Secret is deleted by the garbage collector after the cluster, and a
//!   cluster re-created under the same name in the meantime finds it existing (its
//!   create succeeds), then loses it, and its managers refuse every backup. Kept, it never
//!   changes for the life of any pod of that name; it is a few bytes, removed by hand
//!   with the credentials Secret when the cluster is gone for good.
//!
//! # Assumptions
//! - Nobody edits or deletes the Secret while the cluster runs: the managers read the
//!   file at each request, but nothing re-creates a deleted Secret before the next
//!   StatefulSet apply or backup Job (`docs/security.md` says so: it cannot be rotated
//!   yet).
//!
//! # Errors
//! None: rendering is infallible.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    EnvVar, KeyToPath, Secret, SecretVolumeSource, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::super::api::PostgresCluster;
use super::{labels, mount, namespace, password};
use crate::machines::common::env::plain;

/// The Secret's only key.
pub const TOKEN_KEY: &str = "token";
/// The instances' setting naming the token's file (`instance::run::args`).
pub const TOKEN_FILE_ENV: &str = "LOCKSTEP_ENDPOINT_TOKEN_FILE";
/// The base-backup Jobs' variable holding the token (`basebackup.sh`).
pub const TOKEN_ENV: &str = "LOCKSTEP_ENDPOINT_TOKEN";
/// Where the token's volume is mounted in the instances.
pub const TOKEN_DIR: &str = "/etc/lockstep/endpoint-token";
/// The token's file in the instances.
pub const TOKEN_PATH: &str = "/etc/lockstep/endpoint-token/token";
/// Its volume's name.
const TOKEN_VOLUME: &str = "endpoint-token";

/// `<name>-endpoint-token`.
#[must_use]
pub fn token_name(pg: &PostgresCluster) -> String {
    format!("{}-endpoint-token", pg.name_any())
}

/// The endpoint token Secret, with a fresh random token. Created once, never applied
/// (see the module doc).
#[must_use]
pub fn endpoint_token_secret(pg: &PostgresCluster) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(token_name(pg)),
            namespace: Some(namespace(pg)),
            labels: Some(labels(pg)),
            ..ObjectMeta::default()
        },
        string_data: Some(BTreeMap::from([(TOKEN_KEY.to_owned(), password())])),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}

/// The instances' token volume and its read-only mount: the one key, mode `0440`
/// (the `postgres` group is the pod's `fsGroup`). Optional: a pod whose token is
/// missing still starts and serves its database, and its manager refuses every write
/// (it fails closed); the kubelet fills the file in once the Secret exists.
#[must_use]
pub fn volume(pg: &PostgresCluster) -> (Volume, VolumeMount) {
    (
        Volume {
            name: TOKEN_VOLUME.to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(token_name(pg)),
                items: Some(vec![KeyToPath {
                    key: TOKEN_KEY.to_owned(),
                    path: TOKEN_KEY.to_owned(),
                    ..KeyToPath::default()
                }]),
                default_mode: Some(0o440),
                optional: Some(true),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
        mount(TOKEN_VOLUME, TOKEN_DIR, true),
    )
}

/// The instance manager's setting: where its token is.
#[must_use]
pub fn server_env() -> EnvVar {
    plain(TOKEN_FILE_ENV, TOKEN_PATH)
}

/// The base-backup Job's token, from the Secret. Optional: a Job started while the
/// Secret is missing runs and `basebackup.sh` fails at once with exit 2 naming it,
/// instead of a pod waiting in `CreateContainerConfigError` until its deadline.
#[must_use]
pub fn job_env(pg: &PostgresCluster) -> EnvVar {
    let mut env = crate::machines::common::env::from_secret(TOKEN_ENV, &token_name(pg), TOKEN_KEY);
    if let Some(selector) = env
        .value_from
        .as_mut()
        .and_then(|source| source.secret_key_ref.as_mut())
    {
        selector.optional = Some(true);
    }
    env
}
