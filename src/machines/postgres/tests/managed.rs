//! `spec.roles` and `spec.databases` as the operator sees them: what the pods' Role may
//! read, and a refused entry at rest.

use super::rendering::object;
use super::*;
use crate::engine::Health;
use crate::machines::postgres::managed::{Ensure, Kind, ObjectsReport, Outcome, RoleSpec, State};

fn role(name: &str, secret: Option<&str>) -> RoleSpec {
    RoleSpec {
        name: name.into(),
        ensure: Ensure::Present,
        login: true,
        superuser: false,
        createdb: false,
        createrole: false,
        inherit: true,
        replication: false,
        connection_limit: -1,
        in_roles: vec![],
        password_secret: secret.map(str::to_owned),
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
fn the_pods_may_read_exactly_the_password_secrets_the_roles_name() {
    let plain = render::instance_role(&object(spec("16.3"))).expect("renders");
    assert!(
        plain
            .rules
            .iter()
            .flatten()
            .all(|r| !r.resources.iter().flatten().any(|x| x == "secrets")),
        "{plain:?}"
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
        Some(&["reporter-password".to_owned()][..])
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
    let annotation = settings::annotation_of(&object(s)).expect("an annotation");
    let parsed = settings::parse(&annotation).expect("parses");
    assert_eq!(parsed.roles, vec![role("reporter", None)]);
}
