//! Starting, the Lease before a writable start, and preparing the data directory.

use super::*;
use crate::instance::table::reason::*;

#[test]
fn a_pod_without_a_role_label_waits_for_one() {
    let d = decide_in(
        &AgentState::Starting,
        &Observation {
            role: RoleLabel::Absent,
            ..seen()
        },
    );
    assert_eq!((goes(&d), d.reason()), (None, WAITING_FOR_ROLE));
}

#[test]
fn a_pod_asked_to_stop_while_it_waits_for_a_role_label_exits_at_once() {
    let unlabelled = Observation {
        role: RoleLabel::Absent,
        ..seen()
    };
    let d = decide(&spec(), &AgentState::Starting, &unlabelled, true);
    let code = ExitCode::Stopped;
    assert_eq!(goes(&d), Some((AgentState::Exited { code }, SIGNALLED)));
}

#[test]
fn a_role_label_that_is_no_role_exits_misconfigured() {
    let d = decide_in(
        &AgentState::Starting,
        &Observation {
            role: RoleLabel::Unknown("leader".to_owned()),
            ..seen()
        },
    );
    let code = ExitCode::Misconfigured;
    assert_eq!(goes(&d), Some((AgentState::Exited { code }, UNKNOWN_ROLE)));
    assert_eq!(code.status(), 2);
}

#[test]
fn foreign_data_is_never_written_over() {
    let d = decide_in(
        &AgentState::Starting,
        &Observation {
            data: DataDir::Foreign,
            ..seen()
        },
    );
    assert_eq!(d.reason(), FOREIGN_DATA);
}

#[test]
fn a_pod_labelled_primary_waits_for_the_lease_before_it_prepares() {
    let d = decide_in(&AgentState::Starting, &seen());
    assert_eq!(
        goes(&d),
        Some((AgentState::AwaitingLease, LABELLED_PRIMARY))
    );
    assert!(d.actions().is_empty());
}

#[test]
fn while_the_lease_names_another_pod_a_pod_labelled_primary_waits() {
    for lease in [lease(Some("pg-1/u1")), lease(None), LeaseRead::Unreadable] {
        let d = decide_in(&AgentState::AwaitingLease, &Observation { lease, ..seen() });
        assert_eq!((goes(&d), d.actions()), (None, &[][..]));
        assert_eq!(d.reason(), WAITING_FOR_LEASE);
    }
}

#[test]
fn the_lease_held_prepares_only_through_an_accepted_renewal() {
    // Only a pod that has the cluster's data marks the Lease initialized.
    let before_a_bootstrap = AgentAction::Renew {
        lease: Duration::from_secs(15),
        drop_released_lsn: false,
        mark_initialized: false,
    };
    for (data, to, renewal) in [
        (
            DataDir::Empty,
            AgentState::Bootstrapping,
            before_a_bootstrap.clone(),
        ),
        (
            DataDir::Interrupted,
            AgentState::Bootstrapping,
            before_a_bootstrap,
        ),
        (
            DataDir::Standby { clean: true },
            AgentState::PromotingLocally,
            renew(),
        ),
        (
            DataDir::Primary {
                clean: true,
                checkpoint: None,
            },
            AgentState::StartingPrimary,
            renew(),
        ),
    ] {
        let d = decide_in(&AgentState::AwaitingLease, &Observation { data, ..seen() });
        assert_eq!(goes(&d), Some((to, LEASE_HELD)));
        assert_eq!(d.actions(), [renewal]);
    }
}

#[test]
fn files_put_on_the_volume_while_the_pod_waits_for_the_lease_are_never_written_over() {
    for initialized in [false, true] {
        let seen = Observation {
            data: DataDir::Foreign,
            lease: LeaseRead::Seen(LeaseSeen {
                holder: Some(ME.to_owned()),
                initialized,
                ..LeaseSeen::default()
            }),
            ..seen()
        };
        let d = decide_in(&AgentState::AwaitingLease, &seen);
        assert_eq!(
            goes(&d),
            Some((
                AgentState::Exited {
                    code: ExitCode::Misconfigured
                },
                FOREIGN_DATA
            ))
        );
        assert!(d.actions().is_empty(), "no renewal, no initdb");
    }
}

#[test]
fn a_pod_with_no_data_never_bootstraps_once_the_lease_says_the_database_exists() {
    for data in [DataDir::Empty, DataDir::Interrupted] {
        let seen = Observation {
            data,
            lease: LeaseRead::Seen(LeaseSeen {
                holder: Some(ME.to_owned()),
                initialized: true,
                ..LeaseSeen::default()
            }),
            ..seen()
        };
        let d = decide_in(&AgentState::AwaitingLease, &seen);
        assert_eq!((goes(&d), d.reason()), (None, ALREADY_INITIALIZED));
        assert!(d.actions().is_empty(), "no renewal, no initdb");
        let Decision::Stay { message, .. } = &d else {
            unreachable!("a stay, checked above");
        };
        assert!(message.contains("lockstep.dev/initialized"), "{message}");
    }
}

#[test]
fn standby_data_named_with_a_released_position_starts_as_a_standby_keeping_the_lease() {
    let d = decide_in(
        &AgentState::AwaitingLease,
        &Observation {
            data: DataDir::Standby { clean: true },
            lease: LeaseRead::Seen(LeaseSeen {
                holder: Some(ME.to_owned()),
                released_at: Some(ReleasedAt::Lsn(Lsn(300))),
                ..LeaseSeen::default()
            }),
            ..seen()
        },
    );
    assert_eq!(
        goes(&d),
        Some((AgentState::Standby, RELEASED_POSITION_PENDING))
    );
    assert_eq!(d.actions(), [AgentAction::StartStandby]);
}

#[test]
fn a_pod_relabelled_while_it_waits_for_the_lease_starts_over() {
    for state in [AgentState::AwaitingLease, AgentState::StartingPrimary] {
        let d = decide_in(
            &state,
            &Observation {
                role: RoleLabel::Is(Role::Replica),
                ..seen()
            },
        );
        assert_eq!(goes(&d), Some((AgentState::Starting, ROLE_CHANGED)));
    }
}

#[test]
fn the_writable_start_comes_right_after_an_accepted_renewal() {
    let d = decide_in(&AgentState::StartingPrimary, &seen());
    assert_eq!(goes(&d), Some((AgentState::Primary, STARTED_WRITABLE)));
    assert_eq!(d.actions(), [renew(), AgentAction::StartPrimary]);
}

#[test]
fn a_lease_that_moved_before_the_writable_start_is_waited_for_again() {
    let d = decide_in(
        &AgentState::StartingPrimary,
        &Observation {
            lease: lease(Some("pg-1/u1")),
            ..seen()
        },
    );
    assert_eq!(goes(&d), Some((AgentState::AwaitingLease, LEASE_MOVED)));
}

#[test]
fn without_a_lease_a_pod_labelled_primary_starts_writable_without_renewing() {
    let spec = AgentSpec {
        lease: None,
        ..spec()
    };
    let d = decide(&spec, &AgentState::StartingPrimary, &seen(), false);
    assert_eq!(d.actions(), [AgentAction::StartPrimary]);
}

#[test]
fn a_replica_clones_rewinds_or_starts_by_what_its_data_holds() {
    let replica = |data, upstream_writable| Observation {
        role: RoleLabel::Is(Role::Replica),
        data,
        upstream_writable,
        lease: lease(Some("pg-1/u1")),
        ..seen()
    };
    let old_primary = DataDir::Primary {
        clean: false,
        checkpoint: None,
    };
    for (data, upstream, to, why) in [
        (DataDir::Empty, false, AgentState::Cloning, NO_DATA),
        (DataDir::Interrupted, true, AgentState::Cloning, NO_DATA),
        (old_primary, true, AgentState::Rewinding, OLD_PRIMARY_DATA),
        (
            DataDir::Standby { clean: true },
            true,
            AgentState::Rewinding,
            STANDBY_MAY_HAVE_DIVERGED,
        ),
        (
            DataDir::Standby { clean: true },
            false,
            AgentState::Standby,
            STANDBY_DATA,
        ),
        (
            DataDir::Standby { clean: false },
            true,
            AgentState::Standby,
            STANDBY_DATA,
        ),
    ] {
        let d = decide_in(&AgentState::Starting, &replica(data, upstream));
        assert_eq!(goes(&d), Some((to, why)));
    }
}

#[test]
fn a_demoted_pod_rejoins_like_a_replica_and_releases_a_lease_still_naming_it() {
    let d = decide_in(
        &AgentState::Starting,
        &Observation {
            role: RoleLabel::Is(Role::Demoted),
            data: DataDir::Primary {
                clean: false,
                checkpoint: None,
            },
            ..seen()
        },
    );
    assert_eq!(goes(&d), Some((AgentState::Rewinding, OLD_PRIMARY_DATA)));
    assert_eq!(d.actions(), [AgentAction::Release { lsn: None }]);
}

#[test]
fn a_preparation_is_asked_for_every_round_until_it_finished() {
    let d = decide_in(&AgentState::Cloning, &seen());
    assert_eq!((goes(&d), d.actions()), (None, &[AgentAction::Clone][..]));
    let done = |task, ok| Observation {
        finished: Some(Finished {
            task,
            ok,
            unreached: false,
        }),
        ..seen()
    };
    let d = decide_in(&AgentState::Cloning, &done(Task::Clone, true));
    assert_eq!(goes(&d), Some((AgentState::Standby, CLONED)));
    assert_eq!(d.actions(), [AgentAction::StartStandby]);
    let d = decide_in(&AgentState::Bootstrapping, &done(Task::Bootstrap, true));
    assert_eq!(goes(&d), Some((AgentState::StartingPrimary, BOOTSTRAPPED)));
    // Another task's outcome is not this one's.
    let d = decide_in(&AgentState::Rewinding, &done(Task::Clone, true));
    assert_eq!(d.actions(), [AgentAction::Rewind]);
}

#[test]
fn a_failed_rewind_clones_again_unless_that_is_off() {
    let failed = Observation {
        finished: Some(Finished {
            task: Task::Rewind,
            ok: false,
            unreached: false,
        }),
        ..seen()
    };
    let d = decide_in(&AgentState::Rewinding, &failed);
    assert_eq!(goes(&d), Some((AgentState::Cloning, REWIND_FAILED)));
    let spec = AgentSpec {
        reclone_on_rewind_failure: false,
        ..spec()
    };
    let d = decide(&spec, &AgentState::Rewinding, &failed, false);
    let code = ExitCode::PrepareFailed;
    assert_eq!(
        goes(&d),
        Some((AgentState::Exited { code }, PREPARE_FAILED))
    );
    assert_eq!(code.status(), 4);
}

#[test]
fn a_rewind_that_never_reached_a_primary_keeps_the_data_and_decides_the_start_again() {
    let unreached = Observation {
        finished: Some(Finished {
            task: Task::Rewind,
            ok: false,
            unreached: true,
        }),
        ..seen()
    };
    for reclone_on_rewind_failure in [true, false] {
        let spec = AgentSpec {
            reclone_on_rewind_failure,
            ..spec()
        };
        let d = decide(&spec, &AgentState::Rewinding, &unreached, false);
        assert_eq!(goes(&d), Some((AgentState::Starting, REWIND_UNREACHED)));
        assert!(d.actions().is_empty(), "nothing is discarded: {d:?}");
    }
}

#[test]
fn a_postmaster_this_agent_did_not_start_is_killed_before_anything_else() {
    for state in [
        AgentState::Starting,
        AgentState::AwaitingLease,
        AgentState::Cloning,
    ] {
        let d = decide_in(
            &state,
            &Observation {
                stray: Some(4242),
                ..seen()
            },
        );
        assert_eq!(d.actions(), [AgentAction::KillStray { pid: 4242 }]);
        assert_eq!(goes(&d), None);
    }
}

#[test]
fn asked_to_stop_before_its_server_runs_it_exits() {
    let d = decide(&spec(), &AgentState::AwaitingLease, &seen(), true);
    let code = ExitCode::Stopped;
    assert_eq!(goes(&d), Some((AgentState::Exited { code }, SIGNALLED)));
}
