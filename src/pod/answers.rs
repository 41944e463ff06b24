//! A failover's survey, over the Lease: the operator asks, each standby's instance
//! manager answers on its own pod.
//!
//! Once the old primary is certainly fenced, the operator writes a token on the Lease
//! (the annotation [`SURVEY`]). Every manager reads the Lease each round; a standby's
//! answers each token it has not answered yet with the pod condition [`SURVEYED`]:
//!
//! | status | reason | message |
//! |---|---|---|
//! | `True` | [`ANSWERED`] | `survey <token>: timeline <n>, received <lsn>, replayed <lsn>` |
//!
//! The operator takes an answer only when it carries the token it asked with, so an
//! answer to an earlier failover's survey, or to an earlier attempt, never counts. No
//! Job, no connection to a database and no password take part.
//!
//! # Guarantees
//! - **One write per token and pod**: a manager answers a token once (a restarted one
//!   may answer it once more, with the same or later positions), so a survey costs each
//!   standby one `pods/status` patch.
//! - **Only a standby answers**: a writable server, or one that does not answer its
//!   manager, says nothing; the operator waits for it up to its bound, then skips it,
//!   naming it in the history.
//! - **Only a standby that left the old holder answers**: one whose WAL receiver still
//!   points at a holder whose tenure ran out (or at the `-rw` Service) moves to nobody
//!   first and answers a round later (`instance::may_answer`), so a deposed primary
//!   that thaws after the survey gets no acknowledgement from a member already counted.
//! - **The timeline is the WAL's, not the last restartpoint's**: the manager reads the
//!   timeline of the segment file that holds its furthest position
//!   (`WAL_TIMELINE_QUERY`), so a standby that streamed a timeline switch answers the
//!   new timeline even once its WAL receiver stopped, which is when a failover asks.
//!
//! # Assumptions
//! - The manager's answer and [`Answer::parse`] share [`Answer::condition`]'s wording.
//! - Tokens are unique per failover and attempt (`actions::survey_key`: the old
//!   primary's UID, the Lease's term, the attempt).

use super::lsn::Lsn;

/// The Lease annotation the operator writes to ask: the survey's token.
pub const SURVEY: &str = "lockstep.dev/survey";

/// The pod condition's type.
pub const SURVEYED: &str = "lockstep.dev/Surveyed";

/// The condition's reason.
pub const ANSWERED: &str = "Answered";

/// One standby's answer to a survey.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The token it answers.
    pub token: String,
    /// The timeline of its furthest WAL.
    pub timeline: u32,
    /// The WAL it received (its replay position if its receiver never ran).
    pub received: Lsn,
    /// The WAL it replayed.
    pub replayed: Lsn,
}

impl Answer {
    /// The pod condition's status, reason and message.
    #[must_use]
    pub fn condition(&self) -> (&'static str, &'static str, String) {
        (
            "True",
            ANSWERED,
            format!(
                "survey {}: timeline {}, received {}, replayed {}",
                self.token, self.timeline, self.received, self.replayed
            ),
        )
    }

    /// What a pod answered in `message` (as [`Answer::condition`] writes it); `None` if
    /// it does not say it so.
    #[must_use]
    pub fn parse(message: &str) -> Option<Answer> {
        let rest = message.strip_prefix("survey ")?;
        let (token, rest) = rest.split_once(": timeline ")?;
        let (timeline, rest) = rest.split_once(", received ")?;
        let (received, replayed) = rest.split_once(", replayed ")?;
        Some(Answer {
            token: token.to_owned(),
            timeline: timeline.trim().parse().ok()?,
            received: received.trim().parse().ok()?,
            replayed: replayed.trim().parse().ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_read_back_as_written() {
        let answer = Answer {
            token: "survey-ab12cd34-3-1".to_owned(),
            timeline: 2,
            received: Lsn(0x3_0000_0060),
            replayed: Lsn(0x3_0000_0028),
        };
        let (status, reason, message) = answer.condition();
        assert_eq!((status, reason), ("True", ANSWERED));
        assert_eq!(
            message,
            "survey survey-ab12cd34-3-1: timeline 2, received 3/60, replayed 3/28"
        );
        assert_eq!(Answer::parse(&message), Some(answer));
        assert_eq!(
            Answer::parse("survey x: timeline two, received 0/1, replayed 0/1"),
            None
        );
        assert_eq!(Answer::parse("a standby on timeline 2"), None);
    }
}
