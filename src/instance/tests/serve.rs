//! The standby, its promotion, and the guard of a server that may write.

use super::*;
use crate::instance::table::reason::*;

fn chosen_with(released: Option<ReleasedAt>, server: Server) -> Observation {
    Observation {
        server,
        lease: LeaseRead::Seen(LeaseSeen {
            holder: Some(ME.to_owned()),
            released_at: released,
            ..LeaseSeen::default()
        }),
        ..seen()
    }
}

#[test]
fn a_standby_labelled_primary_and_named_by_the_lease_promotes_right_after_a_renewal() {
    let d = decide_in(&AgentState::Standby, &chosen_with(None, standby_at(10)));
    assert_eq!(goes(&d), Some((AgentState::Promoting, CHOSEN)));
    assert_eq!(d.actions(), [renew(), AgentAction::Promote]);
}

#[test]
fn a_standby_not_named_by_the_lease_follows_whatever_its_label() {
    let holder = || Upstream::Holder("pg-1/u1".to_owned());
    for (lease, upstream) in [
        (lease(Some("pg-1/u1")), holder()),
        (lease(None), Upstream::Nobody),
        (LeaseRead::Unreadable, holder()),
    ] {
        let d = decide_in(
            &AgentState::Standby,
            &Observation {
                server: standby_at(10),
                lease,
                upstream,
                // The tenure it last read lasts (for the round that cannot read it).
                tenure: Some(Tenure {
                    holder: "pg-1/u1".to_owned(),
                    until: at(200),
                }),
                ..seen()
            },
        );
        assert_eq!((goes(&d), d.reason()), (None, FOLLOWING));
    }
}

/// A primary that lost the Lease while paused or cut off, and resumes, must find no
/// standby still connected to acknowledge what its backends commit before its fence
/// stops it, so that a failover need not wait for the expiry.
#[test]
fn a_standby_streams_from_the_lease_holder_only_while_its_tenure_lasts() {
    let following = |lease: LeaseRead, upstream: Upstream| {
        decide_in(
            &AgentState::Standby,
            &Observation {
                role: RoleLabel::Is(Role::Replica),
                server: standby_at(10),
                lease,
                upstream,
                ..seen()
            },
        )
    };
    let follow = |holder: Option<&str>| AgentAction::Follow {
        holder: holder.map(str::to_owned),
    };
    // Started on the -rw Service: the holder, by name.
    let d = following(lease(Some("pg-1/u1")), Upstream::Service);
    assert_eq!((goes(&d), d.reason()), (None, UPSTREAM_MOVED));
    assert_eq!(d.actions(), [follow(Some("pg-1/u1"))]);
    // The Lease handed to another: that one.
    let d = following(
        lease(Some("pg-2/u2")),
        Upstream::Holder("pg-1/u1".to_owned()),
    );
    assert_eq!(d.actions(), [follow(Some("pg-2/u2"))]);
    // The holder's tenure ran out on this agent's clock (now is 100 s), or it released
    // the Lease: nobody.
    let ran_out = LeaseRead::Seen(LeaseSeen {
        holder: Some("pg-1/u1".to_owned()),
        holder_until: Some(at(100)),
        ..LeaseSeen::default()
    });
    for lease in [ran_out, lease(None)] {
        let d = following(lease, Upstream::Holder("pg-1/u1".to_owned()));
        assert_eq!(d.actions(), [follow(None)]);
    }
    // The Lease unreadable, and never read: not the -rw Service, whose pod no tenure
    // vouches for, but nobody.
    let d = following(LeaseRead::Unreadable, Upstream::Service);
    assert_eq!(d.actions(), [follow(None)]);
}

#[test]
fn a_standby_that_cannot_read_the_lease_stops_streaming_once_the_tenure_it_last_read_ran_out() {
    let cut_off = |tenure: Option<Tenure>| {
        decide_in(
            &AgentState::Standby,
            &Observation {
                role: RoleLabel::Is(Role::Replica),
                server: standby_at(10),
                lease: LeaseRead::Unreadable,
                upstream: Upstream::Holder("pg-1/u1".to_owned()),
                tenure,
                ..seen()
            },
        )
    };
    let tenure = |holder: &str, until: u64| {
        Some(Tenure {
            holder: holder.to_owned(),
            until: at(until),
        })
    };
    // Within the tenure it last read (now is 100 s): it keeps streaming from the holder.
    let d = cut_off(tenure("pg-1/u1", 101));
    assert_eq!((d.reason(), d.actions()), (FOLLOWING, &[][..]));
    // Once it ran out, or with no tenure of that holder read: nobody, so a deposed
    // primary cut off with it gets no acknowledgement from it.
    for last in [tenure("pg-1/u1", 100), tenure("pg-2/u2", 200), None] {
        let d = cut_off(last.clone());
        assert_eq!(d.reason(), UPSTREAM_MOVED, "{last:?}");
        assert_eq!(d.actions(), [AgentAction::Follow { holder: None }]);
    }
}

#[test]
fn a_replica_that_has_not_streamed_for_the_stall_bound_while_a_primary_answers_stops_to_rejoin() {
    let stalled = |since: u64, upstream_writable: bool| Observation {
        role: RoleLabel::Is(Role::Replica),
        server: Server::Standby(Standby {
            streaming: false,
            ..Standby::default()
        }),
        lease: lease(Some("pg-1/u1")),
        upstream: Upstream::Holder("pg-1/u1".to_owned()),
        upstream_writable,
        not_streaming_since: Some(at(since)),
        ..seen()
    };
    // 20 s without streaming (now is 100 s), the primary answering: a clean stop.
    let d = decide_in(&AgentState::Standby, &stalled(80, true));
    let stopping = AgentState::Stopping {
        began: at(100),
        primary: false,
    };
    assert_eq!(goes(&d), Some((stopping, STREAM_STALLED)));
    assert_eq!(d.actions(), [AgentAction::StopClean]);
    // Short of the bound, or with no writable primary to rejoin: it keeps following.
    for (since, upstream) in [(81, true), (0, false)] {
        let d = decide_in(&AgentState::Standby, &stalled(since, upstream));
        assert_eq!(
            (goes(&d), d.reason()),
            (None, FOLLOWING),
            "{since} {upstream}"
        );
    }
}

#[test]
fn a_replica_that_exits_before_it_ever_streamed_while_a_primary_answers_is_cloned_again() {
    let exited = Observation {
        role: RoleLabel::Is(Role::Replica),
        data: DataDir::Standby { clean: false },
        server: Server::Down { exit: Some(1) },
        upstream_writable: true,
        ..seen()
    };
    let d = decide_in(&AgentState::Standby, &exited);
    assert_eq!(goes(&d), Some((AgentState::Cloning, STANDBY_UNFOLLOWABLE)));
    assert!(d.actions().is_empty(), "the clone runs in Cloning");
    // One that streamed, one on data cloned a moment ago, one with no primary to clone
    // from, and one chosen to promote exit as before (the container restarts).
    for (why, seen) in [
        (
            "streamed",
            Observation {
                streamed: true,
                ..exited.clone()
            },
        ),
        (
            "cloned",
            Observation {
                cloned: true,
                ..exited.clone()
            },
        ),
        (
            "no primary",
            Observation {
                upstream_writable: false,
                ..exited.clone()
            },
        ),
        (
            "chosen",
            Observation {
                role: RoleLabel::Is(Role::Primary),
                ..exited.clone()
            },
        ),
    ] {
        let d = decide_in(&AgentState::Standby, &seen);
        assert_eq!(d.reason(), SERVER_EXITED, "{why}");
    }
    // Nor is one cloned again with re-cloning off.
    let off = AgentSpec {
        reclone_on_rewind_failure: false,
        ..spec()
    };
    let d = decide(&off, &AgentState::Standby, &exited, false);
    assert_eq!(d.reason(), SERVER_EXITED);
}

#[test]
fn a_standby_chosen_as_primary_is_never_stopped_for_not_streaming() {
    let chosen = Observation {
        upstream_writable: true,
        not_streaming_since: Some(at(0)),
        ..chosen_with(None, standby_at(10))
    };
    assert_eq!(decide_in(&AgentState::Standby, &chosen).reason(), CHOSEN);
}

#[test]
fn a_chosen_standby_short_of_the_released_position_does_not_promote() {
    let short = chosen_with(Some(ReleasedAt::Lsn(Lsn(300))), standby_at(299));
    let d = decide_in(&AgentState::Standby, &short);
    assert_eq!((goes(&d), d.reason()), (None, HELD_BACK));
    assert!(d.actions().is_empty());
    let there = chosen_with(Some(ReleasedAt::Lsn(Lsn(300))), standby_at(300));
    assert_eq!(decide_in(&AgentState::Standby, &there).reason(), CHOSEN);
}

#[test]
fn a_released_position_that_is_no_lsn_holds_the_promotion_back() {
    let bad = chosen_with(
        Some(ReleasedAt::Invalid("soon".to_owned())),
        standby_at(900),
    );
    assert_eq!(decide_in(&AgentState::Standby, &bad).reason(), HELD_BACK);
}

#[test]
fn a_standby_found_writable_unasked_is_fenced_at_once() {
    let d = decide_in(
        &AgentState::Standby,
        &Observation {
            server: writable(),
            ..seen()
        },
    );
    let fencing = AgentState::Fencing {
        since: at(100),
        step: FenceStep::Immediate,
    };
    assert_eq!(goes(&d), Some((fencing, PROMOTED_BY_SOMEONE_ELSE)));
    assert_eq!(d.actions(), [AgentAction::StopImmediate]);
}

#[test]
fn a_promoting_standby_is_guarded_and_asks_again_until_writable() {
    let d = decide_in(&AgentState::Promoting, &chosen_with(None, standby_at(10)));
    assert_eq!(d.actions(), [renew(), AgentAction::Promote]);
    let d = decide_in(&AgentState::Promoting, &chosen_with(None, writable()));
    assert_eq!(goes(&d), Some((AgentState::Primary, PROMOTED)));
    let d = decide_in(
        &AgentState::Promoting,
        &Observation {
            renewed: Some(at(95)),
            ..chosen_with(None, standby_at(10))
        },
    );
    assert_eq!(d.reason(), RENEWAL_OVERDUE);
}

#[test]
fn the_primary_renews_every_round_and_drops_the_released_position_once_writable() {
    let d = decide_in(&AgentState::Primary, &chosen_with(None, writable()));
    assert_eq!((goes(&d), d.actions()), (None, &[renew()][..]));
    let d = decide_in(
        &AgentState::Primary,
        &chosen_with(Some(ReleasedAt::Lsn(Lsn(1))), writable()),
    );
    assert_eq!(
        d.actions(),
        [AgentAction::Renew {
            lease: Duration::from_secs(15),
            drop_released_lsn: true,
            mark_initialized: true,
        }]
    );
    // Started but not answering yet: still guarded, but the position stays.
    let d = decide_in(
        &AgentState::Primary,
        &chosen_with(Some(ReleasedAt::Lsn(Lsn(1))), Server::Unanswering),
    );
    assert_eq!(d.actions(), [renew()]);
}

#[test]
fn the_primary_is_fenced_when_the_lease_names_another_holder_or_none() {
    for holder in [Some("pg-1/u1"), None] {
        let d = decide_in(
            &AgentState::Primary,
            &Observation {
                server: writable(),
                lease: lease(holder),
                ..seen()
            },
        );
        assert_eq!(d.reason(), LEASE_LOST);
        assert_eq!(d.actions(), [AgentAction::StopImmediate]);
    }
}

#[test]
fn the_primary_is_fenced_once_no_renewal_was_accepted_for_t_less_g() {
    let after = |s: u64, lease| Observation {
        server: writable(),
        renewed: Some(at(100 - s)),
        lease,
        ..seen()
    };
    // T = 7, G = 2: at 4 s it serves, at 5 s it is fenced, whether or not the Lease can
    // be read.
    let d = decide_in(&AgentState::Primary, &after(4, LeaseRead::Unreadable));
    assert_eq!(d.reason(), SERVING);
    for lease in [LeaseRead::Unreadable, lease(Some(ME))] {
        let d = decide_in(&AgentState::Primary, &after(5, lease));
        assert_eq!(d.reason(), RENEWAL_OVERDUE);
    }
    let never = Observation {
        renewed: None,
        ..after(0, LeaseRead::Unreadable)
    };
    assert_eq!(
        decide_in(&AgentState::Primary, &never).reason(),
        RENEWAL_OVERDUE
    );
}

#[test]
fn the_primary_looks_again_no_later_than_its_fence_deadline() {
    let d = decide_in(
        &AgentState::Primary,
        &Observation {
            server: writable(),
            renewed: Some(at(96)),
            lease: LeaseRead::Unreadable,
            ..seen()
        },
    );
    assert_eq!(requeue(&d), Some(Duration::from_secs(1)));
    let d = decide_in(&AgentState::Primary, &chosen_with(None, writable()));
    assert_eq!(requeue(&d), Some(Duration::from_secs(2)));
}

#[test]
fn a_writable_server_whose_role_label_is_no_role_is_fenced() {
    for role in [RoleLabel::Absent, RoleLabel::Unknown("x".to_owned())] {
        let d = decide_in(
            &AgentState::Primary,
            &Observation {
                role,
                server: writable(),
                ..seen()
            },
        );
        assert_eq!(d.reason(), ROLE_UNKNOWN_WHILE_WRITABLE);
    }
}

#[test]
fn a_primary_labelled_replica_keeps_serving_while_it_holds_the_lease() {
    // Labels follow the Lease after a hand-over; the Lease is the authority.
    let d = decide_in(
        &AgentState::Primary,
        &Observation {
            role: RoleLabel::Is(Role::Replica),
            server: writable(),
            ..seen()
        },
    );
    assert_eq!(d.reason(), SERVING);
}

#[test]
fn a_primary_labelled_demoted_or_asked_to_stop_stops_cleanly() {
    let demoted = Observation {
        role: RoleLabel::Is(Role::Demoted),
        server: writable(),
        ..seen()
    };
    let stopping = AgentState::Stopping {
        began: at(100),
        primary: true,
    };
    let d = decide_in(&AgentState::Primary, &demoted);
    assert_eq!(goes(&d), Some((stopping.clone(), DEMOTED)));
    assert_eq!(d.actions(), [AgentAction::StopClean]);
    let d = decide(
        &spec(),
        &AgentState::Primary,
        &chosen_with(None, writable()),
        true,
    );
    assert_eq!(goes(&d), Some((stopping, SIGNALLED)));
}

#[test]
fn a_standby_whose_server_exits_on_its_own_ends_the_agent_with_its_status() {
    let d = decide_in(
        &AgentState::Standby,
        &Observation {
            server: Server::Down { exit: Some(137) },
            ..seen()
        },
    );
    let code = ExitCode::ServerExited(137);
    assert_eq!(goes(&d), Some((AgentState::Exited { code }, SERVER_EXITED)));
}

#[test]
fn a_primary_whose_server_crashed_releases_the_lease_without_a_position_then_exits_with_its_status()
{
    let crashed = Observation {
        server: Server::Down { exit: Some(137) },
        ..seen()
    };
    let releasing = AgentState::Releasing {
        lsn: None,
        crashed: Some(137),
    };
    for state in [AgentState::Promoting, AgentState::Primary] {
        let d = decide_in(&state, &crashed);
        assert_eq!(goes(&d), Some((releasing.clone(), SERVER_EXITED)));
    }
    // Nobody knows what it acknowledged last: no position, so a planned switchover
    // surveys the standbys and a failover promotes the most advanced.
    let d = decide_in(&releasing, &crashed);
    assert_eq!(d.actions(), [AgentAction::Release { lsn: None }]);
    let released = Observation {
        lease: LeaseRead::Seen(LeaseSeen {
            released_by: Some(ME.to_owned()),
            ..LeaseSeen::default()
        }),
        ..crashed
    };
    let code = ExitCode::ServerExited(137);
    assert_eq!(
        goes(&decide_in(&releasing, &released)),
        Some((AgentState::Exited { code }, RELEASED))
    );
}

#[test]
fn without_a_lease_a_standby_labelled_primary_promotes_and_only_demotion_stops_it() {
    let spec = AgentSpec {
        lease: None,
        ..spec()
    };
    let d = decide(
        &spec,
        &AgentState::Standby,
        &chosen_with(None, standby_at(1)),
        false,
    );
    assert_eq!(d.actions(), [AgentAction::Promote]);
    let lost = Observation {
        server: writable(),
        lease: lease(Some("pg-1/u1")),
        renewed: None,
        ..seen()
    };
    assert_eq!(
        decide(&spec, &AgentState::Primary, &lost, false).reason(),
        SERVING
    );
}

/// A primary whose WAL volume hangs still renews the Lease (that is the manager's own
/// work), while every commit waits: it must not stay the primary for ever.
#[test]
fn a_primary_whose_wal_flush_stands_still_behind_what_it_wrote_is_stopped_at_once() {
    let stalled = |since: u64, server: Server| Observation {
        wal_stall: Some(WalStall {
            since: at(since),
            flushed: Lsn(400),
            inserted: Lsn(500),
        }),
        ..chosen_with(None, server)
    };
    // Within the bound (30 s; now is 100 s), or with its queries hanging too: it serves.
    let d = decide_in(&AgentState::Primary, &stalled(71, writable()));
    assert_eq!((goes(&d), d.actions()), (None, &[renew()][..]));
    for server in [writable(), Server::Unanswering] {
        let d = decide_in(&AgentState::Primary, &stalled(70, server));
        let fencing = AgentState::Fencing {
            since: at(100),
            step: FenceStep::Immediate,
        };
        assert_eq!(goes(&d), Some((fencing, WAL_FLUSH_STALLED)));
        assert_eq!(d.actions(), [AgentAction::StopImmediate]);
        let Decision::Go { message, .. } = &d else {
            panic!("{d:?}")
        };
        assert!(
            message.contains("up to 0/1F4") && message.contains("past 0/190"),
            "{message}"
        );
    }
}

#[test]
fn a_wal_stall_counts_from_when_the_flush_position_last_moved() {
    let (written, flushed) = (Lsn(500), Lsn(400));
    let first = WalStall::next(None, written, flushed, at(10));
    assert_eq!(first.map(|s| s.since), Some(at(10)));
    // More written, the flush position unmoved: the same stall.
    let later = WalStall::next(first, Lsn(600), flushed, at(20));
    assert_eq!(
        later.map(|s| (s.since, s.inserted)),
        Some((at(10), Lsn(600)))
    );
    // The flush position moved: counted again; everything flushed: none.
    let moved = WalStall::next(later, Lsn(700), Lsn(650), at(30));
    assert_eq!(moved.map(|s| s.since), Some(at(30)));
    assert_eq!(WalStall::next(moved, Lsn(700), Lsn(700), at(40)), None);
}

#[test]
fn an_idle_server_after_a_wal_switch_is_not_stalled_by_the_new_pages_header() {
    // Seen on the real node: after a failover's switch to a new timeline the idle
    // primary's insert position stood at 0/9000028, its flush position at 0/9000000,
    // and the manager fenced a healthy primary 31 s later.
    let (segment, header) = (Lsn(0x9_000_000), Lsn(0x9_000_028));
    assert_eq!(WalStall::next(None, header, segment, at(10)), None);
    let short_header = Lsn(0x9_002_000 + 0x18);
    assert_eq!(
        WalStall::next(None, short_header, Lsn(0x9_002_000), at(10)),
        None
    );
    // A record past the header is WAL to flush.
    let record = Lsn(0x9_000_060);
    assert!(WalStall::next(None, record, segment, at(10)).is_some());
}
