//! Declarative roles and databases: `spec.roles` and `spec.databases`, what the primary's
//! instance manager makes of them, and how it tells the operator.
//!
//! # How a change reaches the server
//! Both lists travel in the pods' settings annotation
//! ([`super::settings::InstanceSettings`]), like `spec.postgresql`: no pod restarts. The
//! manager of the writable instance ([`crate::instance::run::managed`]) compares them
//! with the catalog and runs `CREATE`, `ALTER` or `DROP` for what differs, each entry on
//! its own, on a task of its own (the Lease renewals never wait on it). A role's
//! password is read from its Secret (key `password`) through the API server: the pods'
//! Role names exactly the Secrets the spec names ([`password_secrets`]), and the manager
//! reads them again every minute, so a changed password is applied without a restart.
//!
//! It reports on its pod, in the condition [`OBJECTS_APPLIED`], what each entry came to
//! ([`ObjectsReport`]); the operator copies the primary's report into `status.roles`
//! and `status.databases` and is `Degraded`, naming the entries, while any was refused.
//!
//! # Guarantees
//! - An entry that cannot be applied (an owner that does not exist, a role that still
//!   owns objects when asked `absent`, a password Secret that cannot be read) is
//!   reported refused with PostgreSQL's reason, and every other entry is still applied.
//! - Nothing outside the lists is touched: a role or database not named is left alone,
//!   and a database asked `absent` is dropped only if no one is connected to it.
//! - [`ObjectsReport::from_condition`] reads back exactly what
//!   [`ObjectsReport::condition`] wrote.
//!
//! # Assumptions
//! Names are plain identifiers (the schema allows lower-case letters, digits, `_` and
//! `-`), so a report line parses without quoting.

use std::collections::BTreeSet;

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The pod condition the primary's manager reports its roles and databases in.
pub const OBJECTS_APPLIED: &str = "lockstep.dev/ObjectsApplied";

/// The key of a role's password in its Secret.
pub const PASSWORD_KEY: &str = "password";

/// The reasons of [`OBJECTS_APPLIED`].
pub mod reason {
    /// Every entry is as the spec asks.
    pub const APPLIED: &str = "Applied";
    /// Some entry could not be applied (the others were).
    pub const REFUSED: &str = "Refused";
}

/// Whether an entry should exist.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default, JsonSchema)]
pub enum Ensure {
    /// Created, or altered to match (default).
    #[default]
    #[serde(rename = "present")]
    Present,
    /// Dropped if it exists.
    #[serde(rename = "absent")]
    Absent,
}

/// One entry of `spec.roles`: a role the primary's manager keeps as described.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.name != 'postgres' && !self.name.startsWith('pg_') && self.name != 'replicator'")
        .message("spec.roles[].name: postgres, replicator and names starting with pg_ are PostgreSQL's or Lockstep's own")
)]
pub struct RoleSpec {
    /// The role's name.
    #[schemars(length(min = 1, max = 63), regex(pattern = "^[a-z_][a-z0-9_-]*$"))]
    pub name: String,
    /// `present` (default) or `absent`.
    #[serde(default)]
    pub ensure: Ensure,
    /// May log in.
    #[serde(default)]
    pub login: bool,
    /// Is a superuser.
    #[serde(default)]
    pub superuser: bool,
    /// May create databases.
    #[serde(default)]
    pub createdb: bool,
    /// May create roles.
    #[serde(default)]
    pub createrole: bool,
    /// Inherits the privileges of the roles it is a member of (default `true`).
    #[serde(default = "yes")]
    pub inherit: bool,
    /// May replicate.
    #[serde(default)]
    pub replication: bool,
    /// How many connections it may hold at once; `-1` (default): no limit.
    #[serde(default = "no_limit")]
    #[schemars(range(min = -1))]
    pub connection_limit: i32,
    /// The roles it is a member of (and only those, among the roles it could be
    /// granted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = 32, "items" = {"type": "string", "maxLength": 63}))]
    pub in_roles: Vec<String>,
    /// A Secret in the cluster's namespace whose key `password` is the role's password,
    /// applied without a restart whenever it changes. Without one the role's password
    /// is left as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub password_secret: Option<String>,
}

fn yes() -> bool {
    true
}

fn no_limit() -> i32 {
    -1
}

impl RoleSpec {
    /// A role `name` that may log in, with every other field at its default (present,
    /// no other attribute but `inherit`, no limit, no memberships, no password Secret).
    #[must_use]
    pub fn login(name: &str) -> Self {
        RoleSpec {
            name: name.to_owned(),
            ensure: Ensure::Present,
            login: true,
            superuser: false,
            createdb: false,
            createrole: false,
            inherit: yes(),
            replication: false,
            connection_limit: no_limit(),
            in_roles: Vec::new(),
            password_secret: None,
        }
    }
}

/// One entry of `spec.databases`: a database the primary's manager keeps.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseSpec {
    /// The database's name.
    #[schemars(length(min = 1, max = 63), regex(pattern = "^[a-z_][a-z0-9_-]*$"))]
    pub name: String,
    /// `present` (default) or `absent`.
    #[serde(default)]
    pub ensure: Ensure,
    /// The role that owns it (a role of `spec.roles`, `<name>-app` or any other that
    /// exists).
    #[schemars(length(min = 1, max = 63))]
    pub owner: String,
    /// Extensions created in it by name (`CREATE EXTENSION IF NOT EXISTS`); one the
    /// image does not ship is refused, naming it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = 32, "items" = {"type": "string", "maxLength": 63}))]
    pub extensions: Vec<String>,
}

/// The names of the Secrets `roles` read passwords from: the pods' Role may read these
/// and no other.
#[must_use]
pub fn password_secrets(roles: &[RoleSpec]) -> BTreeSet<String> {
    roles
        .iter()
        .filter(|r| r.ensure == Ensure::Present)
        .filter_map(|r| r.password_secret.clone())
        .collect()
}

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, strum::Display, strum::EnumString)]
#[strum(serialize_all = "lowercase")]
pub enum Kind {
    /// `spec.roles`.
    Role,
    /// `spec.databases`.
    Database,
}

impl Kind {
    /// The spec field that lists it.
    #[must_use]
    pub fn field(self) -> &'static str {
        match self {
            Kind::Role => "spec.roles",
            Kind::Database => "spec.databases",
        }
    }
}

/// What an entry came to.
#[derive(
    Serialize,
    Deserialize,
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    JsonSchema,
    strum::Display,
    strum::EnumString,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum State {
    /// It exists as the spec asks.
    Present,
    /// It does not exist, as the spec asks.
    Absent,
    /// It could not be applied; the message says why.
    Refused,
}

/// One entry of the report.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Outcome {
    /// Role or database.
    pub kind: Kind,
    /// Its name.
    pub name: String,
    /// What it came to.
    pub state: State,
    /// PostgreSQL's reason, when refused (one line).
    pub message: String,
}

/// What the primary's manager reports of `spec.roles` and `spec.databases`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectsReport {
    /// Every entry, in the spec's order (roles first).
    pub outcomes: Vec<Outcome>,
    /// The digest of the settings annotation the report is about
    /// ([`super::settings::digest_of`]).
    pub judged: String,
}

const JUDGED: &str = "judged ";

impl ObjectsReport {
    /// The entries refused, as a person reads them: `spec.roles[bob]: <reason>`.
    #[must_use]
    pub fn refused(&self) -> Vec<String> {
        self.outcomes
            .iter()
            .filter(|o| o.state == State::Refused)
            .map(|o| format!("{}[{}]: {}", o.kind.field(), o.name, o.message))
            .collect()
    }

    /// The pod condition's status, reason and message: one line per entry
    /// (`role bob: present`, `database x: refused: <reason>`), then `judged <digest>`.
    #[must_use]
    pub fn condition(&self) -> (&'static str, &'static str, String) {
        let mut lines: Vec<String> = self
            .outcomes
            .iter()
            .map(|o| match o.state {
                State::Refused => format!(
                    "{} {}: {}: {}",
                    o.kind,
                    o.name,
                    o.state,
                    one_line(&o.message)
                ),
                _ => format!("{} {}: {}", o.kind, o.name, o.state),
            })
            .collect();
        lines.push(format!("{JUDGED}{}", self.judged));
        let (status, why) = if self.refused().is_empty() {
            ("True", reason::APPLIED)
        } else {
            ("False", reason::REFUSED)
        };
        (status, why, lines.join("\n"))
    }

    /// Reads back what [`Self::condition`] wrote; `None` for anything else.
    #[must_use]
    pub fn from_condition(message: &str) -> Option<Self> {
        let mut report = ObjectsReport::default();
        for line in message.lines() {
            if let Some(judged) = line.strip_prefix(JUDGED) {
                report.judged = judged.to_owned();
                return Some(report);
            }
            let (kind, rest) = line.split_once(' ')?;
            let (name, rest) = rest.split_once(": ")?;
            let (state, message) = rest.split_once(": ").unwrap_or((rest, ""));
            report.outcomes.push(Outcome {
                kind: kind.parse().ok()?,
                name: name.to_owned(),
                state: state.parse().ok()?,
                message: message.to_owned(),
            });
        }
        None
    }
}

/// `text` on one line: PostgreSQL's multi-line errors (`DETAIL:`) joined by spaces.
#[must_use]
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An entry of `status.roles` or `status.databases`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStatus {
    /// Its name.
    pub name: String,
    /// What the primary's manager last made of it.
    pub state: State,
    /// Why it was refused.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// `status.roles` and `status.databases` from a report.
#[must_use]
pub fn statuses(report: &ObjectsReport) -> (Vec<ObjectStatus>, Vec<ObjectStatus>) {
    let of = |kind| {
        report
            .outcomes
            .iter()
            .filter(|o| o.kind == kind)
            .map(|o| ObjectStatus {
                name: o.name.clone(),
                state: o.state,
                message: o.message.clone(),
            })
            .collect()
    };
    (of(Kind::Role), of(Kind::Database))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn outcome() -> impl Strategy<Value = Outcome> {
        (
            prop_oneof![Just(Kind::Role), Just(Kind::Database)],
            "[a-z_][a-z0-9_-]{0,20}",
            prop_oneof![
                Just(State::Present),
                Just(State::Absent),
                Just(State::Refused)
            ],
            "[ -~]{1,60}",
        )
            .prop_map(|(kind, name, state, message)| Outcome {
                kind,
                name,
                state,
                message: if state == State::Refused {
                    one_line(&message)
                } else {
                    String::new()
                },
            })
    }

    proptest! {
        #[test]
        fn a_report_reads_back_as_it_was_written(
            outcomes in proptest::collection::vec(outcome(), 0..6),
            judged in "[0-9a-f]{0,16}",
        ) {
            let report = ObjectsReport { outcomes, judged };
            let (_, _, message) = report.condition();
            prop_assert_eq!(ObjectsReport::from_condition(&message), Some(report));
        }
    }

    #[test]
    fn a_refused_entry_makes_the_condition_false_and_names_the_field() {
        let report = ObjectsReport {
            outcomes: vec![
                Outcome {
                    kind: Kind::Role,
                    name: "reporting".into(),
                    state: State::Present,
                    message: String::new(),
                },
                Outcome {
                    kind: Kind::Database,
                    name: "orders".into(),
                    state: State::Refused,
                    message: "role \"bob\" does not exist".into(),
                },
            ],
            judged: "abc".into(),
        };
        let (status, why, _) = report.condition();
        assert_eq!((status, why), ("False", reason::REFUSED));
        assert_eq!(
            report.refused(),
            ["spec.databases[orders]: role \"bob\" does not exist"]
        );
    }

    #[test]
    fn only_present_roles_name_secrets_the_pods_may_read() {
        let role = |name: &str, ensure, secret: Option<&str>| RoleSpec {
            ensure,
            password_secret: secret.map(str::to_owned),
            ..RoleSpec::login(name)
        };
        let roles = [
            role("a", Ensure::Present, Some("a-pw")),
            role("b", Ensure::Absent, Some("b-pw")),
            role("c", Ensure::Present, None),
        ];
        assert_eq!(
            password_secrets(&roles),
            BTreeSet::from(["a-pw".to_owned()])
        );
    }
}
