//! `spec.roles` and `spec.databases`, decided: what the primary's manager runs to bring
//! the catalog to what the spec asks ([`plan`]), as statements (data), which the manager
//! renders to SQL and runs on its own task (`run::managed`).
//!
//! # Guarantees
//! - **Only the entries listed are touched**, and only what differs: an entry the
//!   catalog already has as asked plans no statement (but `CREATE EXTENSION IF NOT
//!   EXISTS` for each listed extension, every pass, so one dropped by hand comes back).
//! - **One entry's failure stops no other:** each entry is planned as its own scripts; a
//!   role's in one transaction (nothing of it lands if any statement fails).
//! - **Order:** roles to keep first, each after the listed roles it is to be a member
//!   of; then databases (so that their owners exist); then roles to drop (so that a
//!   database dropped in the same pass no longer holds its owner).
//! - **Contradictions are refused up front**, naming the field: a role to keep that is
//!   to be a member of a role the spec asks absent.
//! - A password is set when the role is created, and again only when its Secret's
//!   version differs from the one last applied.
//!
//! # Errors
//! None: what cannot be planned (a password Secret that cannot be read, a
//! contradiction) is an entry [`Planned::work`] `Err`, reported as refused.

#[cfg(test)]
mod model;

use std::collections::{BTreeMap, BTreeSet};

use crate::pod::managed::{DatabaseSpec, Ensure, Kind, RoleSpec, State};

/// A role's attributes, in the catalog's order: `rolsuper`, `rolinherit`,
/// `rolcreaterole`, `rolcreatedb`, `rolcanlogin`, `rolreplication`; and `rolconnlimit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attributes {
    /// The six flags.
    pub flags: [bool; 6],
    /// `rolconnlimit` (`-1`: no limit).
    pub connection_limit: i32,
}

impl Attributes {
    /// The attributes `role` asks for.
    #[must_use]
    pub fn of(role: &RoleSpec) -> Self {
        Attributes {
            flags: [
                role.superuser,
                role.inherit,
                role.createrole,
                role.createdb,
                role.login,
                role.replication,
            ],
            connection_limit: role.connection_limit,
        }
    }
}

/// A role as the catalog has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleRow {
    /// Its attributes.
    pub attributes: Attributes,
    /// The roles it is a member of.
    pub member_of: BTreeSet<String>,
}

/// The listed entries as the catalog has them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    /// Roles by name.
    pub roles: BTreeMap<String, RoleRow>,
    /// Databases by name, with their owner's name.
    pub databases: BTreeMap<String, String>,
}

/// A role's password as read from its Secret: the Secret's `resourceVersion` and the
/// password, or why it could not be read.
pub type Password = Result<(String, String), String>;

/// One statement, as data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Statement {
    /// `CREATE ROLE name WITH … [PASSWORD …]`.
    CreateRole {
        /// The role.
        name: String,
        /// Its attributes.
        attributes: Attributes,
        /// Its password, if one is set.
        password: Option<String>,
    },
    /// `ALTER ROLE name WITH …`.
    AlterRole {
        /// The role.
        name: String,
        /// Its attributes.
        attributes: Attributes,
    },
    /// `ALTER ROLE name WITH PASSWORD …`.
    SetPassword {
        /// The role.
        name: String,
        /// The password.
        password: String,
    },
    /// `GRANT role TO member`.
    Grant {
        /// The role granted.
        role: String,
        /// The role it is granted to.
        member: String,
    },
    /// `REVOKE role FROM member`.
    Revoke {
        /// The role revoked.
        role: String,
        /// The role it is revoked from.
        member: String,
    },
    /// `DROP ROLE name`.
    DropRole {
        /// The role.
        name: String,
    },
    /// `CREATE DATABASE name OWNER owner`.
    CreateDatabase {
        /// The database.
        name: String,
        /// Its owner.
        owner: String,
    },
    /// `ALTER DATABASE name OWNER TO owner`.
    SetOwner {
        /// The database.
        name: String,
        /// Its new owner.
        owner: String,
    },
    /// `DROP DATABASE name`.
    DropDatabase {
        /// The database.
        name: String,
    },
    /// `CREATE EXTENSION IF NOT EXISTS name` (run in the entry's database).
    CreateExtension {
        /// The extension.
        name: String,
    },
}

/// Statements run in one database, in one `psql` session that stops at the first
/// failure; in one transaction when `transaction`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// The database to connect to.
    pub database: String,
    /// Whether the statements run in one transaction.
    pub transaction: bool,
    /// The statements.
    pub statements: Vec<Statement>,
}

impl Script {
    fn on_postgres(transaction: bool, statements: Vec<Statement>) -> Option<Self> {
        (!statements.is_empty()).then(|| Script {
            database: "postgres".to_owned(),
            transaction,
            statements,
        })
    }
}

/// One entry's work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// Role or database.
    pub kind: Kind,
    /// Its name.
    pub name: String,
    /// The scripts to run, in order, stopping at the first that fails; `Err`: refused
    /// without running anything, and why.
    pub work: Result<Vec<Script>, String>,
    /// What the entry comes to once every script ran.
    pub then: State,
    /// The password Secret's version applied once every script ran (a role with one).
    pub password_version: Option<String>,
}

/// What to run to bring `catalog` to `roles` and `databases`, entry by entry, in the
/// order to run it. `passwords` holds each listed role's password as read from its
/// Secret, and `applied` the Secret version each role's password was last set from.
#[must_use]
pub fn plan(
    roles: &[RoleSpec],
    databases: &[DatabaseSpec],
    catalog: &Catalog,
    passwords: &BTreeMap<String, Password>,
    applied: &BTreeMap<String, String>,
) -> Vec<Planned> {
    let absent: BTreeSet<&str> = roles
        .iter()
        .filter(|r| r.ensure == Ensure::Absent)
        .map(|r| r.name.as_str())
        .collect();
    let keep = members_last(roles.iter().filter(|r| r.ensure == Ensure::Present));
    let mut out: Vec<Planned> = keep
        .into_iter()
        .map(|role| keep_role(role, catalog, &absent, passwords, applied))
        .collect();
    out.extend(databases.iter().map(|db| keep_database(db, catalog)));
    out.extend(
        roles
            .iter()
            .filter(|r| r.ensure == Ensure::Absent)
            .map(|r| drop_role(&r.name, catalog)),
    );
    out
}

/// `roles` ordered so that each comes after the listed roles it is to be a member of
/// (in the spec's order otherwise); roles in a cycle keep the spec's order (PostgreSQL
/// refuses the grant that would close it).
fn members_last<'a>(roles: impl Iterator<Item = &'a RoleSpec>) -> Vec<&'a RoleSpec> {
    let mut left: Vec<&RoleSpec> = roles.collect();
    let mut out = Vec::with_capacity(left.len());
    while !left.is_empty() {
        let ready = left.iter().position(|r| {
            r.in_roles
                .iter()
                .all(|g| g == &r.name || !left.iter().any(|o| &o.name == g))
        });
        out.push(left.remove(ready.unwrap_or(0)));
    }
    out
}

fn keep_role(
    role: &RoleSpec,
    catalog: &Catalog,
    absent: &BTreeSet<&str>,
    passwords: &BTreeMap<String, Password>,
    applied: &BTreeMap<String, String>,
) -> Planned {
    let planned = |work, password_version| Planned {
        kind: Kind::Role,
        name: role.name.clone(),
        work,
        then: State::Present,
        password_version,
    };
    if let Some(g) = role.in_roles.iter().find(|g| absent.contains(g.as_str())) {
        let why = format!(
            "spec.roles[{}].inRoles names {g}, which spec.roles asks absent",
            role.name
        );
        return planned(Err(why), None);
    }
    let password = match role
        .password_secret
        .as_ref()
        .map(|_| passwords.get(&role.name))
    {
        None => None,
        Some(Some(Ok(read))) => Some(read),
        Some(Some(Err(why))) => return planned(Err(why.clone()), None),
        Some(None) => return planned(Err("its password was not read".to_owned()), None),
    };
    let row = catalog.roles.get(&role.name);
    let fresh = password
        .filter(|(version, _)| row.is_none() || applied.get(&role.name) != Some(version))
        .map(|(_, p)| p.clone());
    let statements = role_statements(role, row, fresh);
    let script = Script::on_postgres(true, statements);
    planned(
        Ok(script.into_iter().collect()),
        password.map(|(v, _)| v.clone()),
    )
}

/// The statements that bring a role to be kept from `row` (`None`: it does not exist)
/// to `role`, with `password` if one is to be set; none when nothing differs.
#[must_use]
pub fn role_statements(
    role: &RoleSpec,
    row: Option<&RoleRow>,
    password: Option<String>,
) -> Vec<Statement> {
    let name = role.name.clone();
    let attributes = Attributes::of(role);
    let mut out = Vec::new();
    let member_of = match row {
        None => {
            out.push(Statement::CreateRole {
                name: name.clone(),
                attributes,
                password,
            });
            BTreeSet::new()
        }
        Some(row) => {
            if row.attributes != attributes {
                out.push(Statement::AlterRole {
                    name: name.clone(),
                    attributes,
                });
            }
            if let Some(password) = password {
                out.push(Statement::SetPassword {
                    name: name.clone(),
                    password,
                });
            }
            row.member_of.clone()
        }
    };
    let wanted: BTreeSet<&String> = role.in_roles.iter().collect();
    for granted in wanted.iter().filter(|g| !member_of.contains(**g)) {
        out.push(Statement::Grant {
            role: (*granted).clone(),
            member: name.clone(),
        });
    }
    for extra in member_of.iter().filter(|m| !wanted.contains(m)) {
        out.push(Statement::Revoke {
            role: extra.clone(),
            member: name.clone(),
        });
    }
    out
}

fn keep_database(db: &DatabaseSpec, catalog: &Catalog) -> Planned {
    let name = db.name.clone();
    let owner = catalog.databases.get(&db.name);
    let on_postgres = |statement| Script::on_postgres(false, vec![statement]);
    let (first, then) = match (db.ensure, owner) {
        (Ensure::Absent, None) => (None, State::Absent),
        (Ensure::Absent, Some(_)) => (on_postgres(Statement::DropDatabase { name }), State::Absent),
        (Ensure::Present, None) => (
            on_postgres(Statement::CreateDatabase {
                name,
                owner: db.owner.clone(),
            }),
            State::Present,
        ),
        (Ensure::Present, Some(owner)) if *owner != db.owner => (
            on_postgres(Statement::SetOwner {
                name,
                owner: db.owner.clone(),
            }),
            State::Present,
        ),
        (Ensure::Present, Some(_)) => (None, State::Present),
    };
    let extensions = (then == State::Present && !db.extensions.is_empty()).then(|| Script {
        database: db.name.clone(),
        transaction: false,
        statements: db
            .extensions
            .iter()
            .map(|e| Statement::CreateExtension { name: e.clone() })
            .collect(),
    });
    Planned {
        kind: Kind::Database,
        name: db.name.clone(),
        work: Ok(first.into_iter().chain(extensions).collect()),
        then,
        password_version: None,
    }
}

fn drop_role(name: &str, catalog: &Catalog) -> Planned {
    let drop = catalog.roles.contains_key(name).then(|| Script {
        database: "postgres".to_owned(),
        transaction: false,
        statements: vec![Statement::DropRole {
            name: name.to_owned(),
        }],
    });
    Planned {
        kind: Kind::Role,
        name: name.to_owned(),
        work: Ok(drop.into_iter().collect()),
        then: State::Absent,
        password_version: None,
    }
}
