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
//! - On losing the lease, on any error renewing it, or when the lease has not been seen
//!   renewed in time to stay valid for another quarter of the grace period (a watchdog
//!   reads the Lease every quarter grace period), the controllers are aborted at once
//!   (not drained): another process may lead soon. A leader cut off from the API server
//!   thus stops before its lease can expire (given clocks that agree to within a quarter
//!   of the grace period). Aborting mid-reconcile is safe because every action is
//!   idempotent and the status write is fenced on the
//!   resourceVersion read, so a deposed leader cannot persist a step twice.
//! - Between those checks, the driver starts no mutating request unless the lease is
//!   certainly valid for another quarter grace period ([`Authority`]): the watchdog's
//!   deadline is handed to every reconcile, so a leader whose renewals stopped landing
//!   sends nothing even before its controllers are aborted.
//! - On shutdown the controllers finish their in-flight reconciles while the lease keeps
//!   being renewed, and only then is the lease released. Standbys re-read the Lease every
//!   grace period, so a released lease is taken over within one grace period instead of
//!   the lease duration.
//!
//! # Assumptions
//! - Clocks of the nodes agree to within the grace period (kube-lease-manager's model).
//! - Identities are unique among the processes sharing a lease (`POD_NAME`, or
//!   `hostname-pid` out of a cluster).

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseManagerBuilder};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Error;
use super::health::Status;
use super::metrics::Metrics;
use crate::driver::Authority;

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

    /// The margin for clock skew and for a request to land: a quarter of the grace
    /// period. The watchdog gives up this long before the lease could expire, and the
    /// driver starts no request that close to the watchdog's deadline.
    pub fn margin(&self) -> Duration {
        Duration::from_secs(self.grace_secs()) / 4
    }

    /// The [`Authority`] the controllers of this election act under: it allows a
    /// request only while the lease is certainly valid for another [`Self::margin`].
    pub fn authority(&self) -> Authority {
        Authority::leased(self.margin())
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
    Lost(String),
}

/// Run `work` whenever this process holds the lease, until `shutdown` is cancelled.
///
/// # Errors
/// - [`Error::InvalidLease`] if the duration is below 2 seconds;
/// - whatever the work returns when it fails on its own (the lease is released first).
///
/// Failures to reach the Lease are logged and retried; they never end the process.
pub async fn lead(
    client: Client,
    config: LeaseConfig,
    authority: Authority,
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
    let lease = format!("{}/{}", config.namespace, config.name);
    // A standby re-reads the Lease this often: kube-lease-manager alone would wait for
    // the expiry it last saw, so a lease released on shutdown is taken over promptly.
    let poll = Duration::from_secs(config.grace_secs());
    tracing::info!(%lease, identity = %config.identity, "standing by for the lease");
    loop {
        let manager = match build(&client, &config).await {
            Ok(manager) => manager,
            Err(error) => {
                tracing::warn!(error = %DisplayChain(&error), "cannot read the lease; retrying");
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    () = tokio::time::sleep(poll) => continue,
                }
            }
        };
        let acquired = tokio::select! {
            biased;
            () = shutdown.cancelled() => return Ok(()),
            acquired = manager.changed() => acquired,
            () = tokio::time::sleep(poll) => continue,
        };
        match acquired {
            Ok(true) => {}
            Ok(false) => continue,
            Err(error) => {
                tracing::warn!(%error, "reading the lease failed; retrying");
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    () = tokio::time::sleep(poll) => continue,
                }
            }
        }

        tracing::info!(%lease, identity = %config.identity, "acquired the lease: leading");
        status.set_leader(true);
        metrics.set_leader(true);
        let term =
            lead_one_term(&client, &config, &authority, &manager, &shutdown, &mut work).await;
        authority.set_valid_until(None);
        status.set_leader(false);
        status.set_synced(false);
        metrics.set_leader(false);
        metrics.forget_all();
        match term {
            Term::Drained(result) => {
                release(&manager).await;
                tracing::info!(%lease, "released the lease");
                return result;
            }
            Term::Lost(why) => {
                tracing::warn!(%lease, %why, "lost the lease: controllers stopped; standing by");
            }
        }
    }
}

async fn lead_one_term(
    client: &Client,
    config: &LeaseConfig,
    authority: &Authority,
    manager: &LeaseManager,
    shutdown: &CancellationToken,
    work: &mut Work,
) -> Term {
    let drain = shutdown.child_token();
    let mut task = tokio::spawn(work(drain.clone()));
    // One renewal future at a time, kept across loop turns (it sleeps until the next
    // renewal and must not be restarted needlessly).
    let mut renew = Box::pin(manager.changed());
    let mut watchdog = Box::pin(watchdog(client.clone(), config.clone(), authority.clone()));
    let lost = loop {
        tokio::select! {
            renewed = &mut renew => match renewed {
                Ok(true) => renew = Box::pin(manager.changed()),
                Ok(false) => break "another process holds the lease".to_owned(),
                Err(error) => break format!("renewing the lease failed: {error}"),
            },
            why = &mut watchdog => break why,
            joined = &mut task => {
                let result = match joined {
                    Ok(result) => result,
                    Err(join) => Err(Error::Task(join.to_string())),
                };
                if result.is_ok() && !drain.is_cancelled() {
                    // Controllers ended without being asked: treat as a failure so the
                    // process exits (and restarts) rather than idling as a leader.
                    return Term::Drained(Err(Error::Task(
                        "controllers stopped unexpectedly".into(),
                    )));
                }
                return Term::Drained(result);
            }
        }
    };
    // Stop at once: another process may lead already.
    authority.set_valid_until(None);
    task.abort();
    let _ = (&mut task).await;
    Term::Lost(lost)
}

/// Resolves (with the reason) when this process can no longer be sure it holds the
/// lease: the Lease names another holder, is gone, or has not been seen renewed in time
/// to stay valid for another quarter grace period (renewals failing or hanging).
///
/// kube-lease-manager reports a lost lease only at its next renewal attempt, and a
/// renewal request that hangs reports nothing; this check bounds how long a deposed or
/// cut-off leader keeps reconciling to the lease's own validity.
async fn watchdog(client: Client, config: LeaseConfig, authority: Authority) -> String {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let duration = Duration::from_secs(config.duration_secs);
    let grace = Duration::from_secs(config.grace_secs());
    // The holder renews `grace` before expiry; the renewal then has three quarters of
    // the grace period to land and be seen before this gives up on it.
    let margin = config.margin();
    let period = (grace / 4).clamp(Duration::from_millis(200), Duration::from_secs(2));
    // Just acquired: the lease was renewed a moment ago.
    let mut valid_until = Instant::now() + duration.saturating_sub(margin);
    loop {
        authority.set_valid_until(Some(valid_until));
        let now = Instant::now();
        if now >= valid_until {
            return "the lease was not seen renewed before it could expire".to_owned();
        }
        tokio::time::sleep_until((now + period).min(valid_until)).await;
        let left = valid_until.saturating_duration_since(Instant::now());
        let read = match tokio::time::timeout(left, api.get_opt(&config.name)).await {
            Ok(read) => read,
            Err(_) => continue,
        };
        match read {
            Ok(Some(lease)) => {
                let spec = lease.spec.unwrap_or_default();
                if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
                    return format!(
                        "the lease is held by {}",
                        spec.holder_identity.as_deref().unwrap_or("nobody")
                    );
                }
                let (Some(renewed), Some(seconds)) = (spec.renew_time, spec.lease_duration_seconds)
                else {
                    continue;
                };
                let expires = SystemTime::from(renewed.0)
                    + Duration::from_secs(u64::try_from(seconds).unwrap_or_default());
                let remaining = expires
                    .duration_since(SystemTime::now())
                    .unwrap_or_default()
                    .saturating_sub(margin);
                valid_until = Instant::now() + remaining;
            }
            Ok(None) => return "the lease was deleted".to_owned(),
            Err(error) => tracing::debug!(%error, "reading the lease failed"),
        }
    }
}

/// An error and its sources, on one line.
struct DisplayChain<'a>(&'a (dyn std::error::Error + 'static));

impl std::fmt::Display for DisplayChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
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
