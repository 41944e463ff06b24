//! Transport security of a DistributedDB (`spec.tls`): the certificates the members,
//! hooks and backups find in `DB_TLS_DIR`, and, unless a person names a Secret of their
//! own, the per-cluster CA that issues them ([`crate::machines::common::tls`], shared
//! with PostgresCluster).
//!
//! | key | what | database pods | hook and backup Jobs |
//! |---|---|---|---|
//! | `ca.crt` | the cluster's CA: every side verifies the other with it | yes | yes |
//! | `ca.key` | the CA's private key (issued Secrets only) | no | no |
//! | `tls.crt`, `tls.key` | the member certificate (server and client use: members are each other's peers) for every name a member or client uses ([`member_names`]) | yes | no |
//! | `client.crt`, `client.key` | a client certificate, common name `root` (etcd's superuser, should a person turn on etcd's authentication) | yes | yes |
//!
//! # Guarantees
//! - A database pod does not start before its Secret exists (the volume is not
//!   optional): a member never comes up without TLS in a cluster that has it.
//! - The CA's key never reaches a pod.
//! - An issued Secret is created once (`AlreadyExists` counts as success), its leaves
//!   renewed at rest two thirds into their year, on the Secret as read.
//!
//! # Assumptions
//! - The image reloads certificates when their files change (etcd reads them at every
//!   handshake), since renewed leaves reach running pods through the projected volume.
//! - The cluster domain is `cluster.local`, or clients use the `.svc` names.
//!
//! # Errors
//! [`Error::Certificate`] if a certificate cannot be issued.

use chrono::Utc;
use k8s_openapi::api::core::v1::{EnvVar, Secret, Volume, VolumeMount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use rcgen::ExtendedKeyUsagePurpose;

use super::api::DistributedDB;
use super::render::{KIND_LABEL, namespace};
use crate::machines::common::env::plain;
use crate::machines::common::tls::{self as common, CA_CERT, CaMaterial, Leaf, Wait, projected};
use crate::machines::common::{Error, meta};

/// The environment variable naming [`TLS_PATH`] in every pod that has it.
pub const TLS_DIR_ENV: &str = "DB_TLS_DIR";
/// Where the keys are projected.
pub const TLS_PATH: &str = "/etc/lockstep/tls";
/// The member certificate.
pub const MEMBER_CERT: &str = "tls.crt";
/// The member certificate's key.
pub const MEMBER_KEY: &str = "tls.key";
/// The client certificate.
pub const CLIENT_CERT: &str = "client.crt";
/// The client certificate's key.
pub const CLIENT_KEY: &str = "client.key";
/// The client certificate's common name.
pub const CLIENT_NAME: &str = "root";

const VOLUME: &str = "tls";

/// The Secret the pods read, if `spec.tls` is set: the person's, or `<name>-tls`.
#[must_use]
pub fn secret_name(db: &DistributedDB) -> Option<String> {
    let tls = db.spec.tls.as_ref()?;
    Some(tls.secret_name.clone().unwrap_or_else(|| issued_name(db)))
}

/// `<name>-tls`: the Secret Lockstep issues.
#[must_use]
pub fn issued_name(db: &DistributedDB) -> String {
    format!("{}-tls", db.name_any())
}

/// Whether Lockstep issues the certificates (`spec.tls` without a Secret of one's own).
#[must_use]
pub fn issues(spec: &super::api::DistributedDBSpec) -> bool {
    spec.tls.as_ref().is_some_and(|t| t.secret_name.is_none())
}

/// Every name a member or a client may reach a member by: the headless Service (short,
/// with the namespace, `.svc`, `.svc.cluster.local`), every pod behind it, `localhost`
/// and `127.0.0.1`.
#[must_use]
pub fn member_names(db: &DistributedDB) -> Vec<String> {
    let (name, ns) = (db.name_any(), namespace(db));
    vec![
        name.clone(),
        format!("{name}.{ns}"),
        format!("{name}.{ns}.svc"),
        format!("{name}.{ns}.svc.cluster.local"),
        format!("*.{name}.{ns}.svc"),
        format!("*.{name}.{ns}.svc.cluster.local"),
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
    ]
}

fn subject(db: &DistributedDB) -> String {
    common::ca_subject(&namespace(db), &db.name_any())
}

fn leaves(db: &DistributedDB) -> Vec<Leaf> {
    vec![
        Leaf {
            cert: MEMBER_CERT,
            key: MEMBER_KEY,
            common_name: db.name_any(),
            names: member_names(db),
            usages: vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        },
        Leaf {
            cert: CLIENT_CERT,
            key: CLIENT_KEY,
            common_name: CLIENT_NAME.to_owned(),
            names: Vec::new(),
            usages: vec![ExtendedKeyUsagePurpose::ClientAuth],
        },
    ]
}

/// `<name>-tls`, freshly issued: a new CA, the member and the client certificates.
/// Created once, never applied; owned by the DistributedDB.
///
/// # Errors
/// [`Error::Certificate`] if a certificate cannot be issued; [`Error`] if the owner has
/// no UID.
pub fn secret(db: &DistributedDB) -> Result<Secret, Error> {
    let owner = meta::Owner::of(db)?;
    let labels = meta::component_labels(KIND_LABEL, &owner.name, "tls");
    Ok(Secret {
        metadata: ObjectMeta {
            annotations: Some(common::annotations(Utc::now())),
            ..owner.child(issued_name(db), labels)
        },
        string_data: Some(common::issue(&subject(db), leaves(db))?),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    })
}

/// The merge patch renewing the member and client certificates of `<name>-tls` with
/// its CA.
///
/// # Errors
/// [`Error::Certificate`] if the CA key does not parse or a leaf cannot be issued.
pub fn renewal(db: &DistributedDB, ca: &CaMaterial) -> Result<serde_json::Value, Error> {
    common::renewal(&issued_name(db), &subject(db), ca, leaves(db))
}

/// The database pods' volume and mount (every key but the CA's), if `spec.tls` is set.
#[must_use]
pub fn member_volume(db: &DistributedDB) -> Option<(Volume, VolumeMount)> {
    volume(
        db,
        &[CA_CERT, MEMBER_CERT, MEMBER_KEY, CLIENT_CERT, CLIENT_KEY],
    )
}

/// The hook and backup Jobs' volume and mount (the CA and the client certificate), if
/// `spec.tls` is set.
#[must_use]
pub fn client_volume(db: &DistributedDB) -> Option<(Volume, VolumeMount)> {
    volume(db, &[CA_CERT, CLIENT_CERT, CLIENT_KEY])
}

/// `keys` of the Secret at [`TLS_PATH`]; the pod waits for the Secret.
fn volume(db: &DistributedDB, keys: &[&str]) -> Option<(Volume, VolumeMount)> {
    let secret = secret_name(db)?;
    Some(projected(VOLUME, secret, keys, TLS_PATH, Wait::Required))
}

/// [`TLS_DIR_ENV`], for a container that has one of the volumes.
#[must_use]
pub fn env() -> EnvVar {
    plain(TLS_DIR_ENV, TLS_PATH)
}
