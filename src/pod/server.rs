//! What a pod's server is, as its instance manager reports it: the pod condition
//! [`SERVER`], written on its own pod (as [`super::archiving`]'s) when it changes.
//!
//! | status | reason | message |
//! |---|---|---|
//! | `True` | [`reason::PRIMARY`] | `a primary on timeline <n>`, then `, holding Lease term <k>` while the Lease names it |
//! | `True` | [`reason::STANDBY`] | `a standby on timeline <n>` |
//!
//! The same report ends a switchover: the operator promotes nobody itself (the target's
//! manager promotes its own server once the Lease names it), and takes the target for
//! promoted once it reports a writable server holding the Lease's current term
//! (`spec.leaseTransitions`, which every hand-over raises). A report from an earlier
//! term, a pod that was primary once before, cannot pass for it.
//!
//! # Guarantees
//! - **Written when it changes**: at a start, a promotion, a demotion, a timeline
//!   switch and a hand-over of the Lease to it; never for positions or lag, which change
//!   with every commit. Those are on each instance's `/metrics` and in
//!   `kubectl lockstep status`, which read them when asked.
//! - **A term is reported only by a writable server whose manager read, that round, a
//!   Lease naming its pod with that term** (`instance::observe::report_of`).
//! - A server that stops answering leaves its last report: the entry's `ready` says
//!   whether the pod serves.
//! - The timeline never goes back while a manager runs (a standby whose WAL receiver
//!   stopped reads it from its last restartpoint, which may predate the switch). A
//!   primary's is its current WAL file's, exact from the moment it is promoted.
//!
//! # Assumptions
//! - The manager's report and [`ServerRole::parse`] share [`ON_TIMELINE`] and
//!   [`HOLDING_TERM`].

/// The pod condition's type.
pub const SERVER: &str = "lockstep.dev/Server";

/// What precedes the timeline in the condition's message.
pub const ON_TIMELINE: &str = " on timeline ";

/// What precedes a primary's Lease term in the condition's message.
pub const HOLDING_TERM: &str = ", holding Lease term ";

/// The condition's reasons.
pub mod reason {
    /// The server accepts writes.
    pub const PRIMARY: &str = "Primary";
    /// The server is in recovery.
    pub const STANDBY: &str = "Standby";
}

/// What a running server is, as its manager reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerRole {
    /// It accepts writes (else it is in recovery).
    pub primary: bool,
    /// Its timeline.
    pub timeline: u32,
    /// For a primary whose manager read a Lease naming its pod: that Lease's term
    /// (`spec.leaseTransitions`).
    pub term: Option<i32>,
}

impl ServerRole {
    /// The pod condition's status, reason and message.
    #[must_use]
    pub fn condition(self) -> (&'static str, &'static str, String) {
        let (why, what) = if self.primary {
            (reason::PRIMARY, "a primary")
        } else {
            (reason::STANDBY, "a standby")
        };
        let term = match self.term {
            Some(term) if self.primary => format!("{HOLDING_TERM}{term}"),
            _ => String::new(),
        };
        (
            "True",
            why,
            format!("{what}{ON_TIMELINE}{}{term}", self.timeline),
        )
    }

    /// What a pod reported with `reason` and `message`; `None` if it does not say it as
    /// [`ServerRole::condition`] does.
    #[must_use]
    pub fn parse(reason: &str, message: &str) -> Option<ServerRole> {
        let primary = match reason {
            reason::PRIMARY => true,
            reason::STANDBY => false,
            _ => return None,
        };
        let (_, rest) = message.rsplit_once(ON_TIMELINE)?;
        let (timeline, term) = match rest.split_once(HOLDING_TERM) {
            Some((timeline, term)) if primary => (timeline, Some(term.trim().parse().ok()?)),
            Some(_) => return None,
            None => (rest, None),
        };
        Some(ServerRole {
            primary,
            timeline: timeline.trim().parse().ok()?,
            term,
        })
    }

    /// Whether this is a writable server holding the Lease's term `term` or a later one.
    #[must_use]
    pub fn holds(self, term: i32) -> bool {
        self.primary && self.term.is_some_and(|t| t >= term)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_server_reports_is_read_back_as_written() {
        for role in [
            ServerRole {
                primary: true,
                timeline: 3,
                term: None,
            },
            ServerRole {
                primary: true,
                timeline: 3,
                term: Some(7),
            },
            ServerRole {
                primary: false,
                timeline: 12,
                term: None,
            },
        ] {
            let (status, why, message) = role.condition();
            assert_eq!(status, "True");
            assert_eq!(ServerRole::parse(why, &message), Some(role), "{message}");
        }
        assert_eq!(
            ServerRole {
                primary: true,
                timeline: 3,
                term: Some(2),
            }
            .condition()
            .2,
            "a primary on timeline 3, holding Lease term 2"
        );
        assert_eq!(ServerRole::parse("Other", "a primary on timeline 3"), None);
        assert_eq!(ServerRole::parse(reason::PRIMARY, "a primary"), None);
        assert_eq!(
            ServerRole::parse(
                reason::STANDBY,
                "a standby on timeline 3, holding Lease term 2"
            ),
            None,
            "a standby holds no term"
        );
    }

    #[test]
    fn only_a_primary_reporting_the_current_term_or_a_later_one_holds_it() {
        let primary = |term| ServerRole {
            primary: true,
            timeline: 2,
            term,
        };
        assert!(primary(Some(3)).holds(3));
        assert!(primary(Some(4)).holds(3));
        assert!(!primary(Some(2)).holds(3), "a report from an earlier term");
        assert!(!primary(None).holds(0), "a primary the Lease did not name");
        let standby = ServerRole {
            primary: false,
            ..primary(Some(3))
        };
        assert!(!standby.holds(3));
    }
}
