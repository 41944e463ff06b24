//! Telling this process's own writes to its custom resources from anyone else's, in
//! whichever order a write's response and its watch event arrive.
//!
//! A write's event may reach the watch before the write's response reaches the
//! reconcile that made it (the API server sends both at once). Its resourceVersion is
//! then not known yet, and the event would pass for someone else's: one idle reconcile
//! per status write, which was most of the custom resource's wakes at scale (`docs/decisions/0004-wakeups.md`).
//! So a reconcile announces each write before it is sent ([`OwnWrites::begin`]); an
//! event of that object arriving meanwhile, with nothing the machine reads in its
//! metadata changed, is held, not admitted; and when the response comes
//! ([`InFlight::finish`]) a held version that is not the write's own means someone else
//! wrote meanwhile, and the reconcile runs again.
//!
//! # Guarantees
//! - An event of a version this process wrote triggers nothing, whether it arrives
//!   before or after the write's response.
//! - An event held while a write was in flight is never dropped silently: if it was not
//!   the write's own, [`InFlight::finish`] says so and the caller reconciles again; if
//!   the write fails or its reconcile is dropped ([`InFlight`]'s `Drop`), the failed
//!   reconcile is retried by the error policy, which reads the store the held event
//!   already updated.
//! - Memory is bounded: at most [`OwnWrites::LIMIT`] versions are remembered, and an
//!   object's in-flight entry lives only while its write does.
//!
//! # Assumptions
//! - Writes to one object are made by its reconcile, and kube-runtime never runs two
//!   reconciles of one object at once, so a held event can only be this write's or
//!   someone else's.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::cache::Key;

/// The resourceVersions of the writes this process made to its custom resources, and
/// the writes still in flight, shared between the driver (which writes) and the
/// [`super::watch::ResourceTrigger`] (which asks).
#[derive(Debug, Default)]
pub(crate) struct OwnWrites(Mutex<Inner>);

#[derive(Debug, Default)]
struct Inner {
    /// Versions our writes returned whose events have not come yet.
    versions: HashSet<String>,
    /// Per object with a write of ours in flight: how many, and the versions of the
    /// events held back meanwhile.
    in_flight: HashMap<Key, Held>,
}

#[derive(Debug, Default)]
struct Held {
    writes: usize,
    versions: Vec<String>,
}

impl OwnWrites {
    /// The most versions remembered; past this the oldest are not told apart (a write
    /// whose event never came, for an object deleted meanwhile, must not leak).
    const LIMIT: usize = 4096;

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A poisoned set is still a valid set: every update is a single insert or remove.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Announce a write to `key`, before it is sent. Finish it with the version the
    /// response carries ([`InFlight::finish`]); dropping it unfinished counts as a failed
    /// write.
    pub(crate) fn begin(&self, key: Key) -> InFlight<'_> {
        self.lock().in_flight.entry(key.clone()).or_default().writes += 1;
        InFlight {
            writes: self,
            key: Some(key),
        }
    }

    /// Whether the event of version `rv` of `key` is ours: a version a write of ours
    /// returned (forgetting it), or one arriving while a write of ours to `key` is in
    /// flight (held until the write's response tells which it was).
    pub(crate) fn claims(&self, key: &Key, rv: &str) -> bool {
        let mut inner = self.lock();
        if inner.versions.remove(rv) {
            return true;
        }
        match inner.in_flight.get_mut(key) {
            Some(held) => {
                held.versions.push(rv.to_owned());
                true
            }
            None => false,
        }
    }

    /// The write to `key` returned `rv` (`None`: it failed); whether an event held
    /// meanwhile was someone else's, once no write to `key` is in flight any more.
    fn end(&self, key: &Key, rv: Option<String>) -> bool {
        let mut inner = self.lock();
        let Some(held) = inner.in_flight.get_mut(key) else {
            return false;
        };
        held.writes -= 1;
        let early = rv
            .as_ref()
            .and_then(|rv| held.versions.iter().position(|v| v == rv));
        if let Some(i) = early {
            held.versions.remove(i);
        }
        let last = held.writes == 0;
        let foreign = last && !held.versions.is_empty();
        if last {
            inner.in_flight.remove(key);
        }
        if early.is_none()
            && let Some(rv) = rv
        {
            if inner.versions.len() >= Self::LIMIT {
                inner.versions.clear();
            }
            inner.versions.insert(rv);
        }
        foreign
    }
}

/// A write to one custom resource in flight, from [`OwnWrites::begin`].
#[must_use = "finish the write with the version it returned"]
pub(crate) struct InFlight<'a> {
    writes: &'a OwnWrites,
    key: Option<Key>,
}

impl InFlight<'_> {
    /// The write returned version `rv`: whether someone else wrote the object while it
    /// was in flight (an event was held that is not this write's), so that the caller
    /// must reconcile again.
    pub(crate) fn finish(mut self, rv: Option<String>) -> bool {
        match self.key.take() {
            Some(key) => self.writes.end(&key, rv),
            None => false,
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            // The write failed (or its reconcile was dropped): whatever was held is in
            // the store, and the failed reconcile is retried.
            self.writes.end(&key, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        (Some("ns".into()), "db".into())
    }

    #[test]
    fn a_version_we_wrote_is_claimed_once() {
        let ours = OwnWrites::default();
        assert!(!ours.begin(key()).finish(Some("2".into())));
        assert!(ours.claims(&key(), "2"));
        assert!(!ours.claims(&key(), "2"));
    }

    #[test]
    fn our_event_arriving_before_the_response_is_claimed_and_nothing_reruns() {
        let ours = OwnWrites::default();
        let write = ours.begin(key());
        assert!(ours.claims(&key(), "2"));
        assert!(!write.finish(Some("2".into())));
        assert!(
            !ours.claims(&key(), "3"),
            "nothing is held once the write is done"
        );
    }

    #[test]
    fn someone_elses_event_held_during_our_write_makes_the_reconcile_run_again() {
        let ours = OwnWrites::default();
        let write = ours.begin(key());
        assert!(ours.claims(&key(), "2"));
        assert!(write.finish(Some("3".into())));
        assert!(ours.claims(&key(), "3"), "our own event still comes later");
    }

    #[test]
    fn a_failed_write_holds_nothing_afterwards() {
        let ours = OwnWrites::default();
        {
            let _write = ours.begin(key());
            assert!(ours.claims(&key(), "2"));
        }
        assert!(!ours.claims(&key(), "3"));
    }

    #[test]
    fn two_writes_in_one_reconcile_tell_their_events_from_someone_elses() {
        let ours = OwnWrites::default();
        let first = ours.begin(key());
        let second = ours.begin(key());
        assert!(ours.claims(&key(), "2"));
        assert!(!first.finish(Some("2".into())));
        assert!(ours.claims(&key(), "3"));
        assert!(!second.finish(Some("3".into())));
    }

    #[test]
    fn an_event_of_an_earlier_write_held_by_a_later_one_is_still_ours() {
        let ours = OwnWrites::default();
        let first = ours.begin(key());
        let second = ours.begin(key());
        assert!(!first.finish(Some("2".into())));
        assert!(ours.claims(&key(), "2"));
        assert!(!second.finish(Some("3".into())));
    }

    #[test]
    fn writes_to_other_objects_hold_nothing_of_this_one() {
        let ours = OwnWrites::default();
        let _write = ours.begin((Some("ns".into()), "other".into()));
        assert!(!ours.claims(&key(), "2"));
    }
}
