//! How a driver runs: scope, concurrency, backoff, hooks, shutdown and extra triggers.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};

use super::authority::Authority;
use super::hooks::{DriverHooks, NoHooks};

/// The field manager of every server-side apply and the reporting controller of events.
pub const FIELD_MANAGER: &str = "lockstep";

/// A future that ends the driver gracefully when it resolves.
pub(crate) type Shutdown = Pin<Box<dyn Future<Output = ()> + Send + Sync + 'static>>;

/// Per-object exponential backoff with jitter, used after a failed reconcile.
///
/// The `n`-th consecutive failure (counting from 0) of one object waits
/// `min(base · 2ⁿ, cap)`, scaled by a random factor in `[1 − jitter, 1 + jitter]`. A
/// successful reconcile resets the count. Lost status-write races
/// ([`super::Error::Conflict`]) use the shorter `conflict_base`/`conflict_cap` scale: the
/// object is re-read and re-decided promptly, but repeated races still spread out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The first delay after an error.
    pub base: Duration,
    /// The largest delay after an error.
    pub cap: Duration,
    /// The first delay after a lost status-write race.
    pub conflict_base: Duration,
    /// The largest delay after lost status-write races.
    pub conflict_cap: Duration,
    /// The jitter, as a fraction of the delay (0.2 = ±20 %).
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(300),
            conflict_base: Duration::from_millis(50),
            conflict_cap: Duration::from_secs(5),
            jitter: 0.2,
        }
    }
}

impl Backoff {
    /// The delay before retry number `attempt` (0 for the first failure), with `unit` a
    /// number in `[-1, 1]` that selects the jitter (the driver draws it at random).
    pub fn delay(&self, attempt: u32, conflict: bool, unit: f64) -> Duration {
        let (base, cap) = if conflict {
            (self.conflict_base, self.conflict_cap)
        } else {
            (self.base, self.cap)
        };
        let factor = 2u32.saturating_pow(attempt.min(31));
        let exponential = base.saturating_mul(factor).min(cap);
        let scale = 1.0 + self.jitter.clamp(0.0, 1.0) * unit.clamp(-1.0, 1.0);
        exponential.mul_f64(scale.max(0.0))
    }
}

/// How to run a driver. Build one with [`Config::cluster_wide`] or
/// [`Config::namespaced`] and the builder methods.
pub struct Config {
    pub(crate) namespace: Option<String>,
    pub(crate) concurrency: u16,
    pub(crate) backoff: Backoff,
    pub(crate) instance: Option<String>,
    pub(crate) hooks: Arc<dyn DriverHooks>,
    pub(crate) shutdown: Vec<Shutdown>,
    pub(crate) triggers: Vec<BoxStream<'static, ()>>,
    pub(crate) owned_store_timeout: Duration,
    pub(crate) authority: Authority,
    pub(crate) debounce: Duration,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("namespace", &self.namespace)
            .field("concurrency", &self.concurrency)
            .field("backoff", &self.backoff)
            .field("instance", &self.instance)
            .field("shutdown_futures", &self.shutdown.len())
            .field("extra_triggers", &self.triggers.len())
            .field("owned_store_timeout", &self.owned_store_timeout)
            .field("authority", &self.authority)
            .field("debounce", &self.debounce)
            .finish_non_exhaustive()
    }
}

impl Default for Config {
    fn default() -> Self {
        Self::cluster_wide()
    }
}

impl Config {
    /// The default [`Config::debounce`]: 1 s.
    ///
    /// A created cluster's owned objects change in bursts (the StatefulSet controller
    /// makes three claims and three pods within a second, KWOK or the kubelet reports
    /// them ready a few hundred milliseconds later), and each change used to wake the
    /// machine to decide "stay". One second folds most of a burst into one reconcile
    /// and delays a decision by at most that much after the last change
    /// (docs/wakeups.md has the measurements).
    pub const DEBOUNCE: Duration = Duration::from_secs(1);

    /// The longest an owned-object trigger is held, as a multiple of the debounce
    /// window: triggers that never pause for a window are handed on after 3 windows.
    pub const DEBOUNCE_MAX_WAIT_FACTOR: u32 = 3;

    /// Watch and reconcile objects in every namespace.
    pub fn cluster_wide() -> Self {
        Self {
            namespace: None,
            concurrency: 4,
            backoff: Backoff::default(),
            instance: None,
            hooks: Arc::new(NoHooks),
            shutdown: Vec::new(),
            triggers: Vec::new(),
            owned_store_timeout: Duration::from_secs(60),
            authority: Authority::unconditional(),
            debounce: Self::DEBOUNCE,
        }
    }

    /// Watch and reconcile objects in `namespace` only (the custom resources and
    /// everything they own).
    pub fn namespaced(namespace: impl Into<String>) -> Self {
        Self {
            namespace: Some(namespace.into()),
            ..Self::cluster_wide()
        }
    }

    /// How many objects may be reconciled at once (0: unbounded). One object is never
    /// reconciled twice at once whatever this says. Default 4.
    #[must_use]
    pub fn concurrency(mut self, concurrency: u16) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// The backoff after failed reconciles.
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The reporting instance named on events (default: the host name, or `lockstep`).
    #[must_use]
    pub fn instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = Some(instance.into());
        self
    }

    /// Observe the loop (metrics, tests).
    #[must_use]
    pub fn hooks(mut self, hooks: impl DriverHooks) -> Self {
        self.hooks = Arc::new(hooks);
        self
    }

    /// Stop gracefully when `signal` resolves: no new reconciles start, running ones
    /// finish, then the driver's future completes. Additive: the first to resolve wins.
    #[must_use]
    pub fn shutdown_on(mut self, signal: impl Future<Output = ()> + Send + Sync + 'static) -> Self {
        self.shutdown.push(Box::pin(signal));
        self
    }

    /// Reconcile every object whenever `trigger` yields (a resync, or a test forcing
    /// reconciles). Additive.
    #[must_use]
    pub fn reconcile_all_on(mut self, trigger: impl Stream<Item = ()> + Send + 'static) -> Self {
        self.triggers.push(trigger.boxed());
        self
    }

    /// Reconcile every object every `period` (a safety net for watch events lost while
    /// a watch was down).
    #[must_use]
    pub fn resync_every(self, period: Duration) -> Self {
        let start = tokio::time::Instant::now() + period;
        let ticks = futures::stream::unfold(
            tokio::time::interval_at(start, period),
            |mut ticker| async move {
                ticker.tick().await;
                Some(((), ticker))
            },
        );
        self.reconcile_all_on(ticks)
    }

    /// Make mutating requests only while `authority` allows (leader election hands its
    /// lease's validity here). Default: unconditional.
    #[must_use]
    pub fn authority(mut self, authority: Authority) -> Self {
        self.authority = authority;
        self
    }

    /// Hold an object's owned-object triggers until they have been quiet for
    /// `debounce` (at most [`Config::DEBOUNCE_MAX_WAIT_FACTOR`] times as long) before
    /// reconciling it; 0: reconcile at once. Default [`Config::DEBOUNCE`]. See
    /// [`super::debounce`] for why this is not kube-runtime's own debounce.
    ///
    /// # Guarantees
    /// - A trigger is never dropped, only delayed: a trigger inside the window moves
    ///   the reconcile to `debounce` after it, and that reconcile reads the cache as it
    ///   is then, so it sees every change made until it starts.
    /// - Only owned-object triggers wait: the custom resource's own changes, the
    ///   reconcile's requeues (a transition's follow-up step, a deadline), retries and
    ///   resyncs run at once.
    #[must_use]
    pub fn debounce(mut self, debounce: Duration) -> Self {
        self.debounce = debounce;
        self
    }

    /// How long a reconcile waits for the owned-object caches to finish their first
    /// list before failing (and retrying with backoff). Default 60 s.
    #[must_use]
    pub fn owned_store_timeout(mut self, timeout: Duration) -> Self {
        self.owned_store_timeout = timeout;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_one_second_up_to_five_minutes() {
        let b = Backoff::default();
        let delays: Vec<u64> = (0..12).map(|n| b.delay(n, false, 0.0).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(b.delay(u32::MAX, false, 0.0), Duration::from_secs(300));
    }

    #[test]
    fn jitter_stays_within_its_fraction() {
        let b = Backoff::default();
        assert_eq!(b.delay(0, false, -1.0), Duration::from_millis(800));
        assert_eq!(b.delay(0, false, 1.0), Duration::from_millis(1200));
        assert_eq!(b.delay(0, false, 7.0), Duration::from_millis(1200));
    }

    #[test]
    fn conflicts_retry_promptly() {
        let b = Backoff::default();
        assert_eq!(b.delay(0, true, 0.0), Duration::from_millis(50));
        assert_eq!(b.delay(20, true, 0.0), Duration::from_secs(5));
    }
}
