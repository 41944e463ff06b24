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
