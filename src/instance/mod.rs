//! The instance manager of a PostgresCluster pod (`lockstep instance`, issue 21).
//!
//! - [`run`]: the runtime, the I/O edge: the fence thread, supervision of `postgres`,
//!   the Lease, bounded queries.

#[cfg(target_os = "linux")]
pub mod run;
