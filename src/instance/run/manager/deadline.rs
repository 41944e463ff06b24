//! The round's deadline: while its server may write, nothing in a round may delay the
//! next renewal of the Lease past the point where the guard fences a healthy primary.
//!
//! The guard stops a writable server once no renewal was accepted for `T - G`
//! (`RenewalOverdue`). A renewal is decided after the round has queried its server and
//! read the Lease, so a slow query (each is bounded by its connect and statement
//! timeouts, several seconds) could otherwise push a merely slow primary past it.
//!
//! # Guarantees
//! - While the fence guards the server, every query of the manager's own ends by the
//!   [`renewal_deadline`] (it is killed at it, or not run once it passed: the round
//!   then sees the server as not answering, and still renews).
//! - The sleep between rounds ends by the same deadline, so the next round reads the
//!   Lease and renews in time however long the last one took.
//!
//! # Assumptions
//! - The Lease read and the decision after the last query take at most the Lease
//!   request's bound plus [`ROUND_MARGIN`].

use std::time::Duration;

use super::super::clock::Moment;
use super::super::sql::Psql;
use super::Manager;
use crate::instance::machine::LeaseTerms;

/// What a round needs between its last query and its decision, besides the Lease read.
pub const ROUND_MARGIN: Duration = Duration::from_millis(500);

/// The latest a round's query may end after a renewal that began at `last`: `T - G`
/// later, less the Lease read that follows it (`read`) and [`ROUND_MARGIN`].
#[must_use]
pub fn renewal_deadline(
    last: Moment,
    terms: &LeaseTerms,
    grace: Duration,
    read: Duration,
) -> Moment {
    let room = terms
        .fence
        .saturating_sub(grace)
        .saturating_sub(read)
        .saturating_sub(ROUND_MARGIN);
    last + room
}

impl Manager {
    /// This round's deadline: `None` while the fence does not guard a server (a standby,
    /// or no Lease), or before its first renewal.
    pub(super) fn deadline(&self) -> Option<Moment> {
        let terms = self.spec.lease.as_ref()?;
        let read = self.lease.as_ref()?.request_bound();
        let last = self.fence.last_renewal()?;
        self.fence
            .is_guarding()
            .then(|| renewal_deadline(last, terms, self.spec.immediate_grace, read))
    }

    /// `psql` on the local server, ending by this round's deadline.
    pub(super) fn local(&self) -> Psql {
        Psql {
            deadline: self.deadline(),
            ..self.prepare.local()
        }
    }

    /// How long to sleep before the next round: `wait`, or less to wake by the deadline
    /// (not less once it passed: a renewal that fails is not retried in a busy loop).
    pub(super) fn until_next_round(&self, wait: Duration) -> Duration {
        match self.deadline() {
            Some(d) if d > Moment::now() => wait.min(d.since(Moment::now())),
            _ => wait,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_of_a_guarded_server_leaves_room_to_read_the_lease_and_renew_before_t_less_g() {
        // The default L = 15 s: T = 7 s, G = 2 s, a Lease request bounded to 1 s.
        let terms = LeaseTerms::for_lease("pg-0/u", 15);
        let last = Moment::zero() + Duration::from_secs(100);
        let by = renewal_deadline(last, &terms, Duration::from_secs(2), Duration::from_secs(1));
        assert_eq!(by.since(last), Duration::from_millis(3500));
        // The shortest L the CRD allows still leaves a query some time.
        let tight = LeaseTerms::for_lease("pg-0/u", 12);
        let by = renewal_deadline(last, &tight, Duration::from_secs(2), Duration::from_secs(1));
        assert_eq!(by.since(last), Duration::from_millis(2500));
    }
}
