//! A standby's answer to a failover's survey, from what its manager saw.

use crate::instance::observe::answer;
use crate::instance::{
    DataDir, LeaseRead, Lsn, Observation, Position, RoleLabel, Server, Standby,
};
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
