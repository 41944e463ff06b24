//! The protocol between the PostgresCluster machine (the operator) and the instance
//! manager in each of its pods: what one side writes, through the API server, for the
//! other to read, and the vocabulary both share. Both sides import this module; the
//! wording of each report is defined here once, next to its parser.
//!
//! | what | written by | read by | where |
//! |---|---|---|---|
//! | the settings annotation ([`settings`]: `spec.postgresql`, `spec.synchronous` ([`synchronous`]), `spec.roles` and `spec.databases` ([`managed`])) | the operator | the manager (downward API) | pod annotation |
//! | what the server made of them ([`applied`], [`managed`], [`synchronous`]) | the manager | the operator | pod conditions |
//! | the role label ([`Role`]) | the operator | the manager (downward API) | pod label |
//! | the Lease's marks ([`lease`]) | the managers | the operator | Lease annotations |
//! | a failover's survey ([`answers`]) | the operator asks, a standby answers | both | Lease annotation, pod condition |
//! | what its server is ([`server`]) | the manager | the operator | pod condition |
//! | streaming ([`streaming`]) | a standby's manager | the operator | pod condition |
//! | an empty volume ([`volume`]) | the manager | the operator | pod condition |
//! | an in-place restore ([`restore`]) | the operator | the primary-to-be's manager (downward API) | pod annotation |
//! | a failed recovery ([`recovery`]) | the manager | the operator | pod condition |
//! | the newest WAL file archived ([`archived`]) | a primary's manager | the operator | pod condition |
//! | archiving ([`archiving`]) | a primary's manager | the operator | pod condition |
//! | a base backup's summary ([`backups`]) | the primary's manager | the operator | the Job's termination log |
//! | the certificates ([`tls`]) | the operator | the manager | a projected Secret |
//! | the fencing numbers ([`fencing`]) | the operator | the manager | the pod's environment |
//! | WAL positions ([`Lsn`]) | both | both | in the messages above |
//!
//! # Guarantees
//! - Every report a manager writes is parsed by the function beside the one that writes
//!   it, and each pair is tested to read back what it wrote.
//!
//! # Assumptions
//! - Only the operator writes the role label and the survey's token; only the managers
//!   write the pod conditions and the Lease's marks (besides a person's escape hatches,
//!   which the docs name).

pub mod answers;
pub mod app_password;
pub mod applied;
pub mod archived;
pub mod archiving;
pub mod backups;
pub mod downward;
pub mod fencing;
pub mod lease;
pub mod lsn;
pub mod managed;
pub mod recovery;
pub mod restore;
mod role;
pub mod server;
pub mod settings;
pub mod streaming;
pub mod synchronous;
pub mod tls;
pub mod volume;

pub use lsn::Lsn;
pub use role::Role;

#[cfg(test)]
mod layers;
