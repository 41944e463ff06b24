//! `decide`, one situation at a time: each test reads as the sentence it proves.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use lockstep::engine::{Decision, Health, Wait, World};

use crate::actions::CanaryAction;
use crate::api::{CanaryAppSpec, CanaryPolicy, Template};
use crate::decide::decide;
use crate::observe::{Observed, PodView, SetView};
use crate::render::Track;
use crate::state::{CanaryState, CanaryStep};
use crate::table::reason::*;

fn template(image: &str) -> Template {
    Template {
        image: image.to_owned(),
        labels: BTreeMap::new(),
    }
}

fn spec(image: &str) -> CanaryAppSpec {
    CanaryAppSpec {
        replicas: 2,
        template: template(image),
        canary: CanaryPolicy {
            ready_within_seconds: 300,
            bake_seconds: 60,
        },
    }
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap()
}

/// The world `observed`, `in_state` seconds after the state was entered.
fn world(observed: Observed, in_state: i64) -> World<Observed> {
    World {
        observed,
        deleting: false,
        now: t0() + chrono::Duration::seconds(in_state),
        entered_at: t0(),
        acks: BTreeMap::new(),
        entered_by: String::new(),
    }
}

fn set(image: &str, replicas: i32, uid: &str) -> Option<SetView> {
    Some(SetView {
        uid: uid.to_owned(),
        template: template(image),
        replicas,
    })
}

fn pod(track: Track, image: &str, ready: bool) -> PodView {
    PodView {
        track,
        revision: template(image).revision(),
        ready,
        terminating: false,
    }
}

/// Two stable pods Ready at `image`, and the Service.
fn serving(image: &str) -> Observed {
    Observed {
        stable: set(image, 2, "s1"),
        canary: None,
        pods: vec![
            pod(Track::Stable, image, true),
            pod(Track::Stable, image, true),
        ],
        service: true,
    }
}

/// `serving("app:1")` with a canary of `image`, its pod Ready or not.
fn with_canary(image: &str, ready: bool) -> Observed {
    let mut o = serving("app:1");
    o.canary = set(image, 1, "c1");
    o.pods.push(pod(Track::Canary, image, ready));
    o
}

fn stable(image: &str) -> CanaryState {
    CanaryState::Stable {
        stable: template(image),
        rejected: None,
    }
}

fn canary(step: CanaryStep) -> CanaryState {
    CanaryState::Canary {
        stable: template("app:1"),
        candidate: template("app:2"),
        step,
    }
}

fn goes(d: &Decision<CanaryState, CanaryAction>) -> (&CanaryState, &'static str) {
    match d {
        Decision::Go { to, reason, .. } => (to, reason),
        stay => panic!("expected a transition, got {stay:?}"),
    }
}

#[test]
fn a_new_app_creates_its_stable_set_and_its_service() {
    let d = decide(
        &spec("app:1"),
        &CanaryState::Creating,
        &world(Observed::default(), 0),
    );
    assert_eq!(d.reason(), DEPLOYING);
    let create = CanaryAction::CreateStable {
        template: template("app:1"),
        replicas: 2,
    };
    assert_eq!(d.actions(), [create, CanaryAction::ApplyService]);
}

#[test]
fn the_first_rollout_is_stable_once_every_pod_is_ready() {
    let d = decide(
        &spec("app:1"),
        &CanaryState::Creating,
        &world(serving("app:1"), 5),
    );
    assert_eq!(goes(&d), (&stable("app:1"), DEPLOYED));
}

#[test]
fn an_app_at_rest_sends_nothing() {
    let d = decide(
        &spec("app:1"),
        &stable("app:1"),
        &world(serving("app:1"), 999),
    );
    assert_eq!(d.reason(), SERVING);
    assert!(d.actions().is_empty());
}

#[test]
fn a_changed_template_starts_a_canary_of_one_pod_and_no_stable_pod_changes() {
    let d = decide(
        &spec("app:2"),
        &stable("app:1"),
        &world(serving("app:1"), 0),
    );
    assert_eq!(goes(&d), (&canary(CanaryStep::Starting), CANARY_STARTED));
    let start = CanaryAction::ApplyCanary {
        template: template("app:2"),
    };
    assert_eq!(d.actions(), [start]);
}

#[test]
fn a_ready_canary_pod_starts_the_bake() {
    let d = decide(
        &spec("app:2"),
        &canary(CanaryStep::Starting),
        &world(with_canary("app:2", true), 10),
    );
    assert_eq!(goes(&d), (&canary(CanaryStep::Baking), CANARY_READY));
}

#[test]
fn only_a_pod_of_the_candidates_revision_counts_for_the_canary() {
    let d = decide(
        &spec("app:2"),
        &canary(CanaryStep::Starting),
        &world(with_canary("app:9", true), 10),
    );
    assert_eq!(d.reason(), CANARY_STARTING);
}

#[test]
fn a_canary_not_ready_in_time_is_rolled_back_and_its_revision_rejected() {
    let d = decide(
        &spec("app:2"),
        &canary(CanaryStep::Starting),
        &world(with_canary("app:2", false), 300),
    );
    let rolling_back = CanaryState::RollingBack {
        stable: template("app:1"),
        rejected: template("app:2").revision(),
    };
    assert_eq!(goes(&d), (&rolling_back, CANARY_FAILED));
    let delete = CanaryAction::DeleteCanary { uid: "c1".into() };
    assert_eq!(d.actions(), [delete]);
}

#[test]
fn a_starting_canary_looks_again_when_its_time_is_up() {
    let d = decide(
        &spec("app:2"),
        &canary(CanaryStep::Starting),
        &world(with_canary("app:2", false), 100),
    );
    assert!(
        matches!(d, Decision::Stay { wait: Wait::Requeue(after), .. } if after == Duration::from_secs(200))
    );
}

#[test]
fn a_canary_that_stops_being_ready_while_baking_is_rolled_back() {
    let d = decide(
        &spec("app:2"),
        &canary(CanaryStep::Baking),
        &world(with_canary("app:2", false), 30),
    );
    assert_eq!(goes(&d).1, CANARY_FAILED);
}

#[test]
fn a_baked_canary_is_promoted_to_every_stable_pod() {
    let d = decide(
        &spec("app:2"),
        &canary(CanaryStep::Baking),
        &world(with_canary("app:2", true), 60),
    );
    let promoting = CanaryState::Promoting {
        target: template("app:2"),
    };
    assert_eq!(goes(&d), (&promoting, CANARY_PASSED));
    let roll = CanaryAction::ApplyStable {
        template: template("app:2"),
        replicas: 2,
    };
    assert_eq!(d.actions(), [roll]);
}

#[test]
fn a_promotion_ends_when_every_stable_pod_is_ready_at_the_target_and_removes_the_canary() {
    let mut o = serving("app:2");
    o.canary = set("app:2", 1, "c1");
    let promoting = CanaryState::Promoting {
        target: template("app:2"),
    };
    let d = decide(&spec("app:2"), &promoting, &world(o, 20));
    assert_eq!(goes(&d), (&stable("app:2"), PROMOTED));
    assert_eq!(
        d.actions(),
        [CanaryAction::DeleteCanary { uid: "c1".into() }]
    );
}

#[test]
fn a_rollback_rests_with_the_revision_rejected_once_the_canary_is_gone() {
    let rejected = template("app:2").revision();
    let rolling_back = CanaryState::RollingBack {
        stable: template("app:1"),
        rejected: rejected.clone(),
    };
    let d = decide(&spec("app:2"), &rolling_back, &world(serving("app:1"), 3));
    let at_rest = CanaryState::Stable {
        stable: template("app:1"),
        rejected: Some(rejected),
    };
    assert_eq!(goes(&d), (&at_rest, ROLLED_BACK));
}

#[test]
fn a_rejected_template_is_not_tried_again_and_the_app_says_so() {
    let state = CanaryState::Stable {
        stable: template("app:1"),
        rejected: Some(template("app:2").revision()),
    };
    let d = decide(&spec("app:2"), &state, &world(serving("app:1"), 999));
    assert!(matches!(
        d,
        Decision::Stay {
            reason: CANDIDATE_REJECTED,
            health: Health::Degraded,
            ..
        }
    ));
    assert!(d.actions().is_empty());
}

#[test]
fn a_template_changed_during_a_canary_drops_it_without_a_verdict() {
    let d = decide(
        &spec("app:3"),
        &canary(CanaryStep::Baking),
        &world(with_canary("app:2", true), 30),
    );
    assert_eq!(goes(&d), (&stable("app:1"), CANARY_SUPERSEDED));
}

#[test]
fn a_deleted_app_is_released_at_once() {
    let mut w = world(serving("app:1"), 0);
    w.deleting = true;
    let d = decide(&spec("app:1"), &stable("app:1"), &w);
    assert_eq!(goes(&d), (&CanaryState::Deleted, DELETE_REQUESTED));
}
