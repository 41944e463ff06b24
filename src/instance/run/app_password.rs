//! The application role's password follows its Secret (`<name>-app`, key `password`):
//! a person changes the Secret (`kubectl lockstep rotate-password` writes a new password
//! and every key derived from it), and the writable server's manager applies it by
//! `ALTER ROLE … PASSWORD` at its next pass ([`super::managed::RESYNC`]), without a
//! restart.
//!
//! # Guarantees
//! - **Once per version of the Secret, recorded on the role itself**: the role's comment
//!   names the Secret's `resourceVersion` last applied ([`marker`]), in the transaction
//!   that applies it. A new primary (a failover, a restart) reads it from the catalog
//!   and applies nothing again; a restored database whose comment names another version
//!   takes the Secret's password.
//! - **Recorded, not applied, the first time**: a role with no record has had the
//!   Secret's password since its bootstrap (or one a person set by hand on purpose):
//!   the version seen is recorded and nothing is changed. Only a later version applies.
//! - Passwords never reach argv or the server's log (a script on stdin, statement
//!   logging off for its session).
//!
//! # Errors
//! None escape: a Secret that cannot be read, or a statement PostgreSQL refuses, is
//! logged and tried again at the next pass.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use super::quote::{sql_ident, sql_literal};
use super::sql::Psql;

/// The comment that records the Secret version applied.
#[must_use]
pub fn marker(secret: &str, version: &str) -> String {
    format!("lockstep: password of Secret {secret} version {version}")
}

/// What one pass does for the role, given the comment the catalog has on it.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// The version is the one recorded: nothing.
    Kept,
    /// No record yet: record the version, change nothing.
    Record,
    /// Another version than the one recorded: apply the password and record it.
    Apply,
}

/// The step for a role whose comment is `comment`, the Secret at `version`.
#[must_use]
pub fn step(comment: &str, secret: &str, version: &str) -> Step {
    if comment == marker(secret, version) {
        Step::Kept
    } else if comment.starts_with(&marker(secret, "")) {
        Step::Apply
    } else {
        Step::Record
    }
}

/// The script of `step` for `role` (`password` only read for [`Step::Apply`]).
#[must_use]
pub fn script(step: &Step, role: &str, secret: &str, version: &str, password: &str) -> String {
    let comment = format!(
        "COMMENT ON ROLE {} IS {};\n",
        sql_ident(role),
        sql_literal(&marker(secret, version))
    );
    match step {
        Step::Kept => String::new(),
        Step::Record => comment,
        Step::Apply => format!(
            "BEGIN;\nALTER ROLE {} PASSWORD {};\n{comment}COMMIT;\n",
            sql_ident(role),
            sql_literal(password)
        ),
    }
}

/// One pass on the writable server: the role `role`'s password follows the Secret of
/// the same name. The Secret's version the role follows once the pass is done, if it
/// does ([`crate::pod::app_password`]).
pub async fn keep(psql: &Psql, secrets: Option<&Api<Secret>>, role: &str) -> Option<String> {
    let api = secrets?;
    let (version, password) = match super::managed::read_password(Some(api), role).await {
        Ok(found) => found,
        Err(error) => {
            tracing::warn!(%role, %error, "cannot read the application role's password Secret");
            return None;
        }
    };
    // Prefixed: `psql` prints an empty comment as an empty line, which reads as no row.
    let comment = psql
        .value(&format!(
            "SELECT 'comment:' || coalesce(shobj_description(oid, 'pg_authid'), '') FROM pg_roles WHERE rolname = {}",
            sql_literal(role)
        ))
        .await;
    let comment = match comment {
        Ok(Some(comment)) => comment
            .strip_prefix("comment:")
            .unwrap_or_default()
            .to_owned(),
        // No such role (a cluster bootstrapped without one): nothing to follow.
        Ok(None) => return None,
        Err(error) => {
            tracing::debug!(%role, %error, "cannot read the application role's comment");
            return None;
        }
    };
    let step = step(&comment, role, &version);
    let sql = script(&step, role, role, &version, &password);
    if sql.is_empty() {
        return Some(version);
    }
    match super::managed::run(psql, "postgres", &sql).await {
        Ok(()) => {
            if step == Step::Apply {
                tracing::info!(%role, %version, "applied the application role's password from its Secret");
            }
            Some(version)
        }
        Err(error) => {
            tracing::warn!(%role, %error, "could not apply the application role's password");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_recorded_first_then_each_new_one_applied_once() {
        let s = "pg-app";
        assert_eq!(step("", s, "7"), Step::Record, "no record: the bootstrap's");
        assert_eq!(step("owned by the billing team", s, "7"), Step::Record);
        assert_eq!(step(&marker(s, "7"), s, "7"), Step::Kept);
        assert_eq!(step(&marker(s, "7"), s, "9"), Step::Apply);
    }

    #[test]
    fn the_password_and_its_record_change_in_one_transaction() {
        let sql = script(&Step::Apply, "pg-app", "pg-app", "9", "n'ew");
        assert_eq!(
            sql,
            "BEGIN;\nALTER ROLE \"pg-app\" PASSWORD 'n''ew';\nCOMMENT ON ROLE \"pg-app\" IS 'lockstep: password of Secret pg-app version 9';\nCOMMIT;\n"
        );
        assert!(!script(&Step::Record, "pg-app", "pg-app", "9", "n'ew").contains("n''ew"));
        assert!(script(&Step::Kept, "pg-app", "pg-app", "9", "x").is_empty());
    }
}
