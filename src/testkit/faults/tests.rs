//! The fault layer's own tests: crash plans, refusals, stale reads and dropped events.

use super::*;
use http::Method;

fn request(method: Method, path: &str) -> RequestInfo {
    RequestInfo::parse(&method, path, "")
}

const DDB: &str = "/apis/lockstep.dev/v1alpha1/namespaces/ns/distributeddbs";

#[test]
fn the_crash_fires_on_the_answer_to_the_kth_mutating_request_and_nothing_leaves_after() {
    let mut plan = CrashPlan::after(2);
    assert_eq!(plan.admit(false), Admit::Send(None));
    assert_eq!(plan.admit(true), Admit::Send(Some(1)));
    assert!(!plan.answered(1));
    assert_eq!(plan.admit(false), Admit::Send(None));
    assert_eq!(plan.admit(true), Admit::Send(Some(2)));
    // A third mutating request cannot leave, even before the second is answered.
    assert_eq!(plan.admit(true), Admit::Block);
    assert_eq!(plan.admit(false), Admit::Send(None));
    assert!(plan.answered(2), "the crash fires on the 2nd answer");
    assert!(!plan.answered(2), "once");
    assert_eq!(plan.admit(false), Admit::Block);
    assert_eq!(plan.admit(true), Admit::Block);
    assert_eq!(plan.sent(), 2);
}

#[test]
fn a_crash_named_by_what_the_request_does_fires_after_its_nth_occurrence() {
    let faults = Faults::new();
    faults.crash_after_nth(2, |request, _| {
        request.resource == "pods" && request.verb == crate::testkit::Verb::Delete
    });
    let mut state = faults.lock();
    let delete = || request(Method::DELETE, "/api/v1/namespaces/ns/pods/db-2");
    let status = || request(Method::PATCH, &format!("{DDB}/orders/status"));
    assert!(matches!(
        state.admit(delete(), None),
        Admission::Send {
            mutating: Some(1),
            ..
        }
    ));
    assert!(matches!(
        state.admit(status(), None),
        Admission::Send {
            mutating: Some(2),
            ..
        }
    ));
    assert!(matches!(
        state.admit(delete(), None),
        Admission::Send {
            index: 2,
            mutating: Some(3)
        }
    ));
    // The crash is due after request 3: nothing mutating leaves any more.
    assert!(matches!(state.admit(status(), None), Admission::Block));
    assert_eq!(state.answered(0, Some(1), 200), (true, false));
    assert_eq!(state.answered(2, Some(3), 200), (false, true));
    assert!(matches!(
        state.admit(request(Method::GET, "/api/v1/namespaces/ns/pods"), None),
        Admission::Block
    ));
}

#[test]
fn without_a_plan_everything_is_numbered_and_sent() {
    let mut plan = CrashPlan::default();
    let sent: Vec<Admit> = [true, false, true, true].map(|m| plan.admit(m)).into();
    assert_eq!(
        sent,
        [
            Admit::Send(Some(1)),
            Admit::Send(None),
            Admit::Send(Some(2)),
            Admit::Send(Some(3))
        ]
    );
    assert!(!plan.answered(3));
    assert!(!plan.crashed());
}

#[test]
fn the_log_names_created_objects_and_delete_preconditions() {
    let mut state = State::default();
    let body = serde_json::json!({"metadata": {"name": "db-pre-2"}});
    state.admit(
        request(Method::POST, "/apis/batch/v1/namespaces/ns/jobs"),
        Some(&body),
    );
    let body = serde_json::json!({"preconditions": {"uid": "u-1"}});
    state.admit(
        request(Method::DELETE, "/api/v1/namespaces/ns/pods/db-2"),
        Some(&body),
    );
    state.admit(request(Method::GET, "/api/v1/namespaces/ns/pods"), None);
    let log = &state.log;
    assert_eq!(log[0].object.as_deref(), Some("db-pre-2"));
    assert_eq!(log[0].mutating_seq, Some(1));
    assert_eq!(log[1].object.as_deref(), Some("db-2"));
    assert_eq!(log[1].uid_precondition.as_deref(), Some("u-1"));
    assert_eq!(log[1].mutating_seq, Some(2));
    assert_eq!(log[2].mutating_seq, None);
    assert_eq!(state.answered(0, Some(1), 201), (true, false));
    assert!(state.log[0].took_effect());
}

#[test]
fn a_refusal_answers_the_nth_status_write_once_without_numbering_it() {
    let faults = Faults::new();
    faults.refuse_status_write(2, 500);
    let status = format!("{DDB}/orders/status");
    let mut state = faults.lock();
    assert!(matches!(
        state.admit(request(Method::PATCH, &status), None),
        Admission::Send {
            mutating: Some(1),
            ..
        }
    ));
    assert!(matches!(
        state.admit(request(Method::PATCH, &format!("{DDB}/orders")), None),
        Admission::Send {
            mutating: Some(2),
            ..
        }
    ));
    assert!(matches!(
        state.admit(request(Method::PATCH, &status), None),
        Admission::Refuse { code: 500 }
    ));
    assert!(matches!(
        state.admit(request(Method::PATCH, &status), None),
        Admission::Send {
            mutating: Some(3),
            ..
        }
    ));
    assert_eq!(state.log[2].outcome, Outcome::Refused(500));
    assert_eq!(state.injected.len(), 1);
}

fn ddb(rv: u32, step: &str) -> Vec<u8> {
    WatchEvent {
        event_type: "MODIFIED".into(),
        object: serde_json::json!({
            "metadata": {"name": "orders", "namespace": "ns", "resourceVersion": rv.to_string()},
            "status": {"step": step},
        }),
    }
    .to_line()
}

fn rvs(lines: &[Vec<u8>]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| WatchEvent::parse(l))
        .filter_map(|e| e.resource_version().map(str::to_owned))
        .collect()
}

#[test]
fn a_stale_read_replays_an_earlier_version_once_and_schedules_the_heal() {
    let faults = Faults::new();
    faults.stale_read("distributeddbs", 1, Duration::from_secs(2), |_, e| {
        e.object.pointer("/status/step").and_then(Value::as_str) == Some("1/PreHook")
    });
    let watch = RequestInfo::parse(&Method::GET, DDB, "watch=true");
    let mut state = faults.lock();
    let mut heals = Vec::new();
    let mut out = Vec::new();
    for (rv, step) in [
        (1, "2/PreHook"),
        (2, "2/PostHook"),
        (3, "1/PreHook"),
        (4, "1/PreHook"),
    ] {
        out.extend(state.edit_watch_line(&watch, ddb(rv, step), &mut heals));
    }
    assert_eq!(rvs(&out), ["1", "2", "3", "2", "4"]);
    assert_eq!(heals.len(), 1);
    assert_eq!(heals[0].0, Duration::from_secs(2));
    let healed = state.heal(&watch, &heals[0].1).expect("a heal");
    assert_eq!(rvs(&[healed]), ["4"]);
}

#[test]
fn dropped_events_are_not_remembered_and_later_ones_pass() {
    let faults = Faults::new();
    let mut left = 1;
    faults.drop_watch_events(move |_, e| {
        let hit = left > 0 && e.resource_version() == Some("2");
        if hit {
            left -= 1;
        }
        hit
    });
    let watch = RequestInfo::parse(&Method::GET, DDB, "watch=true");
    let mut state = faults.lock();
    let mut heals = Vec::new();
    let mut out = Vec::new();
    for rv in 1..=3 {
        out.extend(state.edit_watch_line(&watch, ddb(rv, "x"), &mut heals));
    }
    assert_eq!(rvs(&out), ["1", "3"]);
    let key = (
        "distributeddbs".to_owned(),
        Some("ns".to_owned()),
        "orders".to_owned(),
    );
    assert_eq!(state.versions[&key].len(), 2);
    assert!(
        matches!(&state.injected[..], [Injected::Dropped { event, .. }] if event == "MODIFIED orders@2")
    );
}
