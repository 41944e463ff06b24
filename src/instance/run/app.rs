//! The application role and its database, as SQL the bootstrap runs through `psql`'s
//! stdin (passwords are never in argv): the role `APP_USER` with `APP_PASSWORD`, LOGIN and
//! nothing else, owning `APP_DATABASE` (`render::app` names them; `docs/security.md`).
//!
//! # Guarantees
//! - **A new cluster** ([`bootstrap_sql`]): the role is created with its password
//!   (hashed with SCRAM: `password_encryption = scram-sha-256`) and owns its database. On
//!   PostgreSQL 15 and later the `public` schema of a new database belongs to
//!   `pg_database_owner`, so the owner may create in it, and nobody else may.
//! - **After a restore** ([`restore_sql`]): the role exists, with the attributes above
//!   and this cluster's password, and owns its database, which is created if the backup
//!   had none; objects inside it keep the owner they had in the backup.
//! - Without a password (a cluster created before its operator generated `<name>-app`)
//!   neither creates a role: such a cluster's pods start without it.
//! - Identifiers and literals are quoted (`<name>-app` has a hyphen).

use super::args::InstanceArgs;
use super::quote::{sql_ident, sql_literal};

/// The application role, its password and its database, when all three are set.
struct App<'a> {
    user: &'a str,
    password: &'a str,
    database: &'a str,
}

fn app<'a>(a: &'a InstanceArgs) -> Option<App<'a>> {
    let set = |v: &'a Option<String>| v.as_deref().filter(|v| !v.is_empty());
    Some(App {
        user: set(&a.app_user)?,
        password: set(&a.app_password)?,
        database: set(&a.app_database)?,
    })
}

/// The role's attributes and password: LOGIN and nothing else.
fn attributes(app: &App<'_>) -> String {
    format!(
        "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD {}",
        sql_literal(app.password)
    )
}

/// The database owned by the role: `postgres` (which always exists) is given to it,
/// any other is created for it.
fn owned_database(app: &App<'_>, if_absent: bool) -> String {
    let (db, role) = (sql_ident(app.database), sql_ident(app.user));
    if app.database == "postgres" {
        return format!("ALTER DATABASE {db} OWNER TO {role};\n");
    }
    if !if_absent {
        return format!("CREATE DATABASE {db} OWNER {role};\n");
    }
    format!(
        "SELECT format('CREATE DATABASE %I OWNER %I', {d}, {r}) WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = {d}) \\gexec\n\
         ALTER DATABASE {db} OWNER TO {role};\n",
        d = sql_literal(app.database),
        r = sql_literal(app.user),
    )
}

/// A new cluster's SQL after `initdb`: the application role and its database, then
/// `POSTGRES_DB` if it is another database (a manager given no application role).
#[must_use]
pub fn bootstrap_sql(a: &InstanceArgs) -> String {
    let mut sql = String::new();
    let app = app(a);
    if let Some(app) = &app {
        sql += &format!(
            "CREATE ROLE {} WITH {};\n",
            sql_ident(app.user),
            attributes(app)
        );
        sql += &owned_database(app, false);
    }
    let app_database = app.as_ref().map(|app| app.database);
    if let Some(db) = a
        .database
        .as_deref()
        .filter(|db| *db != "postgres" && Some(*db) != app_database)
    {
        sql += &format!("CREATE DATABASE {};\n", sql_ident(db));
    }
    sql
}

/// After a restore: the application role with this cluster's password (created if the
/// backup has none: a backup of another cluster, or of one older than the role), owning
/// its database.
#[must_use]
pub fn restore_sql(a: &InstanceArgs) -> String {
    let Some(app) = app(a) else {
        return String::new();
    };
    let user = sql_literal(app.user);
    format!(
        "SELECT format('CREATE ROLE %I', {user}) WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {user}) \\gexec\n\
         ALTER ROLE {} WITH {};\n{}",
        sql_ident(app.user),
        attributes(&app),
        owned_database(&app, true)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> InstanceArgs {
        let mut argv = vec![
            "lockstep",
            "--pgdata",
            "/tmp/x/pgdata",
            "--superuser-password",
            "s",
            "--replication-password",
            "r",
        ];
        argv.extend(extra);
        super::super::args::parsed(&argv[1..])
    }

    const APP: [&str; 6] = [
        "--app-user",
        "pg-app",
        "--app-password",
        "p'w",
        "--app-database",
        "app",
    ];

    #[test]
    fn a_new_cluster_creates_a_quoted_login_only_role_owning_its_database() {
        assert_eq!(
            bootstrap_sql(&args(&APP)),
            "CREATE ROLE \"pg-app\" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD 'p''w';\n\
             CREATE DATABASE \"app\" OWNER \"pg-app\";\n"
        );
    }

    #[test]
    fn spec_database_is_the_application_database_and_is_created_once() {
        let mut argv = APP.to_vec();
        argv[5] = "orders";
        argv.extend(["--database", "orders"]);
        let sql = bootstrap_sql(&args(&argv));
        assert_eq!(sql.matches("CREATE DATABASE").count(), 1, "{sql}");
        assert!(
            sql.contains("CREATE DATABASE \"orders\" OWNER \"pg-app\";"),
            "{sql}"
        );
    }

    #[test]
    fn the_postgres_database_is_given_to_the_role_not_created() {
        let mut argv = APP.to_vec();
        argv[5] = "postgres";
        let sql = bootstrap_sql(&args(&argv));
        assert!(
            sql.ends_with("ALTER DATABASE \"postgres\" OWNER TO \"pg-app\";\n"),
            "{sql}"
        );
        assert!(!sql.contains("CREATE DATABASE"), "{sql}");
    }

    #[test]
    fn without_the_password_no_role_is_created_and_postgres_db_is_as_before() {
        let argv = [
            "--app-user",
            "pg-app",
            "--app-database",
            "app",
            "--database",
            "orders",
        ];
        assert_eq!(bootstrap_sql(&args(&argv)), "CREATE DATABASE \"orders\";\n");
        assert_eq!(restore_sql(&args(&argv)), "");
        assert_eq!(bootstrap_sql(&args(&[])), "");
    }

    #[test]
    fn a_restore_creates_the_role_if_absent_and_sets_this_clusters_password() {
        let sql = restore_sql(&args(&APP));
        assert_eq!(
            sql,
            "SELECT format('CREATE ROLE %I', 'pg-app') WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pg-app') \\gexec\n\
             ALTER ROLE \"pg-app\" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD 'p''w';\n\
             SELECT format('CREATE DATABASE %I OWNER %I', 'app', 'pg-app') WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'app') \\gexec\n\
             ALTER DATABASE \"app\" OWNER TO \"pg-app\";\n"
        );
    }
}
