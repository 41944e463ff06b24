//! Transport security on real PostgreSQL: what a new cluster serves with the
//! certificates its operator issued (`<name>-tls`).

use super::*;

/// The cluster's CA (public) into the client pod at `/tmp/ca.crt`.
fn ca_into_client(real: &Real, name: &str) {
    let secret = format!("{name}-tls");
    let (ok, ca) = real.kubectl(&["get", "secret", &secret, "-o", "jsonpath={.data.ca\\.crt}"]);
    assert!(ok && !ca.trim().is_empty(), "{secret} has no ca.crt: {ca}");
    file_into_client(real, "/tmp/ca.crt", ca.trim(), true);
}

/// `text` (base64 when `encoded`) into the client pod at `path`.
fn file_into_client(real: &Real, path: &str, text: &str, encoded: bool) {
    let decode = if encoded { " | base64 -d" } else { "" };
    let (ok, out) = real.kubectl(&[
        "exec",
        "client",
        "--",
        "sh",
        "-c",
        &format!("printf '%s' \"$1\"{decode} > {path}"),
        "--",
        text,
    ]);
    assert!(ok, "{out}");
}

/// A CA of the test's own and a server certificate it signed for the cluster's names,
/// in the Secret `<name>-own-tls` (`tls.crt`, `tls.key`, `ca.crt`, as cert-manager
/// writes them), for `spec.certificates`. Returns the CA's certificate.
pub(super) fn own_server_certificate(real: &Real, name: &str) -> String {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("a CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "a person's own CA");
    let ca_pem = ca.self_signed(&ca_key).expect("the CA").pem();
    let issuer = Issuer::new(ca, ca_key);
    let ns = real.ns();
    let names = vec![
        format!("{name}-rw"),
        format!("{name}-rw.{ns}.svc"),
        format!("{name}-ro.{ns}.svc"),
        format!("*.{name}.{ns}.svc"),
    ];
    let key = KeyPair::generate().expect("a server key");
    let server = CertificateParams::new(names)
        .expect("server params")
        .signed_by(&key, &issuer)
        .expect("the server certificate");
    let secret = format!("{name}-own-tls");
    let (ok, out) = real.kubectl(&[
        "create",
        "secret",
        "generic",
        &secret,
        &format!("--from-literal=tls.crt={}", server.pem()),
        &format!("--from-literal=tls.key={}", key.serialize_pem()),
        &format!("--from-literal=ca.crt={ca_pem}"),
    ]);
    assert!(ok, "{out}");
    ca_pem
}

/// A cluster with `spec.certificates` serves the person's certificate: a client that
/// verifies with the person's CA connects through `-rw`, one that verifies with the
/// cluster's own CA does not, and every standby streams by its certificate, verifying the
/// primary with the person's CA.
pub(super) fn serves_its_own_certificate(
    real: &Real,
    name: &str,
    own_ca: &str,
    primary: &str,
    standbys: usize,
) {
    ca_into_client(real, name);
    file_into_client(real, "/tmp/own-ca.crt", own_ca, false);
    verified_with(real, name, "/tmp/own-ca.crt", "the person's CA");
    let (ok, out) = psql_rw_as(
        real,
        name,
        "sslmode=verify-full sslrootcert=/tmp/ca.crt",
        "SELECT 1",
    );
    assert!(
        !ok && out.contains("certificate verify failed"),
        "the cluster's own CA verified the person's certificate: {out}"
    );
    standbys_by_certificate(real, primary, standbys, "verifying the person's CA");
    eprintln!(
        "own certificate: verify-full with the person's CA through {name}-rw, not with the cluster's; {standbys} standbys stream from {primary}"
    );
}

/// A client through `<name>-rw` that verifies the server with the CA file `ca` in the
/// client pod connects, encrypted.
fn verified_with(real: &Real, name: &str, ca: &str, what: &str) {
    let (ok, out) = psql_rw_as(
        real,
        name,
        &format!("sslmode=verify-full sslrootcert={ca}"),
        "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
    );
    assert!(
        ok && out.trim() == "t",
        "verify-full with {ca} ({what}): {out}"
    );
}

/// Exactly `standbys` walsenders on `primary` are encrypted, their client certificate
/// naming the replication role.
fn standbys_by_certificate(real: &Real, primary: &str, standbys: usize, what: &str) {
    let (ok, out) = real.psql_on(
        primary,
        "SELECT count(*) FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid) \
         WHERE s.ssl AND s.client_dn LIKE '%CN=replicator'",
    );
    assert!(
        ok && out.trim() == standbys.to_string(),
        "standbys streaming by certificate on {primary} ({what}): {out} (want {standbys})"
    );
}

/// psql from the client pod through `<name>-rw` with `conninfo` (the password from its
/// environment).
fn psql_rw_as(real: &Real, name: &str, conninfo: &str, sql: &str) -> (bool, String) {
    let target =
        format!("host={name}-rw user=postgres dbname=postgres connect_timeout=5 {conninfo}");
    real.kubectl(&[
        "exec", "client", "--", "psql", "-X", "-A", "-t", "-q", "-d", &target, "-c", sql,
    ])
}

/// A new cluster serves TLS to remote clients and nothing else, and its standbys stream
/// over TLS, authenticated by the replication certificate:
/// - a client that verifies the server (`sslmode=verify-full`, the cluster's CA) through
///   `-rw` connects, encrypted;
/// - a plaintext client (`sslmode=disable`) is refused by `pg_hba.conf`;
/// - every standby's walsender on the primary is encrypted, and its client certificate
///   names the replication role.
pub(super) fn serves_tls_only_and_replicates_by_certificate(
    real: &Real,
    name: &str,
    primary: &str,
    standbys: usize,
) {
    ca_into_client(real, name);
    verified_with(real, name, "/tmp/ca.crt", "the cluster's CA");
    let (ok, out) = psql_rw_as(real, name, "sslmode=disable", "SELECT 1");
    assert!(
        !ok && out.contains("no encryption"),
        "a plaintext client was not refused by pg_hba.conf: {out}"
    );
    standbys_by_certificate(real, primary, standbys, "a new cluster");
    eprintln!(
        "TLS: verify-full through {name}-rw, plaintext refused, {standbys} standbys stream by certificate"
    );
}

/// The serial of the certificate `<name>-rw` serves, as a client sees it.
fn served_serial(real: &Real, name: &str) -> Option<String> {
    let (ok, out) = real.kubectl(&[
        "exec",
        "client",
        "--",
        "sh",
        "-c",
        &format!(
            "openssl s_client -starttls postgres -connect {name}-rw:5432 </dev/null 2>/dev/null | openssl x509 -noout -serial"
        ),
    ]);
    (ok && out.trim().starts_with("serial=")).then(|| out.trim().to_owned())
}

/// Each instance pod's UID and its server container's restart count.
fn incarnations(real: &Real, name: &str) -> String {
    let (ok, out) = real.kubectl(&[
        "get",
        "pods",
        "-l",
        &format!("app.kubernetes.io/instance={name},lockstep.dev/component=database"),
        "-o",
        "jsonpath={range .items[*]}{.metadata.uid}/{.status.containerStatuses[0].restartCount} {end}",
    ]);
    assert!(ok, "{out}");
    out
}

/// A renewal asked for by moving `lockstep.dev/renew-at` into the past: the operator
/// signs new leaves with the same CA, the kubelet refreshes the pods' files, and every
/// manager reloads its server, which then serves the new certificate without a restart;
/// verifying clients and the standbys (by their renewed certificate) carry on.
pub(super) async fn a_renewal_reaches_the_server_without_a_restart(
    real: &Real,
    name: &str,
    primary: &str,
    standbys: usize,
) {
    let before = served_serial(real, name).expect("openssl reads the served certificate");
    let pods = incarnations(real, name);
    let secret = format!("{name}-tls");
    let (ok, out) = real.kubectl(&[
        "annotate",
        "secret",
        &secret,
        "--overwrite",
        "lockstep.dev/renew-at=2000-01-01T00:00:00Z",
    ]);
    assert!(ok, "{out}");
    let started = std::time::Instant::now();
    let deadline = started + Duration::from_secs(240);
    let after = loop {
        match served_serial(real, name) {
            Some(serial) if serial != before => break serial,
            _ => {}
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name}-rw still serves {before} 240 s after the renewal was asked for"
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
    };
    let (ok, renew_at) = real.kubectl(&[
        "get",
        "secret",
        &secret,
        "-o",
        "jsonpath={.metadata.annotations.lockstep\\.dev/renew-at}",
    ]);
    assert!(
        ok && renew_at.trim() > "2026",
        "the next renewal: {renew_at}"
    );
    assert_eq!(incarnations(real, name), pods, "an instance restarted");
    verified_with(real, name, "/tmp/ca.crt", "the same CA after the renewal");
    standbys_by_certificate(real, primary, standbys, "after the renewal");
    eprintln!(
        "TLS renewal: {before} -> {after} served {:.0} s after it was asked for, no restart, next renewal {}",
        started.elapsed().as_secs_f64(),
        renew_at.trim()
    );
}
