//! The cluster's certificates as the instances find them: the keys of the Secret the
//! operator issues (or a person brings) and where they are projected in each pod.

/// Where the instances find the projected keys.
pub const TLS_PATH: &str = "/etc/lockstep/tls";
/// The instance manager's setting naming [`TLS_PATH`].
pub const TLS_DIR_ENV: &str = "LOCKSTEP_TLS_DIR";
/// The CA certificate's key in the Secret (and file name in [`TLS_PATH`]).
pub const CA_CERT: &str = "ca.crt";
/// The CA's private key: in the Secret only.
pub const CA_KEY: &str = "ca.key";
/// The server certificate.
pub const SERVER_CERT: &str = "tls.crt";
/// The server certificate's key.
pub const SERVER_KEY: &str = "tls.key";
/// The replication role's client certificate.
pub const REPLICATION_CERT: &str = "replication.crt";
/// The replication role's client key.
pub const REPLICATION_KEY: &str = "replication.key";
/// The keys projected into the instances: all but [`CA_KEY`].
pub const MOUNTED: [&str; 5] = [
    CA_CERT,
    SERVER_CERT,
    SERVER_KEY,
    REPLICATION_CERT,
    REPLICATION_KEY,
];
