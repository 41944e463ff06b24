//! A standby's answer to a failover's survey, from what its manager saw.

use crate::instance::observe::answer;
use crate::instance::{DataDir, LeaseRead, Lsn, Observation, Position, RoleLabel, Server, Standby};
use crate::instance::{LeaseSeen, Upstream, may_answer};
use crate::pod::Role;

use super::seen;

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
        renewed: None,
        ..seen()
    }
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

/// A deposed primary that thaws after the survey must find no standby the survey counted
/// still streaming from it, to acknowledge its backends' commits.
#[test]
fn a_standby_answers_a_survey_only_once_it_no_longer_follows_a_holder_whose_tenure_ran_out() {
    let surveyed = |upstream: Upstream| Observation {
        role: RoleLabel::Is(Role::Replica),
        server: standby(Some((1, 0x60)), Some((1, 0x60))),
        // The old primary's tenure ran out on this agent's clock (now is 100 s).
        lease: LeaseRead::Seen(LeaseSeen {
            holder: Some("pg-1/u1".to_owned()),
            holder_until: Some(super::at(100)),
            survey: Some("t".to_owned()),
            ..LeaseSeen::default()
        }),
        upstream,
        ..seen()
    };
    let old = Upstream::Holder("pg-1/u1".to_owned());
    assert!(!may_answer(&super::spec(), &surveyed(old)));
    assert!(!may_answer(&super::spec(), &surveyed(Upstream::Service)));
    assert!(may_answer(&super::spec(), &surveyed(Upstream::Nobody)));
}
