//! The authority to act: a reconcile makes a mutating request only while this process
//! may still be sure that no other process acts on the same objects.
//!
//! Leader election ([`crate::ops::leader`]) keeps an [`Authority`] up to date with the
//! instant until which the lease it holds is certainly still valid (its last observed
//! renewal plus the lease duration, less a margin for clock skew). The driver asks
//! [`Authority::check`] immediately before each mutating request (the finalizer
//! patches, every [`super::Op`], the status write), and the check fails unless the
//! lease stays valid for at least the authority's `margin` beyond *now*: long enough for
//! the request to land before another process could take over.
//!
//! ```text
//!   renewal seen ───────────────── valid_until ─── (lease expires for everyone else)
//!   │◄────────── may act ─────────►│◄ margin ►│
//! ```
//!
//! # Guarantees
//! - A process whose lease has not been seen renewed recently enough makes no mutating
//!   request, even in the moments before the election loop aborts its controllers.
//! - [`Authority::unconditional`] (the default, for processes that run without leader
//!   election) always allows.
//!
//! # Assumptions
//! - Clocks disagree by less than the margin the election subtracts from the lease's
//!   expiry (see [`crate::ops::leader`]).
//! - A request that starts with `margin` to spare lands before the lease expires; the
//!   fenced status write (resourceVersion precondition) still refuses a stale decision
//!   if it does not.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Whether, and until when, this process may act.
#[derive(Debug, Clone)]
pub struct Authority {
    inner: Option<Arc<Shared>>,
}

#[derive(Debug)]
struct Shared {
    margin: Duration,
    valid_until: Mutex<Option<Instant>>,
}

impl Default for Authority {
    fn default() -> Self {
        Self::unconditional()
    }
}

impl Authority {
    /// Always allows (no leader election).
    pub fn unconditional() -> Self {
        Self { inner: None }
    }

    /// Allows only while the validity last set ([`Authority::set_valid_until`]) lies more
    /// than `margin` ahead.
    /// Starts out refusing until the first validity is set.
    pub fn leased(margin: Duration) -> Self {
        Self {
            inner: Some(Arc::new(Shared {
                margin,
                valid_until: Mutex::new(None),
            })),
        }
    }

    /// Record that the lease is certainly valid until `until` (`None`: not held).
    pub fn set_valid_until(&self, until: Option<Instant>) {
        if let Some(shared) = &self.inner {
            *shared
                .valid_until
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = until;
        }
    }

    /// Whether a mutating request may start now.
    ///
    /// # Errors
    /// A message saying why not: the lease is not held, or is not certainly valid for
    /// another `margin`.
    pub fn check(&self) -> Result<(), String> {
        self.check_at(Instant::now())
    }

    fn check_at(&self, now: Instant) -> Result<(), String> {
        let Some(shared) = &self.inner else {
            return Ok(());
        };
        let until = *shared
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match until {
            None => Err("this process does not hold the lease".to_owned()),
            Some(until) if now + shared.margin < until => Ok(()),
            Some(until) => Err(format!(
                "the lease is certainly valid for only {}ms more (margin {}ms)",
                until.saturating_duration_since(now).as_millis(),
                shared.margin.as_millis()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_election_every_request_may_go() {
        assert_eq!(Authority::unconditional().check(), Ok(()));
    }

    #[test]
    fn a_lease_not_yet_held_allows_nothing() {
        let authority = Authority::leased(Duration::from_secs(1));
        assert!(authority.check().is_err());
    }

    #[test]
    fn a_lease_valid_beyond_the_margin_allows_acting() {
        let authority = Authority::leased(Duration::from_secs(1));
        let now = Instant::now();
        authority.set_valid_until(Some(now + Duration::from_secs(5)));
        assert_eq!(authority.check_at(now), Ok(()));
    }

    #[test]
    fn a_lease_about_to_lapse_allows_nothing() {
        let authority = Authority::leased(Duration::from_secs(1));
        let now = Instant::now();
        authority.set_valid_until(Some(now + Duration::from_millis(900)));
        let refused = authority.check_at(now).unwrap_err();
        assert!(refused.contains("margin 1000ms"), "{refused}");
    }

    #[test]
    fn a_lost_lease_allows_nothing_through_every_clone() {
        let authority = Authority::leased(Duration::from_secs(1));
        let driver_side = authority.clone();
        authority.set_valid_until(Some(Instant::now() + Duration::from_secs(60)));
        assert!(driver_side.check().is_ok());
        authority.set_valid_until(None);
        assert!(driver_side.check().is_err());
    }
}
