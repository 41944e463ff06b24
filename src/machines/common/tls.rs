//! A certificate authority per cluster, kept in one Secret with the leaves it signed,
//! for every machine that secures its transport (PostgresCluster always; DistributedDB
//! when `spec.tls` asks). Each machine says which leaves it needs (names, usages, keys
//! in the Secret); issuing, renewing and projecting them into pods is here, once.
//!
//! # Guarantees
//! - A Secret is issued whole ([`issue`]): every leaf in it chains to the CA beside it.
//! - A renewal ([`renewal`]) re-signs the leaves with the same CA (the same subject and
//!   key, so the same issuer and key identifier): clients that verify with `ca.crt`
//!   notice nothing. It is written on the Secret as read (UID and resourceVersion).
//! - Keys are ECDSA P-256; leaves are valid for a year from an hour ago (a node's clock
//!   a little behind the operator's) and due for renewal two thirds in ([`renew_at`]).
//! - The CA's key is kept by the operator's cache only because the Secret names it in
//!   [`CACHED_KEYS`]; no machine projects it into a pod.
//!
//! # Errors
//! [`Error::Certificate`] if a certificate cannot be issued (a name the X.509 encoding
//! refuses, a CA key that does not parse).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{KeyToPath, Secret, SecretVolumeSource, Volume, VolumeMount};
use kube::ResourceExt;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use super::Error;
use crate::driver::cache::CACHED_KEYS;
pub use crate::pod::tls::{CA_CERT, CA_KEY};

/// The Secret's annotation: when its leaves are due for renewal (RFC 3339). A person
/// may set it to an earlier time to renew them now.
pub const RENEW_AT: &str = "lockstep.dev/renew-at";

const CA_YEARS: i64 = 10;
const LEAF_DAYS: i64 = 365;

/// The CA that signs a cluster's leaves.
pub type Authority = Issuer<'static, KeyPair>;

/// One leaf to issue: its key names in the Secret, its subject and names, and what it
/// may be used for.
#[derive(Debug, Clone)]
pub struct Leaf {
    /// The certificate's key in the Secret (`tls.crt`).
    pub cert: &'static str,
    /// Its private key's key in the Secret (`tls.key`).
    pub key: &'static str,
    /// The subject's common name.
    pub common_name: String,
    /// Its DNS names and IP addresses (none for a client certificate).
    pub names: Vec<String>,
    /// Server, client, or both (etcd's members are each other's clients).
    pub usages: Vec<ExtendedKeyUsagePurpose>,
}

fn certificate_error(what: &str, e: &rcgen::Error) -> Error {
    Error::Certificate(format!("{what}: {e}"))
}

/// Validity from one hour ago for `days`.
fn valid_for(params: &mut CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(days);
}

fn named(common_name: String) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "lockstep");
    dn.push(DnType::CommonName, common_name);
    dn
}

/// The CA's parameters for `subject`: the same at issuance and at every renewal.
fn ca_params(subject: &str) -> CertificateParams {
    let mut ca = CertificateParams::default();
    ca.distinguished_name = named(subject.to_owned());
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca
}

/// The subject of the CA of the object `namespace`/`name`.
#[must_use]
pub fn ca_subject(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name} CA")
}

/// `leaf` signed by `issuer`: its certificate's and its key's PEM, by their keys.
fn sign(issuer: &Authority, leaf: Leaf) -> Result<[(&'static str, String); 2], Error> {
    let key = KeyPair::generate().map_err(|e| certificate_error("a leaf key", &e))?;
    let mut params =
        CertificateParams::new(leaf.names).map_err(|e| certificate_error("a leaf's names", &e))?;
    params.distinguished_name = named(leaf.common_name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = leaf.usages;
    params.use_authority_key_identifier_extension = true;
    valid_for(&mut params, LEAF_DAYS);
    let cert = params
        .signed_by(&key, issuer)
        .map_err(|e| certificate_error("signing a leaf", &e))?;
    Ok([(leaf.cert, cert.pem()), (leaf.key, key.serialize_pem())])
}

fn sign_all(issuer: &Authority, leaves: Vec<Leaf>) -> Result<Vec<(&'static str, String)>, Error> {
    let mut signed = Vec::new();
    for leaf in leaves {
        signed.extend(sign(issuer, leaf)?);
    }
    Ok(signed)
}

/// A new CA for `subject` (10 years) and `leaves` signed by it: the Secret's data
/// (`ca.crt`, `ca.key` and each leaf's two keys).
///
/// # Errors
/// [`Error::Certificate`] if a certificate cannot be issued.
pub fn issue(subject: &str, leaves: Vec<Leaf>) -> Result<BTreeMap<String, String>, Error> {
    let ca_key = KeyPair::generate().map_err(|e| certificate_error("the CA key", &e))?;
    let mut ca = ca_params(subject);
    valid_for(&mut ca, CA_YEARS * 365);
    let ca_cert = ca
        .self_signed(&ca_key)
        .map_err(|e| certificate_error("the CA", &e))?;
    let mut data = BTreeMap::from([
        (CA_CERT.to_owned(), ca_cert.pem()),
        (CA_KEY.to_owned(), ca_key.serialize_pem()),
    ]);
    let issuer = Issuer::new(ca, ca_key);
    data.extend(
        sign_all(&issuer, leaves)?
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v)),
    );
    Ok(data)
}

/// When leaves issued now are due for renewal: two thirds into their validity.
#[must_use]
pub fn renew_at(now: DateTime<Utc>) -> DateTime<Utc> {
    now + chrono::Duration::days(LEAF_DAYS * 2 / 3)
}

fn renew_at_text(now: DateTime<Utc>) -> String {
    renew_at(now).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// An issued Secret's annotations: when its leaves are due ([`RENEW_AT`]), and the keys
/// the operator's cache keeps ([`CACHED_KEYS`]: the CA, to sign renewals with).
#[must_use]
pub fn annotations(now: DateTime<Utc>) -> BTreeMap<String, String> {
    BTreeMap::from([
        (RENEW_AT.to_owned(), renew_at_text(now)),
        (CACHED_KEYS.to_owned(), format!("{CA_CERT},{CA_KEY}")),
    ])
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

/// The merge patch that renews `leaves` of the Secret `secret` with the CA of `subject`
/// (`ca`), and sets the next [`RENEW_AT`].
///
/// # Errors
/// [`Error::Certificate`] if the CA key does not parse or a leaf cannot be issued;
/// [`Error::Serialize`] if a key does not encode.
pub fn renewal(
    secret: &str,
    subject: &str,
    ca: &CaMaterial,
    leaves: Vec<Leaf>,
) -> Result<serde_json::Value, Error> {
    let key = KeyPair::from_pem(&ca.key).map_err(|e| certificate_error("the CA key", &e))?;
    let issuer = Issuer::new(ca_params(subject), key);
    let mut data = serde_json::Map::new();
    for (k, v) in sign_all(&issuer, leaves)? {
        // base64, as `data` wants it (never null: a null would delete the key).
        let encoded =
            serde_json::to_value(k8s_openapi::ByteString(v.into_bytes())).map_err(|source| {
                Error::Serialize {
                    what: format!("{secret} {k}"),
                    source,
                }
            })?;
        data.insert(k.to_owned(), encoded);
    }
    Ok(serde_json::json!({
        "metadata": {"annotations": {RENEW_AT: renew_at_text(Utc::now())}},
        "data": data,
    }))
}

/// An issued certificates Secret as observed: when its leaves are due, and the CA that
/// signs their renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificatesView {
    /// Its UID.
    pub uid: String,
    /// Its resourceVersion: a renewal is written on the Secret as read.
    pub version: String,
    /// [`RENEW_AT`], if it parses.
    pub renew_at: Option<DateTime<Utc>>,
    /// The CA, if the cache holds its key.
    pub ca: Option<CaMaterial>,
}

/// A renewal due: the Secret as read and the CA to sign with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    /// The Secret's UID.
    pub uid: String,
    /// The Secret's resourceVersion as read.
    pub version: String,
    /// The CA.
    pub ca: CaMaterial,
}

impl CertificatesView {
    /// The view of `secret`.
    #[must_use]
    pub fn of(secret: &Secret) -> Self {
        Self {
            uid: secret.uid().unwrap_or_default(),
            version: secret.resource_version().unwrap_or_default(),
            renew_at: secret
                .annotations()
                .get(RENEW_AT)
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&Utc)),
            ca: CaMaterial::of(secret),
        }
    }

    /// The renewal due at `now`, if the CA is at hand. A Secret that says nothing of
    /// its renewal is not renewed.
    #[must_use]
    pub fn renewal(&self, now: DateTime<Utc>) -> Option<Renewal> {
        let due = self.renew_at.is_some_and(|at| at <= now);
        let ca = self.ca.clone().filter(|_| due)?;
        Some(Renewal {
            uid: self.uid.clone(),
            version: self.version.clone(),
            ca,
        })
    }
}

/// Whether a pod must wait for the Secret of a [`projected`] volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The pod starts without it (its program serves without TLS until it is whole).
    Optional,
    /// The pod waits until it exists: its program must not start without TLS.
    Required,
}

/// A read-only volume `volume` of `keys` of the Secret `secret`, mounted at `path`, mode
/// 0440 (readable by the pod's group: `fsGroup`).
#[must_use]
pub fn projected(
    volume: &str,
    secret: String,
    keys: &[&str],
    path: &str,
    wait: Wait,
) -> (Volume, VolumeMount) {
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
                optional: Some(wait == Wait::Optional),
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
