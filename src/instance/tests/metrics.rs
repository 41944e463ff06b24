//! The manager's `/metrics`, from one round's observation.

use super::*;
use crate::instance::run::metrics::InstanceMetrics;
use crate::ops::health::Scrape;

fn line<'a>(text: &'a str, series: &str) -> Option<&'a str> {
    text.lines().find(|l| l.starts_with(series))
}

#[test]
fn a_primary_reports_itself_up_writable_holding_the_lease_at_its_position() {
    let m = InstanceMetrics::new();
    let seen = Observation {
        server: writable(),
        ..seen()
    };
    m.record(&seen, &AgentState::Primary, Some(ME));
    let text = m.encode();
    for want in [
        "lockstep_instance_up 1",
        "lockstep_instance_writable 1",
        "lockstep_instance_lease_held 1",
        "lockstep_instance_timeline 2",
        "lockstep_instance_wal_position_bytes 500",
        "lockstep_instance_seconds_since_renewal 1",
        "lockstep_instance_state{state=\"Primary\"} 1",
        "lockstep_instance_role{role=\"primary\"} 1",
    ] {
        assert!(text.lines().any(|l| l == want), "{want} in:\n{text}");
    }
}

#[test]
fn a_standby_reports_its_replay_lag_and_streaming_and_only_its_current_state() {
    let m = InstanceMetrics::new();
    m.record(&seen(), &AgentState::Starting, Some(ME));
    let standby = Observation {
        role: RoleLabel::Is(Role::Replica),
        server: Server::Standby(Standby {
            received: Some(Position {
                timeline: 3,
                lsn: Lsn(900),
            }),
            replayed: Some(Position {
                timeline: 3,
                lsn: Lsn(850),
            }),
            streaming: true,
        }),
        lease: lease(Some("pg-1/u1")),
        ..seen()
    };
    m.record(&standby, &AgentState::Standby, Some(ME));
    let text = m.encode();
    assert_eq!(
        line(&text, "lockstep_instance_replay_lag_bytes"),
        Some("lockstep_instance_replay_lag_bytes 50")
    );
    assert_eq!(
        line(&text, "lockstep_instance_streaming"),
        Some("lockstep_instance_streaming 1")
    );
    assert_eq!(
        line(&text, "lockstep_instance_writable"),
        Some("lockstep_instance_writable 0")
    );
    assert_eq!(
        line(&text, "lockstep_instance_lease_held"),
        Some("lockstep_instance_lease_held 0")
    );
    assert!(
        !text.contains("state=\"Starting\""),
        "the state before is gone:\n{text}"
    );
    assert!(text.contains("role=\"replica\"} 1"), "{text}");
}

#[test]
fn a_standby_says_it_does_not_stream_only_after_ten_seconds_without_and_a_primary_says_nothing() {
    use crate::instance::run::manager::streams;
    let standby = |streaming: bool, since: Option<u64>| Observation {
        role: RoleLabel::Is(Role::Replica),
        server: Server::Standby(Standby {
            received: None,
            replayed: None,
            streaming,
        }),
        not_streaming_since: since.map(at),
        ..seen()
    };
    assert_eq!(streams(&standby(true, None)), Some(true));
    assert_eq!(
        streams(&standby(false, Some(95))),
        None,
        "a receiver reconnecting"
    );
    assert_eq!(streams(&standby(false, Some(90))), Some(false));
    assert_eq!(streams(&seen()), None);
}

#[test]
fn the_servers_connections_lag_and_archiver_counts_are_reported_and_count_on_across_a_restart() {
    use crate::instance::run::metrics::stats_from_row;
    let m = InstanceMetrics::new();
    let row = |fields: &[&str]| fields.iter().map(|f| (*f).to_owned()).collect::<Vec<_>>();
    let decide = ["t", "", "0/5000000", "0/4000000", "1", "2", "t"];
    let with = |extra: &[&str]| row(&[&decide[..], extra].concat());
    m.record_stats(&stats_from_row(&with(&[
        "3",
        "1.5",
        "7",
        "2",
        "1764730000.25",
    ])));
    // The server restarted: its counts start again from 0, the series count on.
    m.record_stats(&stats_from_row(&with(&["4", "0", "1", "0", ""])));
    let text = m.encode();
    for want in [
        "lockstep_instance_connections 4",
        "lockstep_instance_replay_lag_seconds 0.0",
        "lockstep_instance_wal_archived_total 8",
        "lockstep_instance_wal_archive_failures_total 2",
        "lockstep_instance_last_archived_timestamp_seconds 0.0",
    ] {
        assert!(text.lines().any(|l| l == want), "{want} in:\n{text}");
    }
    let first = stats_from_row(&with(&["3", "1.5", "7", "2", "1764730000.25"]));
    assert_eq!(first.replay_lag_seconds, Some(1.5));
    assert_eq!(first.last_archived, Some(1_764_730_000.25));
    // A primary's row has no lag: none, not a made-up number.
    assert_eq!(
        stats_from_row(&with(&["1", "", "0", "0", ""])).replay_lag_seconds,
        None
    );
}

#[test]
fn a_stalled_archive_shows_in_the_report_series_and_the_oldest_files_wait_and_a_standby_has_neither()
 {
    use crate::pod::archiving::Archiving;
    let m = InstanceMetrics::new();
    let stalled = Archiving::Stalled {
        wal: "000000010000000000000007".to_owned(),
    };
    m.record_archiving(Some(std::time::Duration::from_secs(420)), Some(&stalled));
    let text = m.encode();
    for want in [
        "lockstep_instance_wal_archive_report{reason=\"ArchiveStalled\"} 1",
        "lockstep_instance_wal_archive_waiting_seconds 420",
    ] {
        assert!(text.lines().any(|l| l == want), "{want} in:\n{text}");
    }
    m.record_archiving(None, Some(&Archiving::Works));
    let text = m.encode();
    assert!(
        text.lines()
            .any(|l| l == "lockstep_instance_wal_archive_report{reason=\"Archiving\"} 1"),
        "{text}"
    );
    assert!(!text.contains("{reason=\"ArchiveStalled\"}"), "{text}");
    m.record_archiving(None, None);
    let text = m.encode();
    assert!(
        !text.contains("lockstep_instance_wal_archive_report{"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l == "lockstep_instance_wal_archive_waiting_seconds 0"),
        "{text}"
    );
}
