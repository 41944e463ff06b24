//! Stopping cleanly, releasing, fencing.

use super::*;
use crate::instance::table::reason::*;

fn stopping() -> AgentState {
    AgentState::Stopping {
        began: at(100),
        primary: true,
    }
}

fn still_running(now: u64, renewed: u64) -> Observation {
    Observation {
        role: RoleLabel::Is(Role::Demoted),
        server: Server::Unanswering,
        now: at(now),
        renewed: Some(at(renewed)),
        ..seen()
    }
}

#[test]
fn a_clean_stop_keeps_renewing_the_lease_while_it_runs() {
    // The released position: a stop that runs longer than L + S - R must not let the Lease expire.
    for now in [101, 110, 150, 219] {
        let d = decide_in(&stopping(), &still_running(now, now - 1));
        assert_eq!((goes(&d), d.actions()), (None, &[renew()][..]), "at {now}");
    }
}

#[test]
fn a_clean_stop_that_outlasts_its_bound_is_escalated_to_an_immediate_stop() {
    let d = decide_in(&stopping(), &still_running(220, 219));
    let fencing = AgentState::Fencing {
        since: at(220),
        step: FenceStep::Immediate,
    };
    assert_eq!(goes(&d), Some((fencing, STOP_OUTLASTED)));
    assert_eq!(d.actions(), [AgentAction::StopImmediate]);
}

#[test]
fn a_clean_stop_without_accepted_renewals_is_escalated_so_that_the_server_is_down_by_t() {
    assert_eq!(
        decide_in(&stopping(), &still_running(104, 100)).reason(),
        STOPPING
    );
    let d = decide_in(&stopping(), &still_running(105, 100));
    assert_eq!(d.reason(), STOP_OUTLASTED);
    // The immediate stop is killed at T at the latest.
    let fencing = AgentState::Fencing {
        since: at(105),
        step: FenceStep::Immediate,
    };
    assert_eq!(
        decide_in(&fencing, &still_running(106, 100)).reason(),
        STOPPING
    );
    // An immediate stop begun 1 s before T looks again at T, not when its grace ends.
    let late = AgentState::Fencing {
        since: at(106),
        step: FenceStep::Immediate,
    };
    assert_eq!(
        requeue(&decide_in(&late, &still_running(106, 100))),
        Some(Duration::from_secs(1))
    );
    let d = decide_in(&fencing, &still_running(107, 100));
    assert_eq!(d.reason(), IMMEDIATE_STOP_OUTLASTED);
    assert_eq!(d.actions(), [AgentAction::Kill]);
}

#[test]
fn a_clean_stop_whose_lease_names_another_holder_is_escalated() {
    let d = decide_in(
        &stopping(),
        &Observation {
            lease: lease(Some("pg-1/u1")),
            ..still_running(101, 100)
        },
    );
    assert_eq!(d.reason(), LEASE_LOST);
}

#[test]
fn a_cleanly_stopped_primary_releases_the_lease_with_its_shutdown_checkpoint() {
    let stopped = Observation {
        server: Server::Down { exit: Some(0) },
        data: DataDir::Primary {
            clean: true,
            checkpoint: Some(Position {
                timeline: 3,
                lsn: Lsn(777),
            }),
        },
        ..still_running(110, 109)
    };
    let d = decide_in(&stopping(), &stopped);
    let releasing = AgentState::Releasing {
        lsn: Some(Lsn(777)),
        crashed: None,
    };
    assert_eq!(goes(&d), Some((releasing.clone(), STOPPED_CLEANLY)));
    let d = decide_in(&releasing, &stopped);
    assert_eq!(
        d.actions(),
        [AgentAction::Release {
            lsn: Some(Lsn(777))
        }]
    );
}

#[test]
fn a_stopped_standby_releases_nothing() {
    let d = decide_in(
        &AgentState::Stopping {
            began: at(100),
            primary: false,
        },
        &Observation {
            server: Server::Down { exit: Some(0) },
            ..still_running(101, 100)
        },
    );
    let code = ExitCode::Stopped;
    assert_eq!(
        goes(&d),
        Some((AgentState::Exited { code }, STOPPED_CLEANLY))
    );
}

#[test]
fn a_failed_release_is_retried_until_the_lease_as_last_renewed_would_expire() {
    let releasing = AgentState::Releasing {
        lsn: Some(Lsn(9)),
        crashed: None,
    };
    let down = |now, lease| Observation {
        server: Server::Down { exit: Some(0) },
        lease,
        ..still_running(now, 100)
    };
    // Still named: released again, every round, until L (15 s) after the renewal.
    for now in [101, 114] {
        let d = decide_in(&releasing, &down(now, lease(Some(ME))));
        assert_eq!(d.actions(), [AgentAction::Release { lsn: Some(Lsn(9)) }]);
        let d = decide_in(&releasing, &down(now, LeaseRead::Unreadable));
        assert_eq!((goes(&d), d.reason()), (None, RELEASING));
    }
    let d = decide_in(&releasing, &down(115, lease(Some(ME))));
    assert_eq!(d.reason(), RELEASE_ABANDONED);
}

#[test]
fn a_release_ends_when_it_is_seen_or_overtaken() {
    let releasing = AgentState::Releasing {
        lsn: Some(Lsn(9)),
        crashed: None,
    };
    let down = |lease| Observation {
        server: Server::Down { exit: Some(0) },
        lease,
        ..still_running(101, 100)
    };
    let released = LeaseRead::Seen(LeaseSeen {
        released_by: Some(ME.to_owned()),
        ..LeaseSeen::default()
    });
    assert_eq!(decide_in(&releasing, &down(released)).reason(), RELEASED);
    let d = decide_in(&releasing, &down(lease(Some("pg-1/u1"))));
    assert_eq!(d.reason(), RELEASE_OVERTAKEN);
    assert_eq!(ExitCode::Stopped.status(), 0);
}

#[test]
fn the_fence_kills_after_g_and_exits_5_once_the_server_is_down() {
    let fencing = AgentState::Fencing {
        since: at(100),
        step: FenceStep::Immediate,
    };
    let d = decide_in(&fencing, &still_running(101, 99));
    assert_eq!((goes(&d), d.reason()), (None, STOPPING));
    let d = decide_in(&fencing, &still_running(102, 99));
    assert_eq!(d.reason(), IMMEDIATE_STOP_OUTLASTED);
    let killing = AgentState::Fencing {
        since: at(102),
        step: FenceStep::Kill,
    };
    assert_eq!(
        decide_in(&killing, &still_running(103, 99)).actions(),
        [AgentAction::Kill]
    );
    let d = decide_in(
        &killing,
        &Observation {
            server: Server::Down { exit: Some(137) },
            ..still_running(103, 99)
        },
    );
    let code = ExitCode::Fenced;
    assert_eq!(goes(&d), Some((AgentState::Exited { code }, FENCED)));
    assert_eq!(code.status(), 5);
}
