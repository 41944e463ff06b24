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
//! - **The timeline is the WAL's, not the last restartpoint's**: the manager reads the
//!   timeline of the segment file that holds its furthest position
//!   (`WAL_TIMELINE_QUERY`), so a standby that streamed a timeline switch answers the
//!   new timeline even once its WAL receiver stopped, which is when a failover asks.
//!
//! # Assumptions
//! - The manager's answer and [`Answer::parse`] share [`Answer::condition`]'s wording.
//! - Tokens are unique per failover and attempt (`actions::survey_key`: the old
//!   primary's UID, the Lease's term, the attempt).

use crate::instance::{Lsn, Observation, Server};

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

/// What the manager that saw `seen` answers to `token`: for a standby, its positions,
/// on the newest timeline it holds (`wal_timeline`, read from its WAL files, or its
/// positions' own); `None` for any other server, or a standby with no position yet.
#[must_use]
pub fn answer(seen: &Observation, token: &str, wal_timeline: Option<u32>) -> Option<Answer> {
    let Server::Standby(standby) = &seen.server else {
        return None;
    };
    let furthest = standby.furthest()?;
    let replayed = standby.replayed.map_or(furthest.lsn, |p| p.lsn);
    Some(Answer {
        token: token.to_owned(),
        timeline: furthest.timeline.max(wal_timeline.unwrap_or(0)),
        received: standby.received.map_or(replayed, |p| p.lsn),
        replayed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance::{DataDir, LeaseRead, Mono, Position, RoleLabel, Standby, Upstream};
    use crate::machines::postgres::actions::Role;

    fn standby(received: Option<(u32, u64)>, replayed: Option<(u32, u64)>) -> Server {
        let at = |(timeline, lsn)| Position {
            timeline,
            lsn: Lsn(lsn),
        };
        Server::Standby(Standby {
            received: received.map(at),
            replayed: replayed.map(at),
            streaming: false,
        })
    }

    fn seeing(server: Server) -> Observation {
        Observation {
            role: RoleLabel::Is(Role::Replica),
            data: DataDir::Standby { clean: false },
            server,
            lease: LeaseRead::Unreadable,
            now: Mono::at(std::time::Duration::from_secs(100)),
            renewed: None,
            stray: None,
            finished: None,
            upstream_writable: false,
            not_streaming_since: None,
            streamed: false,
            cloned: false,
            upstream: Upstream::Service,
        }
    }

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

    #[test]
    fn a_standby_answers_its_positions_on_the_newest_timeline_its_wal_holds() {
        let seen = seeing(standby(Some((1, 0x60)), Some((1, 0x28))));
        let said = answer(&seen, "t", Some(2)).expect("a standby answers");
        assert_eq!(
            (said.timeline, said.received, said.replayed),
            (2, Lsn(0x60), Lsn(0x28)),
            "its WAL files' timeline is newer than its last restartpoint's"
        );
        let never_streamed = seeing(standby(None, Some((1, 0x28))));
        let said = answer(&never_streamed, "t", None).expect("a standby answers");
        assert_eq!((said.timeline, said.received), (1, Lsn(0x28)));
    }

    #[test]
    fn only_a_standby_with_a_position_answers() {
        let primary = seeing(Server::Writable {
            position: Position {
                timeline: 2,
                lsn: Lsn(0x60),
            },
        });
        assert_eq!(answer(&primary, "t", None), None);
        assert_eq!(answer(&seeing(Server::Unanswering), "t", None), None);
        assert_eq!(answer(&seeing(standby(None, None)), "t", None), None);
    }
}
