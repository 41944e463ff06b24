//! The application user: the role and database an application connects with, instead of
//! the superuser, and the Secret `<name>-app` that tells it how.
//!
//! One role per cluster, `<name>-app` (LOGIN, nothing else: not a superuser, no
//! CREATEDB, CREATEROLE or REPLICATION), owning one database: `spec.database`, else
//! [`DEFAULT_DATABASE`]. The instance manager creates both when it bootstraps a new
//! cluster, and after a restore sets the role's password to this cluster's
//! (`instance::run::prepare`).
//!
//! The Secret has the keys of CloudNativePG's `-app` Secret: `username`, `password`,
//! `dbname`, `host` (`<name>-rw.<namespace>.svc`), `port`, `uri`, `jdbc-uri` and `pgpass`.
//! The URIs ask for TLS without verifying the server (`sslmode=require`): a client with
//! libpq's defaults and no CA file connects with it, encrypted; one that verifies the
//! server adds `sslmode=verify-full` and the CA of `<name>-tls` (`docs/security.md`).
//!
//! # Guarantees
//! - **Created once, never re-rendered**: a create-if-absent in the step that creates
//!   the credentials (`AlreadyExists` counts as success), so the password the cluster was
//!   bootstrapped with is the one the Secret holds.
//! - **Kept, not owned**, like `<name>-credentials`: the role's password lives in the
//!   data directory of the volume claims, which outlive the cluster; a cluster re-created
//!   under the same name finds the claims and the Secret that matches them.
//! - Generated whether or not `spec.credentialsSecret` is set: it is another Secret.
//!
//! - **Its password is the role's**: the writable server's manager applies a changed
//!   `password` by `ALTER ROLE` (`instance::run::app_password`), so a person rotates it
//!   by writing the Secret: `kubectl lockstep rotate-password` writes a new password and
//!   every key made from it ([`rotated_keys`]).
//!
//! # Assumptions
//! - Whoever edits `password` by hand also edits the keys made from it (`uri`,
//!   `jdbc-uri`, `pgpass`): the operator never re-renders the Secret.
//!
//! # Errors
//! None: rendering is infallible.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::super::api::PostgresCluster;
use super::{PORT, labels, namespace, password, primary_host};
use crate::machines::common::env::{from_secret, plain};

/// The database the application role owns when `spec.database` is not set.
pub const DEFAULT_DATABASE: &str = "app";
/// The Secret's key holding the role's name.
pub const USERNAME_KEY: &str = "username";
/// The Secret's key holding the role's password.
pub const PASSWORD_KEY: &str = "password";
/// The instances' setting naming the application role (`instance::run::args`).
pub const USER_ENV: &str = "APP_USER";
/// The instances' setting holding the application role's password.
pub const PASSWORD_ENV: &str = "APP_PASSWORD";
/// The instances' setting naming the application's database.
pub const DATABASE_ENV: &str = "APP_DATABASE";

/// `<name>-app`: the Secret's name, and the role's.
#[must_use]
pub fn app_name(pg: &PostgresCluster) -> String {
    format!("{}-app", pg.name_any())
}

/// The database the application role owns: `spec.database`, else [`DEFAULT_DATABASE`].
#[must_use]
pub fn database(pg: &PostgresCluster) -> String {
    pg.spec
        .database
        .clone()
        .unwrap_or_else(|| DEFAULT_DATABASE.to_owned())
}

/// `value` with every byte but RFC 3986's unreserved characters percent-encoded: safe in
/// a URI's user information and query.
fn url_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A `.pgpass` field: `:` and `\` backslash-escaped.
fn pgpass_field(value: &str) -> String {
    value.replace('\\', "\\\\").replace(':', "\\:")
}

/// The Secret's keys for `user` with `pass` on `host`, database `dbname`.
fn keys(user: &str, pass: &str, host: &str, dbname: &str) -> BTreeMap<String, String> {
    let (u, p, d) = (url_encode(user), url_encode(pass), url_encode(dbname));
    BTreeMap::from([
        (USERNAME_KEY.to_owned(), user.to_owned()),
        (PASSWORD_KEY.to_owned(), pass.to_owned()),
        ("dbname".to_owned(), dbname.to_owned()),
        ("host".to_owned(), host.to_owned()),
        ("port".to_owned(), PORT.to_string()),
        (
            "uri".to_owned(),
            format!("postgresql://{u}:{p}@{host}:{PORT}/{d}?sslmode=require"),
        ),
        (
            "jdbc-uri".to_owned(),
            format!("jdbc:postgresql://{host}:{PORT}/{d}?user={u}&password={p}&sslmode=require"),
        ),
        (
            "pgpass".to_owned(),
            format!(
                "{host}:{PORT}:{}:{}:{}\n",
                pgpass_field(dbname),
                pgpass_field(user),
                pgpass_field(pass)
            ),
        ),
    ])
}

/// The application Secret, with a fresh random password. Created once, never applied
/// (see the module doc). Of type `kubernetes.io/basic-auth`, as CloudNativePG's.
#[must_use]
pub fn app_secret(pg: &PostgresCluster) -> Secret {
    let user = app_name(pg);
    Secret {
        metadata: ObjectMeta {
            name: Some(app_name(pg)),
            namespace: Some(namespace(pg)),
            labels: Some(labels(pg)),
            ..ObjectMeta::default()
        },
        string_data: Some(keys(&user, &password(), &primary_host(pg), &database(pg))),
        type_: Some("kubernetes.io/basic-auth".to_owned()),
        ..Secret::default()
    }
}

/// Every key of the application Secret with a new random password (what
/// `kubectl lockstep rotate-password` writes: the password and the keys made from it
/// change together).
#[must_use]
pub fn rotated_keys(pg: &PostgresCluster) -> BTreeMap<String, String> {
    keys(&app_name(pg), &password(), &primary_host(pg), &database(pg))
}

/// The instance manager's settings: the role, its password (from the Secret) and its
/// database. The password is optional: a cluster created before its operator generated
/// `<name>-app` has no such Secret, and its pods must still start (its data directory
/// exists: the manager creates the role only at a bootstrap or a restore, and without
/// the password it creates none).
#[must_use]
pub fn server_env(pg: &PostgresCluster) -> Vec<EnvVar> {
    let mut secret = from_secret(PASSWORD_ENV, &app_name(pg), PASSWORD_KEY);
    if let Some(selector) = secret
        .value_from
        .as_mut()
        .and_then(|source| source.secret_key_ref.as_mut())
    {
        selector.optional = Some(true);
    }
    vec![
        plain(USER_ENV, app_name(pg)),
        secret,
        plain(DATABASE_ENV, database(pg)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_with_reserved_characters_is_percent_encoded_in_the_uris() {
        let k = keys("pg-app", "a:b@c/d", "pg-rw.ns.svc", "app");
        assert_eq!(
            k["uri"],
            "postgresql://pg-app:a%3Ab%40c%2Fd@pg-rw.ns.svc:5432/app?sslmode=require"
        );
        assert_eq!(
            k["jdbc-uri"],
            "jdbc:postgresql://pg-rw.ns.svc:5432/app?user=pg-app&password=a%3Ab%40c%2Fd&sslmode=require"
        );
        assert_eq!(k["pgpass"], "pg-rw.ns.svc:5432:app:pg-app:a\\:b@c/d\n");
        assert_eq!(k["password"], "a:b@c/d");
    }
}
