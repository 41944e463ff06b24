//! `spec.roles` and `spec.databases` on the writable server
//! ([`crate::pod::managed`]): the catalog read, what differs planned
//! ([`crate::instance::objects`], pure) and run as SQL, each entry on its own.
//!
//! # Guarantees
//! - **Never in the Lease's way:** the work runs on its own task ([`Objects::start`]);
//!   the manager's round hands it what is wanted and reads the last report without
//!   waiting.
//! - **Only on the writable server**, and only for the entries listed (and the
//!   application role's password, [`super::app_password`], first at each pass).
//! - **One entry's failure stops no other:** each runs as its own scripts, in the
//!   plan's order ([`crate::instance::objects`]'s guarantees); a refused entry is
//!   reported with PostgreSQL's reason.
//! - **Passwords never reach argv or the server's log:** a script goes through `psql`'s
//!   stdin ([`Psql::script`]) and turns statement logging off for its session first.
//! - A password Secret is read again every [`RESYNC`]; a changed one (another
//!   `resourceVersion`) is applied by `ALTER ROLE … PASSWORD`, without a restart.
//!
//! - Every pass runs `CREATE EXTENSION IF NOT EXISTS` for each listed extension, so one
//!   dropped by hand comes back within [`RESYNC`].
//!
//! # Errors
//! None escape: a catalog that cannot be read reports nothing this pass (the last
//! report stands) and is tried again after [`RETRY`].

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use tokio::sync::watch;

use super::quote::{sql_ident, sql_literal};
use super::sql::Psql;
use crate::instance::objects::{
    Attributes, Catalog, RoleRow, Script, Statement, plan, role_statements,
};
use crate::pod::managed::{
    DatabaseSpec, Ensure, Kind, ObjectsReport, Outcome, PASSWORD_KEY, RoleSpec, State, one_line,
};

/// How often the entries are compared again with no change asked (and the password
/// Secrets read again).
pub const RESYNC: Duration = Duration::from_secs(60);

/// How soon a pass that could not read the catalog is tried again.
pub const RETRY: Duration = Duration::from_secs(5);

/// What the manager's round asks for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Wanted {
    /// `spec.roles`.
    pub roles: Vec<RoleSpec>,
    /// `spec.databases`.
    pub databases: Vec<DatabaseSpec>,
    /// The digest of the settings annotation they came in.
    pub judged: String,
    /// Whether this server is writable (nothing is done otherwise).
    pub writable: bool,
    /// The application role, whose password follows the Secret of the same name
    /// ([`super::app_password`]), if the pod has one.
    pub app_role: Option<String>,
}

/// The task keeping the entries, as the round sees it.
#[derive(Debug)]
pub struct Objects {
    wanted: watch::Sender<Wanted>,
    report: watch::Receiver<Option<ObjectsReport>>,
    /// The version of the application role's Secret its password follows.
    app_password: watch::Receiver<Option<String>>,
}

impl Objects {
    /// Starts the task: `psql` reaches the local server as a superuser; `secrets` reads
    /// the password Secrets (none without API access: a role naming one is refused).
    #[must_use]
    pub fn start(psql: Psql, secrets: Option<Api<Secret>>) -> Self {
        let (wanted, wanted_rx) = watch::channel(Wanted::default());
        let (report_tx, report) = watch::channel(None);
        let (app_tx, app_password) = watch::channel(None);
        tokio::spawn(keep(psql, secrets, wanted_rx, (report_tx, app_tx)));
        Self {
            wanted,
            report,
            app_password,
        }
    }

    /// Hands the task what this round wants (it acts only when that changed, or at its
    /// next resync).
    pub fn want(&self, wanted: Wanted) {
        self.wanted.send_if_modified(|w| {
            let changed = *w != wanted;
            *w = wanted;
            changed
        });
    }

    /// The last report, while this server is writable and has entries.
    #[must_use]
    pub fn report(&self) -> Option<ObjectsReport> {
        self.report.borrow().clone()
    }

    /// The version of the application role's Secret its password follows, while this
    /// server is writable ([`super::app_password`]).
    #[must_use]
    pub fn app_password(&self) -> Option<String> {
        self.app_password.borrow().clone()
    }
}

async fn keep(
    psql: Psql,
    secrets: Option<Api<Secret>>,
    mut wanted: watch::Receiver<Wanted>,
    (report, app_password): (
        watch::Sender<Option<ObjectsReport>>,
        watch::Sender<Option<String>>,
    ),
) {
    let mut passwords = Passwords::default();
    loop {
        let now = wanted.borrow_and_update().clone();
        let follows = match (&now.app_role, now.writable) {
            (Some(role), true) => super::app_password::keep(&psql, secrets.as_ref(), role).await,
            _ => None,
        };
        app_password.send_if_modified(|v| {
            let changed = *v != follows;
            *v = follows;
            changed
        });
        let idle = !now.writable || (now.roles.is_empty() && now.databases.is_empty());
        let mut next = RESYNC;
        if idle {
            report.send_replace(None);
        } else if let Some(done) = pass(&psql, secrets.as_ref(), &now, &mut passwords).await {
            report.send_replace(Some(done));
        } else {
            // The catalog could not be read (a server starting, a promotion): soon again.
            next = RETRY;
        }
        tokio::select! {
            changed = wanted.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(next) => {}
        }
    }
}

/// The `resourceVersion` of each role's password Secret as last applied.
#[derive(Debug, Default)]
struct Passwords(BTreeMap<String, String>);

/// One pass over every entry ([`crate::instance::objects::plan`]); `None` if the
/// catalog could not be read.
async fn pass(
    psql: &Psql,
    secrets: Option<&Api<Secret>>,
    wanted: &Wanted,
    passwords: &mut Passwords,
) -> Option<ObjectsReport> {
    let catalog = Catalog {
        roles: read_roles(psql, &wanted.roles).await?,
        databases: read_databases(psql, &wanted.databases).await?,
    };
    let mut read = BTreeMap::new();
    for role in wanted.roles.iter().filter(|r| r.ensure == Ensure::Present) {
        if let Some(secret) = &role.password_secret {
            read.insert(role.name.clone(), read_password(secrets, secret).await);
        }
    }
    let planned = plan(
        &wanted.roles,
        &wanted.databases,
        &catalog,
        &read,
        &passwords.0,
    );
    let mut outcomes = BTreeMap::new();
    for entry in planned {
        let outcome = match entry.work {
            Err(why) => Err(why),
            Ok(scripts) => run_all(psql, &scripts).await.map(|()| entry.then),
        };
        match (&outcome, entry.then, entry.password_version) {
            (Ok(_), _, Some(version)) => {
                passwords.0.insert(entry.name.clone(), version);
            }
            (Ok(_), State::Absent, None) if entry.kind == Kind::Role => {
                passwords.0.remove(&entry.name);
            }
            _ => {}
        }
        outcomes.insert((entry.kind, entry.name), outcome);
    }
    let order = wanted
        .roles
        .iter()
        .map(|r| (Kind::Role, &r.name))
        .chain(wanted.databases.iter().map(|d| (Kind::Database, &d.name)));
    let outcomes = order
        .filter_map(|(kind, name)| {
            let outcome = outcomes.remove(&(kind, name.clone()))?;
            Some(match outcome {
                Ok(state) => Outcome {
                    kind,
                    name: name.clone(),
                    state,
                    message: String::new(),
                },
                Err(message) => {
                    tracing::warn!(%kind, %name, %message, "could not apply an entry of the spec");
                    Outcome {
                        kind,
                        name: name.clone(),
                        state: State::Refused,
                        message,
                    }
                }
            })
        })
        .collect();
    Some(ObjectsReport {
        outcomes,
        judged: wanted.judged.clone(),
    })
}

/// Runs `scripts` in order, stopping at the first that fails (PostgreSQL's reason).
async fn run_all(psql: &Psql, scripts: &[Script]) -> Result<(), String> {
    for script in scripts {
        run(psql, &script.database, &script_sql(script)).await?;
    }
    Ok(())
}

/// A script's SQL: its statements, one per line, in `BEGIN`/`COMMIT` when it is a
/// transaction.
#[must_use]
pub fn script_sql(script: &Script) -> String {
    let body: String = script.statements.iter().map(statement_sql).collect();
    if script.transaction {
        format!("BEGIN;\n{body}COMMIT;\n")
    } else {
        body
    }
}

/// One statement's SQL, with its line end.
#[must_use]
pub fn statement_sql(statement: &Statement) -> String {
    let password = |p: &str| format!(" PASSWORD {}", sql_literal(p));
    let sql = match statement {
        Statement::CreateRole {
            name,
            attributes: a,
            password: p,
        } => format!(
            "CREATE ROLE {} WITH {}{}",
            sql_ident(name),
            attributes(a),
            p.as_deref().map(password).unwrap_or_default()
        ),
        Statement::AlterRole {
            name,
            attributes: a,
        } => format!("ALTER ROLE {} WITH {}", sql_ident(name), attributes(a)),
        Statement::SetPassword { name, password: p } => {
            format!("ALTER ROLE {} WITH{}", sql_ident(name), password(p))
        }
        Statement::Grant { role, member } => {
            format!("GRANT {} TO {}", sql_ident(role), sql_ident(member))
        }
        Statement::Revoke { role, member } => {
            format!("REVOKE {} FROM {}", sql_ident(role), sql_ident(member))
        }
        Statement::DropRole { name } => format!("DROP ROLE {}", sql_ident(name)),
        Statement::CreateDatabase { name, owner } => format!(
            "CREATE DATABASE {} OWNER {}",
            sql_ident(name),
            sql_ident(owner)
        ),
        Statement::SetOwner { name, owner } => format!(
            "ALTER DATABASE {} OWNER TO {}",
            sql_ident(name),
            sql_ident(owner)
        ),
        Statement::DropDatabase { name } => format!("DROP DATABASE {}", sql_ident(name)),
        Statement::CreateExtension { name } => {
            format!("CREATE EXTENSION IF NOT EXISTS {}", sql_ident(name))
        }
    };
    format!("{sql};\n")
}

/// Runs `sql` in `database` with statement logging off; PostgreSQL's reason on one
/// line if it fails.
pub(super) async fn run(psql: &Psql, database: &str, sql: &str) -> Result<(), String> {
    let script =
        format!("SET log_statement = 'none';\nSET log_min_duration_statement = -1;\n{sql}");
    psql.script(database, &script)
        .await
        .map(drop)
        .map_err(|e| reason(&e.to_string()))
}

/// PostgreSQL's reason from `psql`'s error output, without `psql`'s location prefix.
fn reason(error: &str) -> String {
    let text = one_line(error);
    match text.find("ERROR:") {
        Some(at) => one_line(&text[at + "ERROR:".len()..]),
        None => text,
    }
}

/// The password in `secret` and the Secret's `resourceVersion`.
pub(super) async fn read_password(
    secrets: Option<&Api<Secret>>,
    secret: &str,
) -> Result<(String, String), String> {
    let api = secrets.ok_or("this instance has no API access to read password Secrets")?;
    let found = api
        .get(secret)
        .await
        .map_err(|e| format!("reading the password Secret {secret}: {e}"))?;
    let password = found
        .data
        .as_ref()
        .and_then(|d| d.get(PASSWORD_KEY))
        .and_then(|v| String::from_utf8(v.0.clone()).ok())
        .filter(|p| !p.is_empty())
        .ok_or_else(|| format!("the Secret {secret} has no key {PASSWORD_KEY}"))?;
    Ok((
        found.metadata.resource_version.unwrap_or_default(),
        password,
    ))
}

fn names<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let listed: Vec<String> = names.map(|n| sql_literal(n)).collect();
    if listed.is_empty() {
        return "NULL".to_owned();
    }
    listed.join(", ")
}

async fn read_roles(psql: &Psql, roles: &[RoleSpec]) -> Option<BTreeMap<String, RoleRow>> {
    if roles.is_empty() {
        return Some(BTreeMap::new());
    }
    let sql = format!(
        "SELECT r.rolname, r.rolsuper, r.rolinherit, r.rolcreaterole, r.rolcreatedb, r.rolcanlogin, r.rolreplication, r.rolconnlimit, \
         coalesce((SELECT string_agg(g.rolname, ',') FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid WHERE m.member = r.oid), '') \
         FROM pg_roles r WHERE r.rolname IN ({})",
        names(roles.iter().map(|r| &r.name))
    );
    let rows = catalog(psql, &sql).await?;
    Some(
        rows.into_iter()
            .filter_map(|row| {
                let [name, flags @ .., limit, member_of]: [String; 9] = row.try_into().ok()?;
                Some((
                    name,
                    RoleRow {
                        attributes: Attributes {
                            flags: flags.map(|f| f == "t"),
                            connection_limit: limit.parse().ok()?,
                        },
                        member_of: member_of
                            .split(',')
                            .filter(|m| !m.is_empty())
                            .map(str::to_owned)
                            .collect(),
                    },
                ))
            })
            .collect(),
    )
}

async fn read_databases(
    psql: &Psql,
    databases: &[DatabaseSpec],
) -> Option<BTreeMap<String, String>> {
    if databases.is_empty() {
        return Some(BTreeMap::new());
    }
    let sql = format!(
        "SELECT datname, pg_get_userbyid(datdba) FROM pg_database WHERE datname IN ({})",
        names(databases.iter().map(|d| &d.name))
    );
    let rows = catalog(psql, &sql).await?;
    Some(
        rows.into_iter()
            .filter_map(|row| {
                let [name, owner]: [String; 2] = row.try_into().ok()?;
                Some((name, owner))
            })
            .collect(),
    )
}

async fn catalog(psql: &Psql, sql: &str) -> Option<Vec<Vec<String>>> {
    match psql.query(sql).await {
        Ok(rows) => Some(rows),
        Err(e) => {
            tracing::warn!(error = %e, "reading the roles and databases failed; trying again later");
            None
        }
    }
}

/// The `WITH` clause for a role's attributes.
fn attributes(a: &Attributes) -> String {
    const NAMES: [&str; 6] = [
        "SUPERUSER",
        "INHERIT",
        "CREATEROLE",
        "CREATEDB",
        "LOGIN",
        "REPLICATION",
    ];
    let mut words: Vec<String> = NAMES
        .iter()
        .zip(a.flags)
        .map(|(name, on)| {
            if on {
                (*name).to_owned()
            } else {
                format!("NO{name}")
            }
        })
        .collect();
    words.push(format!("CONNECTION LIMIT {}", a.connection_limit));
    words.join(" ")
}

/// The SQL that brings a role to be kept from `row` (`None`: it does not exist) to
/// `role`, with `password` if one is to be set; empty when nothing differs.
#[must_use]
pub fn role_sql(role: &RoleSpec, row: Option<&RoleRow>, password: Option<&str>) -> String {
    role_statements(role, row, password.map(str::to_owned))
        .iter()
        .map(statement_sql)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(name: &str) -> RoleSpec {
        RoleSpec {
            in_roles: vec!["pg_read_all_data".into()],
            ..RoleSpec::login(name)
        }
    }

    fn row_of(role: &RoleSpec) -> RoleRow {
        RoleRow {
            attributes: Attributes::of(role),
            member_of: role.in_roles.iter().cloned().collect(),
        }
    }

    #[test]
    fn a_missing_role_is_created_with_its_attributes_password_and_memberships() {
        assert_eq!(
            role_sql(&role("report-er"), None, Some("p'w")),
            "CREATE ROLE \"report-er\" WITH NOSUPERUSER INHERIT NOCREATEROLE NOCREATEDB LOGIN NOREPLICATION CONNECTION LIMIT -1 PASSWORD 'p''w';\n\
             GRANT \"pg_read_all_data\" TO \"report-er\";\n"
        );
    }

    #[test]
    fn a_role_as_asked_needs_nothing() {
        let r = role("reporter");
        assert_eq!(role_sql(&r, Some(&row_of(&r)), None), "");
    }

    #[test]
    fn a_changed_attribute_a_new_password_and_memberships_are_altered_granted_and_revoked() {
        let before = role("reporter");
        let mut after = before.clone();
        after.createdb = true;
        after.connection_limit = 5;
        after.in_roles = vec!["pg_monitor".into()];
        assert_eq!(
            role_sql(&after, Some(&row_of(&before)), Some("new")),
            "ALTER ROLE \"reporter\" WITH NOSUPERUSER INHERIT NOCREATEROLE CREATEDB LOGIN NOREPLICATION CONNECTION LIMIT 5;\n\
             ALTER ROLE \"reporter\" WITH PASSWORD 'new';\n\
             GRANT \"pg_monitor\" TO \"reporter\";\n\
             REVOKE \"pg_read_all_data\" FROM \"reporter\";\n"
        );
    }

    #[test]
    fn the_reason_is_postgresqls_without_psqls_location() {
        assert_eq!(
            reason("psql exited with Some(3): psql:<stdin>:3: ERROR:  role \"bob\" does not exist"),
            "role \"bob\" does not exist"
        );
        assert_eq!(reason("no answer within 5s"), "no answer within 5s");
    }
}
