//! The application user: its Secret, that the credentials step creates it, and what the
//! instances read of it.

use super::rendering::object;
use super::*;
use crate::driver::{Op, Operator};
use crate::machines::common::testing::{assert_env, assert_secret_env};

#[test]
fn the_app_secret_says_how_to_connect_with_a_random_password_and_is_kept() {
    let mut s = spec("16.3");
    s.database = None;
    let pg = object(s);
    let secret = render::app_secret(&pg);
    assert_eq!(secret.metadata.name.as_deref(), Some("pg-app"));
    assert_eq!(secret.metadata.namespace.as_deref(), Some("db"));
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/basic-auth"));
    assert!(
        secret.metadata.owner_references.is_none(),
        "kept, like the credentials Secret"
    );
    let keys = secret.string_data.unwrap_or_default();
    let password = keys["password"].clone();
    assert_eq!(password.len(), 32);
    assert!(password.chars().all(|c| c.is_ascii_alphanumeric()));
    let want = [
        ("dbname", "app".to_owned()),
        ("host", "pg-rw.db.svc".to_owned()),
        (
            "jdbc-uri",
            format!(
                "jdbc:postgresql://pg-rw.db.svc:5432/app?user=pg-app&password={password}&sslmode=require"
            ),
        ),
        ("password", password.clone()),
        (
            "pgpass",
            format!("pg-rw.db.svc:5432:app:pg-app:{password}\n"),
        ),
        ("port", "5432".to_owned()),
        (
            "uri",
            format!("postgresql://pg-app:{password}@pg-rw.db.svc:5432/app?sslmode=require"),
        ),
        ("username", "pg-app".to_owned()),
    ];
    let got: Vec<(&str, String)> = keys.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    assert_eq!(got, want);
    let again = render::app_secret(&pg).string_data.unwrap_or_default();
    assert_ne!(
        again["password"], password,
        "drawn at each rendering: created once"
    );
}

#[test]
fn spec_database_is_the_application_database() {
    let mut s = spec("16.3");
    s.database = Some("orders".to_owned());
    let keys = render::app_secret(&object(s))
        .string_data
        .unwrap_or_default();
    assert_eq!(keys["dbname"], "orders");
    assert!(keys["uri"].ends_with("@pg-rw.db.svc:5432/orders?sslmode=require"));
}

#[test]
fn the_credentials_step_creates_the_app_secret_with_or_without_a_credentials_secret() {
    for given in [None, Some("pg-creds".to_owned())] {
        let mut s = spec("16.3");
        s.credentials_secret = given.clone();
        let ops = Postgres::render(&object(s), &PgAction::CreateCredentials).expect("renders");
        let created: Vec<String> = ops
            .iter()
            .filter_map(|op| match op {
                Op::Create { object, .. } => Some(object.name_any()),
                _ => None,
            })
            .collect();
        assert!(
            created.contains(&"pg-app".to_owned()),
            "{given:?}: {created:?}"
        );
        assert_eq!(
            created.contains(&"pg-credentials".to_owned()),
            given.is_none(),
            "{created:?}"
        );
    }
}

#[test]
fn the_instances_get_the_app_role_from_its_secret_which_may_be_missing() {
    let mut s = spec("16.3");
    s.database = None;
    let pg = object(s);
    let sts = render::statefulset(&pg, V1, 3).expect("renders");
    let text = serde_json::to_string(&sts).unwrap_or_default();
    let pod = sts.spec.template.spec.expect("a pod");
    let c = &pod.containers[0];
    assert_env(c, &[("APP_USER", "pg-app"), ("APP_DATABASE", "app")]);
    assert_secret_env(c, &[("APP_PASSWORD", ("pg-app", "password"))]);
    let optional = c
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "APP_PASSWORD")
        .and_then(|e| e.value_from.as_ref()?.secret_key_ref.as_ref()?.optional);
    assert_eq!(
        optional,
        Some(true),
        "a cluster older than the Secret still starts its pods"
    );
    let password = render::app_secret(&pg).string_data.unwrap_or_default()["password"].clone();
    assert!(!text.contains(&password));
}
