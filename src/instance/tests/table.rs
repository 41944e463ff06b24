//! The table, its reasons, the states' encoding.

use super::*;
use crate::engine::Machine;
use crate::instance::table::TABLE;

#[test]
fn every_edge_reason_is_a_camel_case_constant() {
    for e in TABLE {
        assert!(
            e.reason.chars().next().is_some_and(char::is_uppercase) && !e.reason.contains(' '),
            "{}",
            e.reason
        );
    }
}

#[test]
fn every_edge_is_taken_in_the_file_the_table_names() {
    let checked =
        crate::machines::common::table_sources::where_taken::<Instance>("src/instance/decide");
    assert_eq!(checked, Ok(()));
}

#[test]
fn every_state_round_trips_through_json() {
    let states = [
        AgentState::Starting,
        AgentState::Stopping {
            began: at(3),
            primary: true,
        },
        AgentState::Releasing {
            lsn: Some(Lsn(0x1_0000_0002)),
            crashed: None,
        },
        AgentState::Releasing {
            lsn: None,
            crashed: Some(137),
        },
        AgentState::Fencing {
            since: at(4),
            step: FenceStep::Kill,
        },
        AgentState::Exited {
            code: ExitCode::ServerExited(137),
        },
    ];
    for state in states {
        let json = serde_json::to_string(&state).unwrap_or_default();
        let back: Option<AgentState> = serde_json::from_str(&json).ok();
        assert_eq!(back, Some(state), "{json}");
    }
    assert!(
        serde_json::to_string(&AgentState::Releasing {
            lsn: Some(Lsn(0x1_0000_0002)),
            crashed: None,
        })
        .unwrap_or_default()
        .contains("\"1/2\"")
    );
}

#[test]
fn the_machine_starts_in_starting_and_ends_in_exited() {
    assert_eq!(Instance::initial(), AgentState::Starting);
    assert!(Instance::finalized(&AgentState::Exited {
        code: ExitCode::Fenced
    }));
    assert!(Instance::is_ready(&AgentState::Primary));
}
