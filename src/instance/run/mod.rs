//! The instance manager's runtime: the I/O edge that runs the agent's pure `decide` as
//! PID 1 of a PostgreSQL container (`lockstep instance`).
//!
//! One concern per file:
//! - `clock`: `CLOCK_BOOTTIME`, the clock of every deadline;
//! - `process`: processes by pidfd, the kill of a postmaster and all it started, and
//!   the detection of a postmaster this manager did not start (one started by hand);
//! - `fence`: the fence thread, which kills the writable server when no renewal
//!   succeeded for `T`, whatever the rest of the manager is doing (a blocked loop cannot delay it);
//! - `postmaster`: `postgres` as a supervised child;
//! - `sql`: bounded queries to the local server;
//! - `lease`: the primary Lease through kube-rs;
//! - `manager`: the loop: observe, `decide`, act; and the liveness check;
//! - `config`: the settings (the container's environment);
//! - `init`: PID 1's duties: reap every orphan, forward signals to the manager;
//! - `signals`: the forwarded signals the manager ignores (`SIGHUP`, `SIGUSR1`,
//!   `SIGUSR2`), caught so that none ends it;
//! - `install`: the init container's copy of this binary into the pod;
//! - `prepare`: bootstrap, local promotion, clone, rewind, the managed configuration;
//! - `quote`: quoting values into SQL, conninfo and `postgresql.conf`;
//! - `report`: the settings' outcome, told to the operator on the pod (a condition);
//! - `settings`: the person's `spec.postgresql`, written and reloaded;
//! - `metrics`: what the last round saw, on `/metrics`;
//! - `archive`: continuous WAL archiving with pgBackRest (the stanza, the report);
//! - `basebackup`: base backups with pgBackRest, on the backup Job's request;
//! - `auth`: the endpoint token a write to the manager's endpoints must carry.
//!
//! The design, and how it compares with CloudNativePG's instance manager and Patroni's
//! watchdog: `docs/instance-manager.md`.

pub mod app;
pub mod app_password;
pub mod archive;
pub mod args;
pub mod auth;
pub mod basebackup;
pub mod clock;
pub mod fence;
pub mod init;
pub mod install;
pub mod lease;
pub mod managed;
pub mod manager;
pub mod metrics;
pub mod postmaster;
pub mod prepare;
pub mod process;
pub mod quote;
pub mod report;
pub mod repository;
pub mod settings;
pub mod signals;
pub mod sql;
pub mod tls;
