//! A planned switchover whose old primary was fenced without releasing its last WAL
//! position (its clean stop escalated, or its server crashed mid-stop, and its restarted
//! container released the Lease with none): without `Required` durability nobody knows
//! which standby has every commit it acknowledged, so the switchover goes back to the
//! old primary on its volume, or waits for a person; under `Required` the survey's
//! quorum finds one that has them.

use super::fencing::{hand_overs, identity, synchronous};
use super::upgrades::upgrade_observed;
use super::*;
use crate::machines::postgres::observe::FENCED;
use crate::pod::synchronous::DataDurability;

/// An upgrade's switchover from pg-0 to pg-1 at its Fence step, whose old primary
/// (still seen, labelled demoted) released the Lease without a position.
fn released_without_position() -> (PgState, Observed) {
    let mut o = upgrade_observed(&[1, 2], 0);
    edit(&mut o, 0, |p| p.role = Some(Role::Demoted));
    edit_lease(&mut o, |l| {
        l.released_by = l.holder.take();
        l.released_lsn = None;
    });
    (switching(SwitchStep::Fence, 1, SwitchCause::Upgrade), o)
}

#[test]
fn a_planned_switchover_released_without_a_position_goes_back_to_the_old_primary_on_its_volume() {
    let (state, o) = released_without_position();
    let d = decide(&spec("16.4"), &state, o);
    assert_eq!(d.reason(), BACK_TO_OLD_PRIMARY);
    assert!(
        matches!(target(&d), Some(PgState::PrimaryLost { .. })),
        "{d:?}"
    );
    assert!(hand_overs(&d).is_empty(), "no standby is handed the Lease");
}

#[test]
fn with_the_old_primary_gone_it_waits_degraded_for_a_person_who_may_accept_the_loss() {
    let (state, mut o) = released_without_position();
    o.pods.remove(&0);
    let d = decide(&spec("16.4"), &state, o.clone());
    assert_degraded(&d, WAITING_FOR_RELEASE);
    assert!(hand_overs(&d).is_empty());
    assert_says(
        &d,
        &["without its last WAL position", FENCED, "losing what only"],
    );
    // A person accepts the loss: the standbys are surveyed, the most advanced promoted.
    o.own.requests.fenced = Some(identity(0, V1));
    let d = decide(&spec("16.4"), &state, o);
    assert_eq!(d.reason(), OLD_PRIMARY_FENCED);
}

#[test]
fn under_required_a_planned_switchover_released_without_a_position_surveys_the_standbys() {
    let (state, mut o) = released_without_position();
    o.pods.remove(&0);
    let spec = PostgresClusterSpec {
        version: "16.4".to_owned(),
        ..synchronous(DataDurability::Required)
    };
    let d = decide(&spec, &state, o);
    assert_eq!(d.reason(), OLD_PRIMARY_FENCED);
    assert_says(&d, &["surveyed"]);
}

#[test]
fn with_the_old_primarys_volume_lost_the_standbys_are_surveyed_without_waiting_for_a_person() {
    let (state, mut o) = released_without_position();
    // Recreated on a new, empty volume: its manager reports no database.
    edit(&mut o, 0, |p| p.uid = uid(0, V2));
    o.own.empty.insert(0);
    let d = decide(&spec("16.4"), &state, o);
    assert_eq!(d.reason(), OLD_PRIMARY_FENCED);
    assert_says(&d, &["its volume was lost", "surveyed"]);
}
