//! The model check of [`super::plan`]: generated specs against generated catalogs, the
//! plan's scripts run against a simulated PostgreSQL that refuses what PostgreSQL
//! refuses (a role or database that exists already, an owner or a granted role that
//! does not exist, a role that still owns a database, a membership cycle, an extension
//! the image does not ship) and fails scripts at random (a connection lost), a
//! transaction leaving nothing of itself. After every pass:
//! - **the report is true:** an entry reported present exists as asked, one reported
//!   absent does not exist, one refused says why;
//! - **nothing unlisted is touched:** a role or database the spec does not name keeps
//!   its attributes, password, owner and existence (PostgreSQL drops the memberships in
//!   a dropped role itself);
//! - **it converges and then rests:** without faults, one pass reaches every entry a
//!   spec can reach (and a pass after a faulty one does), and a third changes nothing (no statement of an entry
//!   it applies but `CREATE EXTENSION IF NOT EXISTS`).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::{Attributes, Catalog, Password, Planned, RoleRow, Script, Statement, plan};
use crate::pod::managed::{DatabaseSpec, Ensure, Kind, RoleSpec, State};

/// The roles a spec may list (and a catalog may hold).
const ROLES: [&str; 3] = ["app", "reporter", "etl"];
/// A role no spec lists: it must stay as it is.
const BYSTANDER: &str = "bystander";
/// Roles a spec may make its roles members of: the listed ones, built-in ones, and one
/// that does not exist.
const GRANTABLE: [&str; 5] = ["app", "reporter", "pg_monitor", "pg_read_all_data", "ghost"];
/// The databases a spec may list.
const DATABASES: [&str; 2] = ["orders", "reports"];
/// A database no spec lists, owned by the bystander.
const LEGACY: &str = "legacy";
/// Extensions: the image ships the first two.
const EXTENSIONS: [&str; 3] = ["pgcrypto", "citext", "nope"];

/// A role in the simulated server.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Role {
    row: RoleRow,
    password: Option<String>,
}

/// A database in the simulated server.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Database {
    owner: String,
    extensions: BTreeSet<String>,
}

/// The simulated server's catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Server {
    roles: BTreeMap<String, Role>,
    databases: BTreeMap<String, Database>,
}

impl Server {
    /// What the manager reads of the entries `roles` and `databases` name.
    fn catalog(&self, roles: &[RoleSpec], databases: &[DatabaseSpec]) -> Catalog {
        Catalog {
            roles: roles
                .iter()
                .filter_map(|r| Some((r.name.clone(), self.roles.get(&r.name)?.row.clone())))
                .collect(),
            databases: databases
                .iter()
                .filter_map(|d| Some((d.name.clone(), self.databases.get(&d.name)?.owner.clone())))
                .collect(),
        }
    }

    fn role_exists(&self, name: &str) -> bool {
        self.roles.contains_key(name) || name.starts_with("pg_") || name == "postgres"
    }

    /// One statement, as PostgreSQL would take it.
    fn apply(&mut self, database: &str, statement: &Statement) -> Result<(), String> {
        match statement {
            Statement::CreateRole {
                name,
                attributes,
                password,
            } => {
                if self.role_exists(name) {
                    return Err(format!("role {name} already exists"));
                }
                let row = RoleRow {
                    attributes: *attributes,
                    member_of: BTreeSet::new(),
                };
                let password = password.clone();
                self.roles.insert(name.clone(), Role { row, password });
            }
            Statement::AlterRole { name, attributes } => {
                self.role_mut(name)?.row.attributes = *attributes;
            }
            Statement::SetPassword { name, password } => {
                self.role_mut(name)?.password = Some(password.clone());
            }
            Statement::Grant { role, member } => {
                if !self.role_exists(role) {
                    return Err(format!("role {role} does not exist"));
                }
                if role == member || self.member_of_transitively(role, member) {
                    return Err(format!("role {member} is a member of role {role}"));
                }
                self.role_mut(member)?.row.member_of.insert(role.clone());
            }
            Statement::Revoke { role, member } => {
                if !self.role_exists(role) {
                    return Err(format!("role {role} does not exist"));
                }
                self.role_mut(member)?.row.member_of.remove(role);
            }
            Statement::DropRole { name } => {
                if let Some((db, _)) = self.databases.iter().find(|(_, d)| d.owner == *name) {
                    return Err(format!(
                        "role {name} cannot be dropped because some objects depend on it: owner of database {db}"
                    ));
                }
                self.roles
                    .remove(name)
                    .ok_or_else(|| format!("role {name} does not exist"))?;
                for r in self.roles.values_mut() {
                    r.row.member_of.remove(name);
                }
            }
            Statement::CreateDatabase { name, owner } => {
                if self.databases.contains_key(name) {
                    return Err(format!("database {name} already exists"));
                }
                if !self.role_exists(owner) {
                    return Err(format!("role {owner} does not exist"));
                }
                let db = Database {
                    owner: owner.clone(),
                    extensions: BTreeSet::new(),
                };
                self.databases.insert(name.clone(), db);
            }
            Statement::SetOwner { name, owner } => {
                if !self.role_exists(owner) {
                    return Err(format!("role {owner} does not exist"));
                }
                self.database_mut(name)?.owner = owner.clone();
            }
            Statement::DropDatabase { name } => {
                self.databases
                    .remove(name)
                    .ok_or_else(|| format!("database {name} does not exist"))?;
            }
            Statement::CreateExtension { name } => {
                if !EXTENSIONS[..2].contains(&name.as_str()) {
                    return Err(format!("extension {name} is not available"));
                }
                self.database_mut(database)?.extensions.insert(name.clone());
            }
        }
        Ok(())
    }

    fn role_mut(&mut self, name: &str) -> Result<&mut Role, String> {
        self.roles
            .get_mut(name)
            .ok_or_else(|| format!("role {name} does not exist"))
    }

    fn database_mut(&mut self, name: &str) -> Result<&mut Database, String> {
        self.databases
            .get_mut(name)
            .ok_or_else(|| format!("database {name} does not exist"))
    }

    /// Whether `role` is a member of `of`, directly or through other roles.
    fn member_of_transitively(&self, role: &str, of: &str) -> bool {
        let mut seen = BTreeSet::new();
        let mut todo = vec![role.to_owned()];
        while let Some(r) = todo.pop() {
            if r == of {
                return true;
            }
            if seen.insert(r.clone())
                && let Some(role) = self.roles.get(&r)
            {
                todo.extend(role.row.member_of.iter().cloned());
            }
        }
        false
    }

    /// A script, as `psql` runs it: stopping at the first failure; a transaction
    /// leaves nothing of itself then. `fails` fails it before its statement of that
    /// index (a connection lost).
    fn run(&mut self, script: &Script, fails: Option<usize>) -> Result<(), String> {
        let before = self.clone();
        for (i, statement) in script.statements.iter().enumerate() {
            let done = if fails.is_some_and(|f| f % (script.statements.len() + 1) == i) {
                Err("server closed the connection unexpectedly".to_owned())
            } else {
                self.apply(&script.database, statement)
            };
            if let Err(why) = done {
                if script.transaction {
                    *self = before;
                }
                return Err(why);
            }
        }
        Ok(())
    }
}

/// What one pass did: each entry's outcome, and the statements of the entries that
/// succeeded (a refused one is tried again at every pass, as it should be).
struct Pass {
    outcomes: Vec<(Kind, String, Result<State, String>)>,
    statements: Vec<Statement>,
}

/// One pass of the manager over `server`: read, plan, run (the manager's own loop in
/// `run::managed`, with the simulated server in place of `psql`). `faults` says, per
/// script run, whether (and before which statement) it fails.
fn pass(
    server: &mut Server,
    spec: &Spec,
    applied: &mut BTreeMap<String, String>,
    faults: &mut impl Iterator<Item = Option<usize>>,
) -> Pass {
    let catalog = server.catalog(&spec.roles, &spec.databases);
    let planned: Vec<Planned> = plan(
        &spec.roles,
        &spec.databases,
        &catalog,
        &spec.passwords,
        applied,
    );
    let mut outcomes = Vec::new();
    let mut statements = Vec::new();
    for entry in planned {
        let outcome = match &entry.work {
            Err(why) => Err(why.clone()),
            Ok(scripts) => scripts
                .iter()
                .try_for_each(|s| server.run(s, faults.next().flatten()))
                .map(|()| entry.then),
        };
        if let (Ok(_), Ok(scripts)) = (&outcome, &entry.work) {
            statements.extend(scripts.iter().flat_map(|s| s.statements.iter().cloned()));
        }
        if let (Ok(_), Some(version)) = (&outcome, entry.password_version) {
            applied.insert(entry.name.clone(), version);
        }
        outcomes.push((entry.kind, entry.name, outcome));
    }
    Pass {
        outcomes,
        statements,
    }
}

/// A spec, with the passwords its Secrets hold (or why one cannot be read).
#[derive(Debug, Clone)]
struct Spec {
    roles: Vec<RoleSpec>,
    databases: Vec<DatabaseSpec>,
    passwords: BTreeMap<String, Password>,
}

fn attributes() -> impl Strategy<Value = Attributes> {
    (prop::array::uniform6(any::<bool>()), -1..3i32).prop_map(|(flags, connection_limit)| {
        Attributes {
            flags,
            connection_limit,
        }
    })
}

fn names<const N: usize>(from: [&'static str; N]) -> impl Strategy<Value = Vec<String>> {
    prop::sample::subsequence(from.to_vec(), 0..=N)
        .prop_map(|v| v.into_iter().map(str::to_owned).collect())
}

fn role_spec(name: String) -> impl Strategy<Value = RoleSpec> {
    (
        prop::bool::weighted(0.75),
        attributes(),
        names(GRANTABLE),
        prop::option::of(0..3u8),
    )
        .prop_map(move |(present, a, in_roles, secret)| RoleSpec {
            name: name.clone(),
            ensure: if present {
                Ensure::Present
            } else {
                Ensure::Absent
            },
            superuser: a.flags[0],
            inherit: a.flags[1],
            createrole: a.flags[2],
            createdb: a.flags[3],
            login: a.flags[4],
            replication: a.flags[5],
            connection_limit: a.connection_limit,
            in_roles,
            password_secret: secret.map(|n| format!("secret-{n}")),
        })
}

fn database_spec(name: String) -> impl Strategy<Value = DatabaseSpec> {
    let owners = [ROLES.as_slice(), &[BYSTANDER, "postgres", "ghost"]].concat();
    (
        prop::bool::weighted(0.8),
        prop::sample::select(owners),
        names(EXTENSIONS),
    )
        .prop_map(move |(present, owner, extensions)| DatabaseSpec {
            name: name.clone(),
            ensure: if present {
                Ensure::Present
            } else {
                Ensure::Absent
            },
            owner: owner.to_owned(),
            extensions,
        })
}

fn spec() -> impl Strategy<Value = Spec> {
    (names(ROLES), names(DATABASES), 0..4u8)
        .prop_flat_map(|(roles, databases, version)| {
            let roles: Vec<_> = roles.into_iter().map(role_spec).collect();
            let databases: Vec<_> = databases.into_iter().map(database_spec).collect();
            (roles, databases, Just(version), any::<bool>())
        })
        .prop_map(|(roles, databases, version, unreadable)| {
            let passwords = roles
                .iter()
                .filter(|r| r.ensure == Ensure::Present)
                .filter_map(|r| {
                    let secret = r.password_secret.as_ref()?;
                    let read = if unreadable && secret == "secret-0" {
                        Err(format!("reading the password Secret {secret}: 404"))
                    } else {
                        Ok((format!("v{version}"), format!("{secret}-pw{version}")))
                    };
                    Some((r.name.clone(), read))
                })
                .collect();
            Spec {
                roles,
                databases,
                passwords,
            }
        })
}

fn server() -> impl Strategy<Value = Server> {
    let role = (attributes(), names(GRANTABLE), prop::option::of("[a-c]"));
    (
        prop::collection::btree_map(prop::sample::select(ROLES.to_vec()), role, 0..=3),
        prop::collection::btree_map(
            prop::sample::select(DATABASES.to_vec()),
            prop::sample::select([ROLES.as_slice(), &[BYSTANDER, "postgres"]].concat()),
            0..=2,
        ),
    )
        .prop_map(|(roles, databases)| {
            let mut s = Server {
                roles: BTreeMap::new(),
                databases: BTreeMap::new(),
            };
            let bystander = Role {
                row: RoleRow {
                    attributes: Attributes {
                        flags: [false, true, false, false, true, false],
                        connection_limit: -1,
                    },
                    member_of: ["app".to_owned()].into(),
                },
                password: Some("theirs".to_owned()),
            };
            s.roles.insert(BYSTANDER.to_owned(), bystander);
            for (name, (attributes, member_of, password)) in roles {
                let row = RoleRow {
                    attributes,
                    member_of: BTreeSet::new(),
                };
                s.roles.insert(name.to_owned(), Role { row, password });
                for g in member_of {
                    // Only what PostgreSQL would have let exist.
                    let _ = s.apply(
                        "postgres",
                        &Statement::Grant {
                            role: g,
                            member: name.to_owned(),
                        },
                    );
                }
            }
            for (name, owner) in databases {
                if s.role_exists(owner) {
                    let db = Database {
                        owner: owner.to_owned(),
                        extensions: BTreeSet::new(),
                    };
                    s.databases.insert(name.to_owned(), db);
                }
            }
            let legacy = Database {
                owner: BYSTANDER.to_owned(),
                extensions: BTreeSet::new(),
            };
            s.databases.insert(LEGACY.to_owned(), legacy);
            s
        })
}

/// Why the report of `done` is not true of `server`, if it is not.
fn untrue(server: &Server, spec: &Spec, done: &Pass) -> Option<String> {
    for (kind, name, outcome) in &done.outcomes {
        let exists = match kind {
            Kind::Role => server.roles.contains_key(name),
            Kind::Database => server.databases.contains_key(name),
        };
        let why = match outcome {
            Ok(State::Absent) if exists => "reported absent, but exists",
            Ok(State::Present) if !exists => "reported present, but does not exist",
            Ok(State::Present) if !as_asked(server, spec, *kind, name) => {
                "reported present, but not as asked"
            }
            Err(why) if why.is_empty() => "refused without a reason",
            Ok(State::Refused) => "refused as a state, without a reason",
            _ => continue,
        };
        return Some(format!("{kind} {name}: {why}: {server:?}"));
    }
    None
}

/// Whether the entry exists in `server` as `spec` asks.
fn as_asked(server: &Server, spec: &Spec, kind: Kind, name: &str) -> bool {
    match kind {
        Kind::Role => {
            let (Some(r), Some(s)) = (
                server.roles.get(name),
                spec.roles.iter().find(|r| r.name == name),
            ) else {
                return false;
            };
            let password = spec.passwords.get(name).and_then(|p| p.as_ref().ok());
            r.row.attributes == Attributes::of(s)
                && r.row.member_of == s.in_roles.iter().cloned().collect()
                && password.is_none_or(|(_, p)| r.password.as_ref() == Some(p))
        }
        Kind::Database => {
            let (Some(d), Some(s)) = (
                server.databases.get(name),
                spec.databases.iter().find(|d| d.name == name),
            ) else {
                return false;
            };
            d.owner == s.owner && s.extensions.iter().all(|e| d.extensions.contains(e))
        }
    }
}

/// The roles and databases a spec does not list, by name.
type Unlisted = (Vec<(String, Role)>, Vec<(String, Database)>);

/// What a pass must leave alone: every role and database the spec does not name, as
/// it was (without memberships in roles the pass dropped).
fn unlisted(server: &Server, spec: &Spec) -> Unlisted {
    let listed_role = |n: &str| spec.roles.iter().any(|r| r.name == n);
    let listed_db = |n: &str| spec.databases.iter().any(|d| d.name == n);
    let roles = server
        .roles
        .iter()
        .filter(|(n, _)| !listed_role(n))
        .map(|(n, r)| {
            let mut r = r.clone();
            r.row.member_of.retain(|m| !listed_role(m));
            (n.clone(), r)
        })
        .collect();
    let databases = server
        .databases
        .iter()
        .filter(|(n, _)| !listed_db(n))
        .map(|(n, d)| (n.clone(), d.clone()))
        .collect();
    (roles, databases)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn roles_and_databases_are_reported_truly_touch_nothing_else_and_converge(
        spec in spec(),
        start in server(),
        faults in prop::collection::vec(prop::option::weighted(0.3, 0..6usize), 0..24),
    ) {
        // Without faults, one pass reaches every entry a spec can reach.
        let mut once = start.clone();
        let first = pass(&mut once, &spec, &mut BTreeMap::new(), &mut std::iter::repeat(None));
        for (kind, name, outcome) in &first.outcomes {
            if let Err(why) = outcome {
                prop_assert!(
                    unreachable(&once, &spec, *kind, name),
                    "{kind} {name} refused in a pass without faults: {why}"
                );
            }
        }
        let mut server = start;
        let mut applied = BTreeMap::new();
        let before = unlisted(&server, &spec);
        // A pass under faults, then passes without.
        let mut faulty = faults.into_iter().chain(std::iter::repeat(None));
        let done = pass(&mut server, &spec, &mut applied, &mut faulty);
        prop_assert_eq!(untrue(&server, &spec, &done), None);
        prop_assert_eq!(&unlisted(&server, &spec), &before, "an unlisted entry changed");
        let mut clean = std::iter::repeat(None);
        let second = pass(&mut server, &spec, &mut applied, &mut clean);
        prop_assert_eq!(untrue(&server, &spec, &second), None);
        let rested = server.clone();
        let third = pass(&mut server, &spec, &mut applied, &mut clean);
        prop_assert_eq!(untrue(&server, &spec, &third), None);
        prop_assert_eq!(&server, &rested, "a pass at rest changed the catalog");
        let writes: Vec<&Statement> = third
            .statements
            .iter()
            .filter(|s| !matches!(s, Statement::CreateExtension { .. }))
            .collect();
        prop_assert!(writes.is_empty(), "a pass at rest ran {writes:?}");
        // Every entry a spec can reach is reached by the pass after the faulty one.
        for (kind, name, outcome) in &second.outcomes {
            if let Err(why) = outcome {
                prop_assert!(
                    unreachable(&server, &spec, *kind, name),
                    "{kind} {name} refused without a fault: {why}"
                );
            }
        }
        prop_assert_eq!(&unlisted(&server, &spec), &before, "an unlisted entry changed");
    }
}

/// Whether an entry refused without faults asks the impossible: a role to be a member
/// of one that does not exist, is asked absent or closes a cycle; a password Secret
/// that cannot be read; a database whose owner does not exist or an extension the
/// image does not ship; a role to drop that still owns a database.
fn unreachable(server: &Server, spec: &Spec, kind: Kind, name: &str) -> bool {
    match kind {
        Kind::Role => {
            let Some(r) = spec.roles.iter().find(|r| r.name == name) else {
                return false;
            };
            match r.ensure {
                Ensure::Absent => server.databases.values().any(|d| d.owner == name),
                Ensure::Present => {
                    spec.passwords.get(name).is_some_and(Result::is_err)
                        || r.in_roles.iter().any(|g| {
                            !server.role_exists(g)
                                || g == name
                                || spec
                                    .roles
                                    .iter()
                                    .any(|o| o.name == *g && o.ensure == Ensure::Absent)
                                || server.member_of_transitively(g, name)
                        })
                }
            }
        }
        Kind::Database => {
            let Some(d) = spec.databases.iter().find(|d| d.name == name) else {
                return false;
            };
            d.ensure == Ensure::Present
                && (!server.role_exists(&d.owner)
                    || d.extensions
                        .iter()
                        .any(|e| !EXTENSIONS[..2].contains(&e.as_str())))
        }
    }
}

#[test]
fn a_role_to_keep_that_is_to_join_a_role_asked_absent_is_refused_naming_the_field() {
    let mut keep = RoleSpec::login("app");
    keep.in_roles = vec!["reporter".into()];
    let drop = RoleSpec {
        ensure: Ensure::Absent,
        ..RoleSpec::login("reporter")
    };
    let planned = plan(
        &[keep, drop],
        &[],
        &Catalog::default(),
        &BTreeMap::new(),
        &BTreeMap::new(),
    );
    assert_eq!(
        planned[0].work,
        Err("spec.roles[app].inRoles names reporter, which spec.roles asks absent".to_owned())
    );
}

#[test]
fn a_role_is_created_after_the_listed_roles_it_joins() {
    let mut member = RoleSpec::login("app");
    member.in_roles = vec!["reporter".into()];
    let planned = plan(
        &[member, RoleSpec::login("reporter")],
        &[],
        &Catalog::default(),
        &BTreeMap::new(),
        &BTreeMap::new(),
    );
    let order: Vec<&str> = planned.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(order, ["reporter", "app"]);
}
