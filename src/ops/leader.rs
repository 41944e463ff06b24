//! Leader election through a `coordination.k8s.io/v1` Lease (kube-lease-manager).
//!
//! [`lead`] runs the controllers only while this process holds the lease:
//!
//! ```text
//!   standby ──acquire──► leading ──lost / renewal error──► (controllers aborted) standby
//!                           │
//!                        SIGTERM ──► controllers drain in-flight reconciles ──► release ──► exit
//! ```
//!
//! # Guarantees
//! - Standbys run no controller and hold no cache.
//! - On losing the lease, or on any error renewing it, the controllers are aborted at
//!   once (not drained): another process may already lead. Aborting mid-reconcile is
//!   safe because every action is idempotent and the status write is fenced on the
//!   resourceVersion read, so a deposed leader cannot persist a step twice.
//! - On shutdown the controllers finish their in-flight reconciles while the lease keeps
//!   being renewed, and only then is the lease released, so a standby takes over at once
//!   instead of waiting out the lease duration.
//!
//! # Assumptions
//! - Clocks of the nodes agree to within the grace period (kube-lease-manager's model).
//! - Identities are unique among the processes sharing a lease (`POD_NAME`, or
//!   `hostname-pid` out of a cluster).

use std::future::Future;
use std::pin::Pin;

use kube::Client;
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseManagerBuilder};
use tokio_util::sync::CancellationToken;

use super::Error;
use super::health::Status;
use super::metrics::Metrics;

/// Where and how the lease is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// The Lease's name.
    pub name: String,
    /// The Lease's namespace.
    pub namespace: String,
    /// This process's identity (the lease's `holderIdentity`).
    pub identity: String,
    /// How long a lease is valid after its last renewal, in seconds (≥ 2).
    pub duration_secs: u64,
}

impl LeaseConfig {
    /// The grace period: the holder renews this long before expiry (a third of the
    /// duration, at least a second and less than the duration).
    pub fn grace_secs(&self) -> u64 {
        (self.duration_secs / 3).clamp(1, self.duration_secs.saturating_sub(1).max(1))
    }
}

/// The work done while leading: given a token that asks it to drain and stop, it runs
/// until asked (or until it fails).
pub type Work = Box<
    dyn FnMut(CancellationToken) -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send>> + Send,
>;

/// How leading ended for one term.
enum Term {
    /// Shutdown was asked and the work drained.
    Drained(Result<(), Error>),
    /// The lease was lost (or could not be renewed); the work was aborted.
    Lost,
}

/// Run `work` whenever this process holds the lease, until `shutdown` is cancelled.
///
/// # Errors
/// - [`Error::Lease`] if the lease cannot be created or read at start;
/// - [`Error::InvalidLease`] if the duration is below 2 seconds;
/// - whatever the work returns when it fails on its own (the lease is released first).
pub async fn lead(
    client: Client,
    config: LeaseConfig,
    status: Status,
    metrics: Metrics,
    shutdown: CancellationToken,
    mut work: Work,
) -> Result<(), Error> {
    if config.duration_secs < 2 {
        return Err(Error::InvalidLease(format!(
            "lease duration must be at least 2s, got {}s",
            config.duration_secs
        )));
    }
    loop {
        let manager = build(&client, &config).await?;
        tracing::info!(
            lease = %format!("{}/{}", config.namespace, config.name),
            identity = %config.identity,
            "standing by for the lease"
        );
        // Acquire.
        let acquired = tokio::select! {
            biased;
            () = shutdown.cancelled() => {
                release(&manager).await;
                return Ok(());
            }
            acquired = manager.changed() => acquired,
        };
        match acquired {
            Ok(true) => {}
            Ok(false) => continue,
            Err(error) => {
                tracing::warn!(%error, "reading the lease failed; retrying");
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    () = tokio::time::sleep(std::time::Duration::from_secs(1)) => continue,
                }
            }
        }

        tracing::info!(identity = %config.identity, "acquired the lease: leading");
        status.set_leader(true);
        metrics.set_leader(true);
        let term = lead_one_term(&manager, &shutdown, &mut work).await;
        status.set_leader(false);
        status.set_synced(false);
        metrics.set_leader(false);
        metrics.forget_all();
        match term {
            Term::Drained(result) => {
                release(&manager).await;
                tracing::info!("released the lease");
                return result;
            }
            Term::Lost => {
                tracing::warn!("lost the lease: controllers stopped; standing by");
            }
        }
    }
}

async fn lead_one_term(
    manager: &LeaseManager,
    shutdown: &CancellationToken,
    work: &mut Work,
) -> Term {
    let drain = shutdown.child_token();
    let mut task = tokio::spawn(work(drain.clone()));
    // One renewal future at a time, kept across loop turns (it sleeps until the next
    // renewal and must not be restarted needlessly).
    let mut renew = Box::pin(manager.changed());
    loop {
        tokio::select! {
            renewed = &mut renew => match renewed {
                Ok(true) => renew = Box::pin(manager.changed()),
                Ok(false) => {
                    task.abort();
                    let _ = (&mut task).await;
                    return Term::Lost;
                }
                Err(error) => {
                    tracing::warn!(%error, "renewing the lease failed: stepping down");
                    task.abort();
                    let _ = (&mut task).await;
                    return Term::Lost;
                }
            },
            joined = &mut task => {
                let result = match joined {
                    Ok(result) => result,
                    Err(join) => Err(Error::Task(join.to_string())),
                };
                if result.is_ok() && !drain.is_cancelled() {
                    // Controllers ended without being asked: treat as a failure so the
                    // process exits (and restarts) rather than idling as a leader.
                    return Term::Drained(Err(Error::Task("controllers stopped unexpectedly".into())));
                }
                return Term::Drained(result);
            }
        }
    }
}

async fn build(client: &Client, config: &LeaseConfig) -> Result<LeaseManager, Error> {
    LeaseManagerBuilder::new(client.clone(), &config.name)
        .with_namespace(&config.namespace)
        .with_create_mode(LeaseCreateMode::AutoCreate)
        .with_identity(&config.identity)
        .with_field_manager(format!("lockstep-{}", config.identity))
        .with_duration(config.duration_secs)
        .with_grace(config.grace_secs())
        .build()
        .await
        .map_err(|source| Error::Lease {
            lease: format!("{}/{}", config.namespace, config.name),
            source,
        })
}

async fn release(manager: &LeaseManager) {
    if let Err(error) = manager.release().await {
        tracing::warn!(%error, "releasing the lease failed; it expires on its own");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grace_is_within_the_duration() {
        for duration_secs in 2..100 {
            let config = LeaseConfig {
                name: "l".into(),
                namespace: "n".into(),
                identity: "i".into(),
                duration_secs,
            };
            let grace = config.grace_secs();
            assert!(
                grace >= 1 && grace < duration_secs,
                "{duration_secs}: {grace}"
            );
        }
    }
}
