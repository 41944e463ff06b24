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

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use k8s_openapi::api::core::v1::{KeyToPath, Secret, SecretVolumeSource, Volume, VolumeMount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use super::{labels, namespace, service_name};
use crate::driver::cache::CACHED_KEYS;
use crate::machines::common::Error;
use crate::machines::postgres::actions::ServiceKind;
use crate::machines::postgres::api::{PostgresCluster, REPLICATION_USER};

pub use crate::pod::tls::{
    CA_CERT, CA_KEY, MOUNTED, REPLICATION_CERT, REPLICATION_KEY, SERVER_CERT, SERVER_KEY,
    TLS_DIR_ENV, TLS_PATH,
};

/// The Secret's annotation: when its leaves are due for renewal (RFC 3339). A person
/// may set it to an earlier time to renew them now.
pub const RENEW_AT: &str = "lockstep.dev/renew-at";

const VOLUME: &str = "tls";
const CA_YEARS: i64 = 10;
const LEAF_DAYS: i64 = 365;

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

fn certificate_error(what: &str, e: &rcgen::Error) -> Error {
    Error::Certificate(format!("{what}: {e}"))
}

/// Validity from one hour ago (a node's clock a little behind the operator's) for `days`.
fn valid_for(params: &mut CertificateParams, days: i64) {
    let now = time_now();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(days);
}

fn time_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

fn named(common_name: String) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "lockstep");
    dn.push(DnType::CommonName, common_name);
    dn
}

/// A leaf certificate for `names` (and `common_name`), signed by `issuer`: its PEM and
/// its key's PEM.
fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    common_name: String,
    names: Vec<String>,
    usage: ExtendedKeyUsagePurpose,
) -> Result<(String, String), Error> {
    let key = KeyPair::generate().map_err(|e| certificate_error("a leaf key", &e))?;
    let mut params =
        CertificateParams::new(names).map_err(|e| certificate_error("a leaf's names", &e))?;
    params.distinguished_name = named(common_name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![usage];
    params.use_authority_key_identifier_extension = true;
    valid_for(&mut params, LEAF_DAYS);
    let cert = params
        .signed_by(&key, issuer)
        .map_err(|e| certificate_error("signing a leaf", &e))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The CA's parameters: the same at issuance and at every renewal, so that a renewed
/// leaf names the same issuer (and key identifier) as the first.
fn ca_params(pg: &PostgresCluster) -> CertificateParams {
    let mut ca = CertificateParams::default();
    ca.distinguished_name = named(format!("{}/{} CA", namespace(pg), pg.name_any()));
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca
}

/// The server's and the replication role's certificates and keys, signed by `issuer`,
/// by their keys in the Secret.
fn leaves(
    pg: &PostgresCluster,
    issuer: &Issuer<'_, KeyPair>,
) -> Result<[(&'static str, String); 4], Error> {
    let (server, server_key) = leaf(
        issuer,
        service_name(pg, ServiceKind::ReadWrite),
        server_names(pg),
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    let (replication, replication_key) = leaf(
        issuer,
        REPLICATION_USER.to_owned(),
        Vec::new(),
        ExtendedKeyUsagePurpose::ClientAuth,
    )?;
    Ok([
        (SERVER_CERT, server),
        (SERVER_KEY, server_key),
        (REPLICATION_CERT, replication),
        (REPLICATION_KEY, replication_key),
    ])
}

/// When leaves issued now are due for renewal: two thirds into their validity.
#[must_use]
pub fn renew_at(now: DateTime<Utc>) -> DateTime<Utc> {
    now + chrono::Duration::days(LEAF_DAYS * 2 / 3)
}

/// The Secret's annotations: when its leaves are due ([`RENEW_AT`]), and the keys the
/// operator's cache keeps ([`CACHED_KEYS`]: the CA, to sign renewals with).
fn annotations(now: DateTime<Utc>) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            RENEW_AT.to_owned(),
            renew_at(now).to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        ),
        (CACHED_KEYS.to_owned(), format!("{CA_CERT},{CA_KEY}")),
    ])
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
    let ca_key = KeyPair::generate().map_err(|e| certificate_error("the CA key", &e))?;
    let mut ca = ca_params(pg);
    valid_for(&mut ca, CA_YEARS * 365);
    let ca_cert = ca
        .self_signed(&ca_key)
        .map_err(|e| certificate_error("the CA", &e))?;
    let ca_pem = ca_cert.pem();
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = Issuer::new(ca, ca_key);
    let mut data = BTreeMap::from([
        (CA_CERT.to_owned(), ca_pem),
        (CA_KEY.to_owned(), ca_key_pem),
    ]);
    data.extend(leaves(pg, &issuer)?.map(|(k, v)| (k.to_owned(), v)));
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(pg)),
            namespace: Some(namespace(pg)),
            labels: Some(labels(pg)),
            annotations: Some(annotations(Utc::now())),
            owner_references: super::metadata(pg, secret_name(pg))?.owner_references,
            ..ObjectMeta::default()
        },
        string_data: Some(data),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    })
}

/// The CA as the operator's cache holds it (from the Secret's data), to sign renewals
/// with. Its `Debug` shows no key.
#[derive(Clone, PartialEq, Eq)]
pub struct CaMaterial {
    /// The CA's private key, PEM.
    key: String,
}

impl CaMaterial {
    /// The CA key read from the Secret's data (`None` without one).
    #[must_use]
    pub fn of(secret: &Secret) -> Option<Self> {
        let data = secret.data.as_ref()?;
        let key = String::from_utf8(data.get(CA_KEY)?.0.clone()).ok()?;
        Some(Self { key })
    }
}

impl std::fmt::Debug for CaMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CaMaterial(..)")
    }
}

/// The merge patch that renews the leaves of `<name>-tls`: new server and replication
/// certificates (and keys) signed by the same CA, and the next [`RENEW_AT`]. The CA is
/// untouched, so clients that verify with `ca.crt` notice nothing.
///
/// # Errors
/// [`Error::Certificate`] if the CA key does not parse or a leaf cannot be issued.
pub fn renewal(pg: &PostgresCluster, ca: &CaMaterial) -> Result<serde_json::Value, Error> {
    let key = KeyPair::from_pem(&ca.key).map_err(|e| certificate_error("the CA key", &e))?;
    let issuer = Issuer::new(ca_params(pg), key);
    let mut data = serde_json::Map::new();
    for (k, v) in leaves(pg, &issuer)? {
        // base64, as `data` wants it (never null: a null would delete the key).
        let encoded =
            serde_json::to_value(k8s_openapi::ByteString(v.into_bytes())).map_err(|source| {
                Error::Serialize {
                    what: format!("{} {k}", secret_name(pg)),
                    source,
                }
            })?;
        data.insert(k.to_owned(), encoded);
    }
    Ok(serde_json::json!({
        "metadata": {"annotations": {RENEW_AT: annotations(Utc::now())[RENEW_AT]}},
        "data": data,
    }))
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
    ))
}

/// An optional, read-only volume of `keys` of the Secret `secret` at `path`, mode 0440
/// (the server and libpq accept a root-owned key file readable by its group only).
fn projected(volume: &str, secret: String, keys: &[&str], path: &str) -> (Volume, VolumeMount) {
    (
        Volume {
            name: volume.to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret),
                items: Some(
                    keys.iter()
                        .map(|k| KeyToPath {
                            key: (*k).to_owned(),
                            path: (*k).to_owned(),
                            ..KeyToPath::default()
                        })
                        .collect(),
                ),
                default_mode: Some(0o440),
                optional: Some(true),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
        VolumeMount {
            name: volume.to_owned(),
            mount_path: path.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
    )
}

/// The instances' volume (every key but the CA's, readable by PostgreSQL's group only)
/// and its mount. Optional: a cluster created before its operator issued certificates
/// has no Secret, and its instances keep serving without TLS (the manager says so).
#[must_use]
pub fn volume(pg: &PostgresCluster) -> (Volume, VolumeMount) {
    projected(VOLUME, secret_name(pg), &MOUNTED, TLS_PATH)
}
