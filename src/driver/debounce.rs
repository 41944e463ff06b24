//! The per-object debounce of owned-object triggers.
//!
//! A created cluster's owned objects change in bursts: the StatefulSet controller makes
//! three claims and three pods within moments and updates its status, the pods are
//! reported ready a few hundred milliseconds later. Each change the cache keeps
//! (see [`super::cache`]) asks for a reconcile of the owner; reconciled one by one, most
//! of them decide "stay". The debounce holds an owner's owned-object triggers until
//! they have been quiet for a window, and hands on one.
//!
//! Why not kube-runtime's `controller::Config::debounce`: it applies to every request
//! its scheduler sees, including the reconciler's own requeues. A transition asks to be
//! reconciled again at once (its follow-up step), so each step of an upgrade would wait
//! a window; and kube's debounce has no maximum wait. Here only owned-object triggers
//! are debounced; the custom resource's own changes, requeues, retries and resyncs pass
//! at once.
//!
//! # Guarantees
//! - A trigger is never dropped, only delayed: an owner offered at time `t` is handed on
//!   at the latest at `min(last offer + window, first offer + max_wait)`, where the
//!   offers are those since it was last handed on or cancelled.
//! - A trigger inside the window moves the hand-on to a window after it (up to the
//!   maximum wait), so a relevant change inside the window still causes a reconcile
//!   after it, and that reconcile reads the cache as it is then.
//! - `Debouncer::cancel` (called when a reconcile of the owner starts) forgets only
//!   offers made before it: their changes are already in the cache that reconcile reads
//!   (the cache is updated before a trigger is offered). Offers after it stay pending.
//! - A window of zero hands every trigger on at once, with no bookkeeping.
//!
//! # Assumptions
//! - The cache store is updated before the owner is offered (the owned-object watch
//!   applies each event to its store and only then yields the owners it concerns).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt};
use tokio::time::Instant;

use super::cache::Key;

/// When one owner's pending trigger is due.
#[derive(Debug, Clone, Copy)]
struct Held {
    first: Instant,
    due: Instant,
}

/// The owners with a trigger held, and when each is due. Pure bookkeeping on the times
/// it is given; [`Debouncer::debounced`] drives it with the clock.
#[derive(Debug)]
pub(crate) struct Pending {
    window: Duration,
    max_wait: Duration,
    held: HashMap<Key, Held>,
    queue: BTreeSet<(Instant, Key)>,
}

impl Pending {
    /// Nothing held; hand on after `window` of quiet, at most `max_wait` after the first
    /// trigger.
    pub(crate) fn new(window: Duration, max_wait: Duration) -> Self {
        Self {
            window,
            max_wait: max_wait.max(window),
            held: HashMap::new(),
            queue: BTreeSet::new(),
        }
    }

    /// A trigger of `key` arrived at `now`.
    pub(crate) fn offer(&mut self, key: Key, now: Instant) {
        let held = match self.held.get(&key) {
            Some(held) => {
                self.queue.remove(&(held.due, key.clone()));
                Held {
                    first: held.first,
                    due: (now + self.window).min(held.first + self.max_wait),
                }
            }
            None => Held {
                first: now,
                due: now + self.window,
            },
        };
        self.queue.insert((held.due, key.clone()));
        self.held.insert(key, held);
    }

    /// When the next held trigger is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.queue.first().map(|(due, _)| *due)
    }

    /// The owners due at `now`, in due order, no longer held.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<Key> {
        let mut due = Vec::new();
        while let Some((at, _)) = self.queue.first()
            && *at <= now
        {
            if let Some((_, key)) = self.queue.pop_first() {
                self.held.remove(&key);
                due.push(key);
            }
        }
        due
    }

    /// Forget what is held for `key` (a reconcile of it starts).
    pub(crate) fn cancel(&mut self, key: &Key) {
        if let Some(held) = self.held.remove(key) {
            self.queue.remove(&(held.due, key.clone()));
        }
    }

    /// How many owners have a trigger held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }
}

/// The debounce shared by the owned-object trigger stream (which offers) and the
/// reconciles (which cancel). Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Debouncer {
    pending: Option<Arc<Mutex<Pending>>>,
}

impl Debouncer {
    /// Hand on after `window` of quiet, at most `max_wait` after the first trigger; a
    /// zero `window` hands on at once.
    pub(crate) fn new(window: Duration, max_wait: Duration) -> Self {
        Self {
            pending: (!window.is_zero())
                .then(|| Arc::new(Mutex::new(Pending::new(window, max_wait)))),
        }
    }

    /// A reconcile of `key` starts: what is held for it is in the cache it reads.
    pub(crate) fn cancel(&self, key: &Key) {
        if let Some(pending) = &self.pending {
            lock(pending).cancel(key);
        }
    }

    /// `triggers`, debounced per owner.
    pub(crate) fn debounced(
        &self,
        triggers: impl Stream<Item = Key> + Send + 'static,
    ) -> BoxStream<'static, Key> {
        let Some(pending) = self.pending.clone() else {
            return triggers.boxed();
        };
        let input = triggers.boxed().fuse();
        stream::unfold(
            (input, pending, false),
            |(mut input, pending, mut ended)| async move {
                loop {
                    let next = lock(&pending).next_due();
                    if ended && next.is_none() {
                        return None;
                    }
                    tokio::select! {
                        offered = input.next(), if !ended => match offered {
                            Some(key) => lock(&pending).offer(key, Instant::now()),
                            None => ended = true,
                        },
                        () = sleep_until(next) => {
                            let due = lock(&pending).take_due(Instant::now());
                            if !due.is_empty() {
                                return Some((stream::iter(due), (input, pending, ended)));
                            }
                        }
                    }
                }
            },
        )
        .flatten()
        .boxed()
    }
}

/// Sleep until `at`, or for ever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn lock(pending: &Mutex<Pending>) -> std::sync::MutexGuard<'_, Pending> {
    // A poisoned map is still a valid map: every update leaves both halves consistent
    // before anything that could panic.
    pending.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        (Some("ns".into()), name.into())
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_burst_is_handed_on_once_a_window_after_its_last_trigger() {
        let t = Instant::now();
        let mut p = Pending::new(1000 * MS, 3000 * MS);
        p.offer(key("db"), t);
        p.offer(key("db"), t + 400 * MS);
        p.offer(key("db"), t + 900 * MS);
        assert!(p.take_due(t + 1899 * MS).is_empty());
        assert_eq!(p.take_due(t + 1900 * MS), [key("db")]);
        assert!(p.take_due(t + 10_000 * MS).is_empty());
    }

    #[test]
    fn a_change_inside_the_window_still_wakes_after_it() {
        let t = Instant::now();
        let mut p = Pending::new(1000 * MS, 3000 * MS);
        p.offer(key("db"), t);
        assert_eq!(p.next_due(), Some(t + 1000 * MS));
        p.offer(key("db"), t + 999 * MS);
        assert_eq!(p.next_due(), Some(t + 1999 * MS));
    }

    #[test]
    fn triggers_that_never_pause_are_handed_on_after_the_maximum_wait() {
        let t = Instant::now();
        let mut p = Pending::new(1000 * MS, 3000 * MS);
        for i in 0..50 {
            p.offer(key("db"), t + i * 100 * MS);
        }
        assert_eq!(p.next_due(), Some(t + 3000 * MS));
        assert_eq!(p.take_due(t + 3000 * MS), [key("db")]);
    }

    #[test]
    fn owners_are_debounced_apart() {
        let t = Instant::now();
        let mut p = Pending::new(1000 * MS, 3000 * MS);
        p.offer(key("a"), t);
        p.offer(key("b"), t + 500 * MS);
        assert_eq!(p.take_due(t + 1000 * MS), [key("a")]);
        assert_eq!(p.take_due(t + 1500 * MS), [key("b")]);
    }

    #[test]
    fn a_reconcile_that_starts_forgets_what_it_will_read() {
        let t = Instant::now();
        let mut p = Pending::new(1000 * MS, 3000 * MS);
        p.offer(key("db"), t);
        p.cancel(&key("db"));
        assert_eq!(p.len(), 0);
        assert!(p.take_due(t + 5000 * MS).is_empty());
        p.offer(key("db"), t + 100 * MS);
        assert_eq!(p.take_due(t + 1100 * MS), [key("db")]);
    }

    #[tokio::test]
    async fn the_stream_hands_a_burst_on_once_and_a_later_change_again() {
        let window = 50 * MS;
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let mut out = Debouncer::new(window, 20 * window).debounced(rx);
        let start = Instant::now();
        for _ in 0..3 {
            tx.unbounded_send(key("db")).expect("open");
        }
        assert_eq!(out.next().await, Some(key("db")));
        assert!(start.elapsed() >= window);
        let nothing_more = tokio::time::timeout(4 * window, out.next()).await;
        assert!(nothing_more.is_err(), "one hand-on per burst");
        let again = Instant::now();
        tx.unbounded_send(key("db")).expect("open");
        assert_eq!(out.next().await, Some(key("db")));
        assert!(again.elapsed() >= window);
        drop(tx);
        assert_eq!(out.next().await, None);
    }

    #[tokio::test]
    async fn without_a_window_every_trigger_passes_at_once() {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let mut out = Debouncer::new(Duration::ZERO, Duration::ZERO).debounced(rx);
        tx.unbounded_send(key("a")).expect("open");
        tx.unbounded_send(key("a")).expect("open");
        drop(tx);
        let all: Vec<Key> = out.by_ref().collect().await;
        assert_eq!(all, [key("a"), key("a")]);
    }
}
