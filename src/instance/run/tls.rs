//! Transport security of one instance: whether it serves TLS, and how it reaches its
//! primary, from the certificates the operator projected into the pod
//! ([`crate::machines::postgres::render::tls`]).
//!
//! With the certificates ([`Transport::Tls`]):
//! - the server listens with `ssl = on`, its certificate and the cluster's CA (which
//!   verifies client certificates);
//! - `pg_hba.conf` accepts remote clients over TLS only (`hostssl`), and the
//!   replication role by its client certificate (`cert`), never by password;
//! - a standby streams, and a clone copies, with `sslmode=verify-full` against the
//!   cluster's CA, presenting the replication certificate.
//!
//! Without them ([`Transport::Plain`]: a cluster created before its operator issued
//! certificates), the manager keeps the plaintext rules with passwords and says so once.
//!
//! # Assumptions
//! - The files do not change while the server runs (the operator issues them once).

use std::path::{Path, PathBuf};

use super::quote;
use crate::pod::tls::{
    CA_CERT, MOUNTED, REPLICATION_CERT, REPLICATION_KEY, SERVER_CERT, SERVER_KEY,
};

/// How this instance's connections are secured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// TLS with the cluster's certificates.
    Tls {
        /// The operator's certificates (`<name>-tls`): the cluster's CA, which verifies
        /// client certificates, and the replication role's certificate.
        dir: PathBuf,
        /// Where the server's certificate, its key and the CA that signed it (`ca.crt`)
        /// are: [`Self::Tls::dir`], or a person's own (`spec.certificates`).
        server: PathBuf,
    },
    /// No (or incomplete) certificates: plaintext with passwords.
    Plain,
}

/// The files of a server certificate, wherever it comes from.
const SERVER_FILES: [&str; 3] = [SERVER_CERT, SERVER_KEY, CA_CERT];

fn holds(dir: &Path, files: &[&str]) -> bool {
    files.iter().all(|f| dir.join(f).is_file())
}

impl Transport {
    /// [`Transport::Tls`] if `dir` holds every projected file, else [`Transport::Plain`];
    /// the server's certificate from `own` if it holds one whole (`tls.crt`, `tls.key`,
    /// `ca.crt`).
    #[must_use]
    pub fn of(dir: Option<&Path>, own: Option<&Path>) -> Self {
        match dir {
            Some(dir) if holds(dir, &MOUNTED) => Transport::Tls {
                dir: dir.to_owned(),
                server: own
                    .filter(|own| holds(own, &SERVER_FILES))
                    .unwrap_or(dir)
                    .to_owned(),
            },
            _ => Transport::Plain,
        }
    }

    fn file(dir: &Path, name: &str) -> String {
        dir.join(name).display().to_string()
    }

    /// The server's TLS settings for `lockstep.conf` (none without certificates).
    #[must_use]
    pub fn conf_lines(&self) -> Vec<String> {
        let Transport::Tls { dir, server } = self else {
            return Vec::new();
        };
        vec![
            "ssl = on".to_owned(),
            format!(
                "ssl_cert_file = {}",
                quote::conf(&Self::file(server, SERVER_CERT))
            ),
            format!(
                "ssl_key_file = {}",
                quote::conf(&Self::file(server, SERVER_KEY))
            ),
            format!("ssl_ca_file = {}", quote::conf(&Self::file(dir, CA_CERT))),
            "ssl_min_protocol_version = 'TLSv1.2'".to_owned(),
        ]
    }

    /// How the replication role authenticates to the primary, as `primary_conninfo`
    /// keywords: the verified TLS files, or the password.
    #[must_use]
    pub fn replication_conninfo(&self, password: &str) -> String {
        match self {
            Transport::Tls { dir, server } => format!(
                "sslmode=verify-full sslrootcert={} sslcert={} sslkey={}",
                quote::conninfo(&Self::file(server, CA_CERT)),
                quote::conninfo(&Self::file(dir, REPLICATION_CERT)),
                quote::conninfo(&Self::file(dir, REPLICATION_KEY)),
            ),
            Transport::Plain => format!("password={}", quote::conninfo(password)),
        }
    }

    /// The same for a tool's environment (`pg_basebackup`).
    #[must_use]
    pub fn replication_env(&self, password: &str) -> Vec<(&'static str, String)> {
        match self {
            Transport::Tls { dir, server } => vec![
                ("PGSSLMODE", "verify-full".to_owned()),
                ("PGSSLROOTCERT", Self::file(server, CA_CERT)),
                ("PGSSLCERT", Self::file(dir, REPLICATION_CERT)),
                ("PGSSLKEY", Self::file(dir, REPLICATION_KEY)),
            ],
            Transport::Plain => vec![("PGPASSWORD", password.to_owned())],
        }
    }

    /// `pg_hba.conf`'s rule type for remote clients: `hostssl` refuses plaintext.
    #[must_use]
    pub fn remote(&self) -> &'static str {
        match self {
            Transport::Tls { .. } => "hostssl",
            Transport::Plain => "host   ",
        }
    }

    /// The rules that let the replication role stream: by certificate over TLS, by
    /// password otherwise. (`pg_hba.conf` takes the first rule that matches, so a
    /// replication connection of `replication_user` without a certificate is refused.)
    #[must_use]
    pub fn replication_rules(&self, replication_user: &str) -> String {
        let remote = self.remote();
        match self {
            Transport::Tls { .. } => format!(
                "{remote} replication  {}  all  cert\n{remote} replication  all  all  scram-sha-256\n",
                quote::hba(replication_user)
            ),
            Transport::Plain => format!("{remote} replication  all   all      scram-sha-256\n"),
        }
    }
}

/// A digest of the certificates' contents in `dir` and `own` (`None` without every file
/// of `dir`): it changes when the kubelet refreshes a projected Secret (a renewal, by
/// Lockstep or by cert-manager). Compared within one process only.
#[must_use]
pub fn digest(dir: Option<&Path>, own: Option<&Path>) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let dir = dir?;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for file in MOUNTED {
        std::fs::read(dir.join(file)).ok()?.hash(&mut hasher);
    }
    for file in SERVER_FILES {
        own.and_then(|own| std::fs::read(own.join(file)).ok())
            .hash(&mut hasher);
    }
    Some(hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls_dir(files: &[&str]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "lockstep-tls-{}-{}",
            std::process::id(),
            files.len()
        ));
        std::fs::create_dir_all(&dir).expect("dir");
        for f in files {
            std::fs::write(dir.join(f), "x").expect("file");
        }
        dir
    }

    #[test]
    fn an_instance_serves_tls_only_with_every_file() {
        let full = tls_dir(&MOUNTED);
        let tls = |server: &Path| Transport::Tls {
            dir: full.clone(),
            server: server.to_owned(),
        };
        assert_eq!(Transport::of(Some(&full), None), tls(&full));
        let partial = tls_dir(&MOUNTED[..2]);
        assert_eq!(Transport::of(Some(&partial), None), Transport::Plain);
        assert_eq!(Transport::of(None, None), Transport::Plain);
        // A person's server certificate, when it is whole; the cluster's otherwise.
        let own = tls_dir(&SERVER_FILES);
        assert_eq!(Transport::of(Some(&full), Some(&own)), tls(&own));
        assert_eq!(Transport::of(Some(&full), Some(&partial)), tls(&full));
    }

    #[test]
    fn the_digest_changes_with_a_renewed_file_and_is_none_without_every_file() {
        let dir = tls_dir(&MOUNTED);
        let before = digest(Some(&dir), None).expect("every file");
        std::fs::write(dir.join(MOUNTED[1]), "renewed").expect("write");
        assert_ne!(digest(Some(&dir), None), Some(before));
        assert_eq!(digest(Some(&tls_dir(&MOUNTED[..1])), None), None);
        assert_eq!(digest(None, None), None);
    }

    #[test]
    fn a_standby_over_tls_presents_its_certificate_and_no_password() {
        let t = Transport::Tls {
            dir: PathBuf::from("/etc/lockstep/tls"),
            server: PathBuf::from("/etc/lockstep/server-tls"),
        };
        let info = t.replication_conninfo("secret");
        // The server is verified with the CA that signed it; the standby presents the
        // cluster's replication certificate.
        assert!(
            info.starts_with("sslmode=verify-full sslrootcert='/etc/lockstep/server-tls/ca.crt'")
        );
        assert!(info.contains("sslcert='/etc/lockstep/tls/replication.crt'"));
        assert!(!info.contains("secret"), "{info}");
        assert!(
            t.replication_env("secret")
                .iter()
                .all(|(k, v)| *k != "PGPASSWORD" && v != "secret")
        );
        assert_eq!(Transport::Plain.replication_conninfo("pw"), "password='pw'");
    }

    #[test]
    fn the_replication_role_over_tls_is_authenticated_by_certificate_only() {
        let t = Transport::Tls {
            dir: PathBuf::from("/t"),
            server: PathBuf::from("/t"),
        };
        let rules = t.replication_rules("replicator");
        let first = rules.lines().next().expect("a rule");
        assert!(
            first.starts_with("hostssl replication") && first.ends_with("cert"),
            "{first}"
        );
        assert!(first.contains("replicator"), "{first}");
    }
}
