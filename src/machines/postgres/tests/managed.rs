//! `spec.roles` and `spec.databases` as the operator sees them: what the pods' Role may
//! read, and a refused entry at rest.

use super::rendering::object;
use super::*;
use crate::engine::Health;
use crate::pod::managed::{Kind, ObjectsReport, Outcome, RoleSpec, State};

fn role(name: &str, secret: Option<&str>) -> RoleSpec {
    RoleSpec {
        password_secret: secret.map(str::to_owned),
        ..RoleSpec::login(name)
    }
}

fn refused_database(name: &str, why: &str) -> ObjectsReport {
    ObjectsReport {
        outcomes: vec![
            Outcome {
                kind: Kind::Role,
                name: "reporter".into(),
                state: State::Present,
                message: String::new(),
            },
            Outcome {
                kind: Kind::Database,
                name: name.into(),
                state: State::Refused,
                message: why.into(),
            },
        ],
        judged: "d".into(),
    }
}

#[test]
fn the_pods_may_read_exactly_the_password_secrets_the_roles_name_and_the_applications() {
    let plain = render::instance_role(&object(spec("16.3"))).expect("renders");
    let read = |role: &k8s_openapi::api::rbac::v1::Role| {
        role.rules
            .iter()
            .flatten()
            .filter(|r| r.resources.iter().flatten().any(|x| x == "secrets"))
            .flat_map(|r| r.resource_names.clone().unwrap_or_default())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        read(&plain),
        ["pg-app"],
        "the application role's password follows its Secret"
    );
    let mut s = spec("16.3");
    s.roles = vec![
        role("reporter", Some("reporter-password")),
        role("batch", None),
    ];
    let rendered = render::instance_role(&object(s)).expect("renders");
    let secrets: Vec<_> = rendered
        .rules
        .iter()
        .flatten()
        .filter(|r| r.resources.iter().flatten().any(|x| x == "secrets"))
        .collect();
    assert_eq!(secrets.len(), 1, "{rendered:?}");
    assert_eq!(secrets[0].verbs, ["get"]);
    assert_eq!(
        secrets[0].resource_names.as_deref(),
        Some(&["pg-app".to_owned(), "reporter-password".to_owned()][..])
    );
}

#[test]
fn an_entry_the_primary_refused_makes_the_cluster_degraded_naming_it() {
    let mut o = at_rest(V1, 0);
    o.own.objects = Some(refused_database("orders", "role \"nobody\" does not exist"));
    match decide(&spec("16.3"), &ready(V1, 0), o) {
        Decision::Stay {
            reason,
            message,
            health,
            ..
        } => {
            assert_eq!(reason, OBJECTS_REFUSED);
            assert_eq!(health, Health::Degraded);
            assert!(
                message.contains("spec.databases[orders]: role \"nobody\" does not exist")
                    && message.contains("the other entries are applied"),
                "{message}"
            );
        }
        other => panic!("a degraded stay, got {other:?}"),
    }
}

#[test]
fn every_entry_applied_is_serving() {
    let mut o = at_rest(V1, 0);
    let mut report = refused_database("orders", "");
    report.outcomes[1].state = State::Present;
    o.own.objects = Some(report);
    let d = decide(&spec("16.3"), &ready(V1, 0), o);
    assert_eq!(d.reason(), SERVING);
}

#[test]
fn the_entries_travel_in_the_settings_annotation() {
    let mut s = spec("16.3");
    s.roles = vec![role("reporter", None)];
    let annotation = crate::machines::postgres::instance_settings::annotation_of(&object(s))
        .expect("an annotation");
    let parsed = settings::parse(&annotation).expect("parses");
    assert_eq!(parsed.roles, vec![role("reporter", None)]);
}

#[test]
fn the_status_shows_the_primarys_report_keeps_it_while_the_primary_is_silent_and_drops_it_with_the_entries()
 {
    use crate::driver::Operator;
    use crate::machines::postgres::api::PostgresClusterStatus;
    let mut s = spec("16.3");
    s.roles = vec![role("reporter", None)];
    let mut pg = object(s);
    let status = testing::status_in(&ready(V1, 0));
    let mut o = at_rest(V1, 0);
    o.own.objects = Some(refused_database("orders", "role \"nobody\" does not exist"));
    let shown = Postgres::status(&pg, status.clone(), Some(&ready(V1, 0)), &o, t(10));
    assert_eq!(
        shown["roles"],
        serde_json::json!([{"name": "reporter", "state": "present"}])
    );
    assert_eq!(
        shown["databases"],
        serde_json::json!([{
            "name": "orders", "state": "refused",
            "message": "role \"nobody\" does not exist",
        }])
    );
    // A new primary that has not reported yet: the status keeps what was said.
    pg.status = Some(serde_json::from_value::<PostgresClusterStatus>(shown).expect("a status"));
    o.own.objects = None;
    let kept = Postgres::status(&pg, status.clone(), Some(&ready(V1, 1)), &o, t(20));
    assert_eq!(kept["databases"][0]["name"], "orders");
    // The spec lists nothing any more: nothing is shown.
    pg.spec.roles.clear();
    let dropped = Postgres::status(&pg, status, Some(&ready(V1, 1)), &o, t(30));
    assert!(
        dropped.get("roles").is_none() && dropped.get("databases").is_none(),
        "{dropped}"
    );
}
