//! The application user on real PostgreSQL: what a client holding only the Secret
//! `<name>-app` may do.

use super::*;

/// psql from the client pod with the URI whose base64 is `uri` (as the Secret holds it;
/// an argument, decoded in the pod) running `sql`.
fn psql_uri(real: &Real, uri: &str, sql: &str) -> (bool, String) {
    real.kubectl(&[
        "exec",
        "client",
        "--",
        "sh",
        "-c",
        "psql -X -A -t -q -v ON_ERROR_STOP=1 -d \"$(printf '%s' \"$1\" | base64 -d)\" -c \"$2\"",
        "--",
        uri,
        sql,
    ])
}

/// A client using only the `uri` of `<name>-app` connects through `<name>-rw` over TLS,
/// as the application role, in its database; the role is not a superuser, creates a
/// table and writes to it in its database, and may not create a role.
pub(super) fn the_application_secret_connects_as_a_role_that_is_not_a_superuser(
    real: &Real,
    name: &str,
) {
    let secret = format!("{name}-app");
    let (ok, uri) = real.kubectl(&["get", "secret", &secret, "-o", "jsonpath={.data.uri}"]);
    assert!(ok && !uri.trim().is_empty(), "{secret} has no uri: {uri}");
    let uri = uri.trim();
    let (ok, out) = psql_uri(
        real,
        uri,
        "SELECT s.ssl, r.rolsuper, current_user, current_database() \
         FROM pg_stat_ssl s, pg_roles r \
         WHERE s.pid = pg_backend_pid() AND r.rolname = current_user",
    );
    assert!(ok, "the application uri: {out}");
    assert_eq!(
        out.trim(),
        format!("t|f|{name}-app|app"),
        "over TLS, not a superuser, the application role in its database"
    );
    let (ok, out) = psql_uri(
        real,
        uri,
        "CREATE TABLE orders (id int PRIMARY KEY); INSERT INTO orders VALUES (1); \
         SELECT count(*) FROM orders",
    );
    assert!(
        ok && out.trim() == "1",
        "create and insert as the application: {out}"
    );
    let (ok, out) = psql_uri(real, uri, "CREATE ROLE intruder");
    assert!(
        !ok && out.contains("permission denied"),
        "the application role created a role: {out}"
    );
    eprintln!(
        "application user: {name}-app over TLS, not a superuser, creates and writes in app, may not create a role"
    );
}

/// `kubectl lockstep rotate-password`: a new password in every key of `<name>-app`,
/// printed nowhere; the plugin returns once the primary's role has it; the new `uri`
/// connects, the old one is refused.
pub(super) async fn a_rotated_password_reaches_the_role_and_the_old_uri_is_refused(
    real: &Real,
    name: &str,
) {
    let secret = format!("{name}-app");
    let read = |key: &str| {
        let (ok, value) = real.kubectl(&[
            "get",
            "secret",
            &secret,
            "-o",
            &format!("jsonpath={{.data.{key}}}"),
        ]);
        assert!(
            ok && !value.trim().is_empty(),
            "{secret} has no {key}: {value}"
        );
        value.trim().to_owned()
    };
    let old = read("uri");
    let (code, said) =
        crate::postgres::plugin(&["rotate-password", name, "-n", real.ns(), "--timeout", "150"])
            .await;
    assert_eq!(code, 0, "kubectl lockstep rotate-password {name}: {said}");
    let new = read("uri");
    assert_ne!(old, new, "the uri follows the new password");
    let password =
        String::from_utf8(super::api_token::base64url(&read("password"))).expect("a text password");
    assert!(!said.contains(&password), "the plugin printed the password");
    let (ok, out) = psql_uri(real, &new, "SELECT current_user");
    assert!(ok, "the new uri: {out}");
    assert_eq!(out.trim(), secret);
    let (ok, out) = psql_uri(real, &old, "SELECT 1");
    assert!(
        !ok && out.contains("password authentication failed"),
        "the old uri still connects: {out}"
    );
    eprintln!("application password rotated: the new uri connects, the old one is refused");
}

/// psql from the client pod as `user` with `password` (in the child's environment, not
/// argv) into `database` through `<name>-rw`, TLS required, running `sql`.
fn psql_as(
    real: &Real,
    name: &str,
    (user, password, database): (&str, &str, &str),
    sql: &str,
) -> (bool, String) {
    real.kubectl(&[
        "exec",
        "client",
        "--",
        "sh",
        "-c",
        "PGPASSWORD=\"$1\" psql -X -A -t -q -v ON_ERROR_STOP=1 \"host=$2 user=$3 dbname=$4 sslmode=require connect_timeout=5\" -c \"$5\"",
        "--",
        password,
        &format!("{name}-rw"),
        user,
        database,
        sql,
    ])
}

/// Polls `check` every second until it holds or `seconds` pass; what it last said. It
/// sleeps on the runtime, not the thread: the operator runs in this test's process.
async fn within(seconds: u64, what: &str, mut check: impl FnMut() -> (bool, String)) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(seconds);
    loop {
        let (done, said) = check();
        if done {
            return said;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} within {seconds} s: {said}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `spec.roles` and `spec.databases` on a running cluster: a role with a password from
/// its Secret logs in through `-rw` to a database it owns, with the extension asked;
/// an entry that cannot be applied (an owner that does not exist) is refused in
/// `status.databases` and makes the cluster `Degraded` naming it while the others are
/// applied; a changed password Secret is applied without a restart; a role asked
/// `absent` is dropped; removing the bad entry clears `Degraded`.
pub(super) async fn declared_roles_and_databases_are_kept_and_passwords_follow_their_secret(
    real: &Real,
    name: &str,
) {
    let restarts = |real: &Real| {
        real.kubectl(&[
            "get",
            "pods",
            "-l",
            &format!("app.kubernetes.io/instance={name}"),
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.metadata.uid}/{.status.containerStatuses[0].restartCount} {end}",
        ])
        .1
    };
    let before = restarts(real);
    let (ok, out) = real.kubectl(&[
        "create",
        "secret",
        "generic",
        "reporter-password",
        "--from-literal=password=first-Pa55",
    ]);
    assert!(ok, "{out}");
    let spec = |databases: &str| {
        format!(
            r#"{{"spec":{{"roles":[
                {{"name":"reporter","login":true,"inRoles":["pg_read_all_data"],"passwordSecret":"reporter-password"}},
                {{"name":"intruder","login":true}}
              ],"databases":[{databases}]}}}}"#
        )
    };
    let good = r#"{"name":"reports","owner":"reporter","extensions":["pgcrypto"]}"#;
    let bad = r#"{"name":"orphan","owner":"nobody"}"#;
    let (ok, out) = real.kubectl(&[
        "patch",
        "pgc",
        name,
        "--type",
        "merge",
        "-p",
        &spec(&format!("{good},{bad}")),
    ]);
    assert!(ok, "{out}");
    let degraded = "jsonpath={.status.conditions[?(@.type==\"Degraded\")].reason} {.status.conditions[?(@.type==\"Degraded\")].message}";
    // The entries reach the manager through the pods' annotations, which the kubelet
    // refreshes on its own schedule (a minute or more), as for spec.postgresql.
    let said = within(300, "Degraded naming spec.databases[orphan]", || {
        let (_, out) = real.kubectl(&["get", "pgc", name, "-o", degraded]);
        (
            out.starts_with("ObjectsRefused") && out.contains("spec.databases[orphan]"),
            out,
        )
    })
    .await;
    assert!(said.contains("\"nobody\" does not exist"), "{said}");
    let states = "jsonpath={range .status.roles[*]}{.name}={.state} {end}{range .status.databases[*]}{.name}={.state} {end}";
    let (_, out) = real.kubectl(&["get", "pgc", name, "-o", states]);
    assert_eq!(
        out.trim(),
        "reporter=present intruder=present reports=present orphan=refused"
    );
    let reporter = ("reporter", "first-Pa55", "reports");
    let (ok, out) = psql_as(
        real,
        name,
        reporter,
        "SELECT current_user, current_database(), (SELECT count(*) FROM pg_extension WHERE extname = 'pgcrypto'), pg_has_role('pg_read_all_data', 'MEMBER')",
    );
    assert!(ok, "reporter logs in: {out}");
    assert_eq!(out.trim(), "reporter|reports|1|t");

    // A new password, from the Secret alone: applied without a restart.
    let (ok, out) = real.kubectl(&[
        "patch",
        "secret",
        "reporter-password",
        "-p",
        r#"{"stringData":{"password":"second-Pa55"}}"#,
    ]);
    assert!(ok, "{out}");
    // Read again at the manager's next pass: within a minute, and a margin.
    within(200, "the new password accepted", || {
        psql_as(
            real,
            name,
            ("reporter", "second-Pa55", "reports"),
            "SELECT 1",
        )
    })
    .await;
    let (ok, out) = psql_as(real, name, reporter, "SELECT 1");
    assert!(!ok, "the old password still logs in: {out}");

    // `absent` drops a role; dropping the bad entry clears Degraded.
    let (ok, out) = real.kubectl(&[
        "patch",
        "pgc",
        name,
        "--type",
        "json",
        "-p",
        r#"[{"op":"replace","path":"/spec/roles/1/ensure","value":"absent"},{"op":"remove","path":"/spec/databases/1"}]"#,
    ]);
    assert!(ok, "{out}");
    within(300, "Degraded cleared and intruder absent", || {
        let (_, degraded) = real.kubectl(&["get", "pgc", name, "-o", degraded]);
        let (_, states) = real.kubectl(&["get", "pgc", name, "-o", states]);
        (
            degraded.starts_with("AsExpected")
                && states.trim() == "reporter=present intruder=absent reports=present",
            format!("{degraded}; {states}"),
        )
    })
    .await;
    let (ok, out) = real.psql_rw(
        name,
        "SELECT count(*) FROM pg_roles WHERE rolname = 'intruder'",
    );
    assert!(ok && out.trim() == "0", "intruder is still a role: {out}");
    assert_eq!(restarts(real), before, "a pod restarted or was replaced");
    eprintln!(
        "roles and databases: reporter logs in to reports (pgcrypto), orphan refused and named, the new password applied without a restart, intruder dropped"
    );
}
