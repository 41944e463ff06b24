//! Transport security: the per-cluster certificate authority and the certificates it
//! issues, in one Secret, `<name>-tls`.
//!
//! | key | what | mounted in the instances |
//! |---|---|---|
//! | `ca.crt` | the cluster's CA (10 years): clients verify the server with it (`sslmode=verify-full`), the server verifies the replication certificate with it | yes |
//! | `ca.key` | the CA's private key | **no**: only the operator reads it |
//! | `tls.crt`, `tls.key` | the server's certificate (1 year) for every name a client or a member uses ([`server_names`]) | yes |
//! | `replication.crt`, `replication.key` | a client certificate whose common name is the replication role: standbys authenticate with it, not a password | yes |
//!
//! Like the generated credentials, the Secret is created once (`AlreadyExists` counts as
//! success) and never re-rendered: every key in it comes from one issuance, so the
//! three certificates always chain to the CA beside them. Keys are ECDSA P-256.
//!
//! # Guarantees
//! - The CA's key never reaches a pod: the instances' volume projects every key but
//!   `ca.key`, and their ServiceAccount may not read Secrets.
//! - The server certificate names the `-rw`, `-ro` and headless Services (short, with
//!   the namespace, `.svc` and `.svc.cluster.local`), every pod behind the headless
//!   Service (`*.<name>.<namespace>.svc`), `localhost` and `127.0.0.1`.
//!
//! # Assumptions
//! - The cluster domain is `cluster.local`, or clients use the `.svc` names.
//!
//! # Errors
//! [`Error::Certificate`] if a certificate cannot be issued (a name the X.509 encoding
//! refuses).

use chrono::Utc;

use k8s_openapi::api::core::v1::{Secret, Volume, VolumeMount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use rcgen::ExtendedKeyUsagePurpose;

use super::{labels, namespace, service_name};
use crate::machines::common::Error;
use crate::machines::common::tls::{self as common, Leaf, Wait, projected};
use crate::machines::postgres::actions::ServiceKind;
use crate::machines::postgres::api::{PostgresCluster, REPLICATION_USER};

pub use crate::machines::common::tls::{CaMaterial, RENEW_AT, renew_at};
pub use crate::pod::tls::{
    CA_CERT, CA_KEY, MOUNTED, REPLICATION_CERT, REPLICATION_KEY, SERVER_CERT, SERVER_KEY,
    TLS_DIR_ENV, TLS_PATH,
};

const VOLUME: &str = "tls";

/// `<name>-tls`.
#[must_use]
pub fn secret_name(pg: &PostgresCluster) -> String {
    format!("{}-tls", pg.name_any())
}

/// Every DNS name a client or a member may reach the server by.
#[must_use]
pub fn server_names(pg: &PostgresCluster) -> Vec<String> {
    let ns = namespace(pg);
    let mut names = Vec::new();
    for kind in [
        ServiceKind::ReadWrite,
        ServiceKind::ReadOnly,
        ServiceKind::Headless,
    ] {
        let service = service_name(pg, kind);
        names.extend([
            service.clone(),
            format!("{service}.{ns}"),
            format!("{service}.{ns}.svc"),
            format!("{service}.{ns}.svc.cluster.local"),
        ]);
    }
    let headless = service_name(pg, ServiceKind::Headless);
    names.extend([
        format!("*.{headless}.{ns}.svc"),
        format!("*.{headless}.{ns}.svc.cluster.local"),
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
    ]);
    names
}

/// The subject of the cluster's CA: the same at issuance and at every renewal, so that
/// a renewed leaf names the same issuer (and key identifier) as the first.
fn subject(pg: &PostgresCluster) -> String {
    common::ca_subject(&namespace(pg), &pg.name_any())
}

/// The server's and the replication role's certificates.
fn leaves(pg: &PostgresCluster) -> Vec<Leaf> {
    vec![
        Leaf {
            cert: SERVER_CERT,
            key: SERVER_KEY,
            common_name: service_name(pg, ServiceKind::ReadWrite),
            names: server_names(pg),
            usages: vec![ExtendedKeyUsagePurpose::ServerAuth],
        },
        Leaf {
            cert: REPLICATION_CERT,
            key: REPLICATION_KEY,
            common_name: REPLICATION_USER.to_owned(),
            names: Vec::new(),
            usages: vec![ExtendedKeyUsagePurpose::ClientAuth],
        },
    ]
}

/// The Secret, freshly issued: a new CA, the server's and the replication role's
/// certificates. Created once, never applied: only [`renewal`] rewrites its leaves.
/// Owned by the cluster: the data directory does not depend on it, so a cluster
/// re-created under the same name issues anew.
///
/// # Errors
/// [`Error::Certificate`] if a certificate cannot be issued; [`Error`] if the owner has
/// no UID.
pub fn secret(pg: &PostgresCluster) -> Result<Secret, Error> {
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(pg)),
            namespace: Some(namespace(pg)),
            labels: Some(labels(pg)),
            annotations: Some(common::annotations(Utc::now())),
            owner_references: super::metadata(pg, secret_name(pg))?.owner_references,
            ..ObjectMeta::default()
        },
        string_data: Some(common::issue(&subject(pg), leaves(pg))?),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    })
}

/// The merge patch that renews the leaves of `<name>-tls`: new server and replication
/// certificates (and keys) signed by the same CA, and the next [`RENEW_AT`]. The CA is
/// untouched, so clients that verify with `ca.crt` notice nothing.
///
/// # Errors
/// [`Error::Certificate`] if the CA key does not parse or a leaf cannot be issued.
pub fn renewal(pg: &PostgresCluster, ca: &CaMaterial) -> Result<serde_json::Value, Error> {
    common::renewal(&secret_name(pg), &subject(pg), ca, leaves(pg))
}

/// Where the instances find a person's own server certificate (`spec.certificates`).
pub const SERVER_TLS_PATH: &str = "/etc/lockstep/server-tls";
/// The instance manager's setting naming [`SERVER_TLS_PATH`].
pub const SERVER_TLS_DIR_ENV: &str = "LOCKSTEP_SERVER_TLS_DIR";
const SERVER_VOLUME: &str = "server-tls";

/// A person's server certificate's volume and mount (`spec.certificates`), if named:
/// `tls.crt`, `tls.key` and `ca.crt`, readable by PostgreSQL's group only. Optional: a
/// pod never waits for it (its manager serves the cluster's own until it is whole).
#[must_use]
pub fn server_volume(pg: &PostgresCluster) -> Option<(Volume, VolumeMount)> {
    let secret = pg.spec.certificates.as_ref()?.server_tls_secret.clone();
    Some(projected(
        SERVER_VOLUME,
        secret,
        &[SERVER_CERT, SERVER_KEY, CA_CERT],
        SERVER_TLS_PATH,
        Wait::Optional,
    ))
}

/// The instances' volume (every key but the CA's, readable by PostgreSQL's group only)
/// and its mount. Optional: a cluster created before its operator issued certificates
/// has no Secret, and its instances keep serving without TLS (the manager says so).
#[must_use]
pub fn volume(pg: &PostgresCluster) -> (Volume, VolumeMount) {
    projected(VOLUME, secret_name(pg), &MOUNTED, TLS_PATH, Wait::Optional)
}
