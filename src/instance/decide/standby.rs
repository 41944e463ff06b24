//! The standby, and its promotion: a standby labelled primary promotes itself once the
//! Lease names it, it has the position the primary before it released the Lease at, and
//! a renewal of its own was just accepted (Patroni's rule: only the holder of the leader
//! key promotes, and only while it can renew it). Nothing else promotes a server.
//!
//! A standby labelled replica that has not streamed for the stall bound while a writable
//! primary answers upstream cannot follow it as it is (a timeline it cannot follow after
//! a failover, a broken replication connection): it stops cleanly, and its next start
//! rewinds it against that primary. One whose server exits before it ever streamed, on
//! data this process did not just clone, while such a primary answers, cannot follow it
//! on that data (a rewind finds nothing to undo in a timeline switch cut short, and every
//! start refuses the segment it left): it is cloned again, unless re-cloning is off.
//!
//! With a Lease, a standby streams only from the Lease's holder, and only while the
//! holder's tenure lasts on its own clock ([`upstream`]): a primary that lost the Lease
//! while paused or cut off, and resumes, finds no standby still connected to
//! acknowledge what its backends commit as they resume, before its fence stops it
//! (a failover need not wait for it). A replication connection outlives the `-rw` Service moving to another
//! pod, and a frozen server's kernel keeps its connections open.

use super::{AgentDecision, fence, me, renew};
use crate::engine::Decision;
use crate::instance::action::AgentAction;
use crate::instance::machine::AgentSpec;
use crate::instance::observe::{Observation, ReleasedAt, RoleLabel, Server, Upstream};
use crate::instance::state::{AgentState, ExitCode};
use crate::instance::table::reason::{
    CHOSEN, FOLLOWING, HELD_BACK, PROMOTED, PROMOTED_BY_SOMEONE_ELSE, SERVER_EXITED, SIGNALLED,
    STANDBY_UNFOLLOWABLE, STREAM_STALLED, UPSTREAM_MOVED,
};
use crate::pod::Role;

/// The server runs as a standby.
pub(super) fn standby(spec: &AgentSpec, seen: &Observation, signalled: bool) -> AgentDecision {
    let following =
        || Decision::stay(FOLLOWING, "a standby following the primary").requeue(spec.period());
    let standby = match &seen.server {
        Server::Down { .. } if unfollowable(spec, seen) => {
            return Decision::go(
                AgentState::Cloning,
                STANDBY_UNFOLLOWABLE,
                "the standby exited before it streamed while a writable primary answers: its data cannot follow that primary as it is; DISCARDING $PGDATA and cloning the primary again",
            );
        }
        Server::Down { exit } => {
            let status = exit.unwrap_or(1);
            return Decision::go(
                AgentState::Exited {
                    code: ExitCode::ServerExited(status),
                },
                SERVER_EXITED,
                format!("the standby exited with status {status}"),
            );
        }
        Server::Writable { .. } => {
            return fence(
                seen,
                PROMOTED_BY_SOMEONE_ELSE,
                "the standby is writable though this agent asked no promotion (a pg_promote from outside): fencing it".to_owned(),
            );
        }
        _ if signalled => {
            return Decision::go(
                AgentState::Stopping {
                    began: seen.now,
                    primary: false,
                },
                SIGNALLED,
                "asked to stop: stopping the standby cleanly",
            )
            .with_actions([AgentAction::StopClean]);
        }
        Server::Unanswering => return following(),
        Server::Standby(s) => s,
    };
    if let Some(moved) = upstream(spec, seen) {
        let message = match &moved {
            Upstream::Holder(h) => format!("the Lease names {h}: streaming from it"),
            _ => "the Lease names no holder whose tenure lasts: streaming from nobody until one holds it".to_owned(),
        };
        return Decision::stay(UPSTREAM_MOVED, message)
            .with_actions([follow(moved)])
            .requeue(spec.period());
    }
    if seen.role != RoleLabel::Is(Role::Primary) {
        return match stalled_for(spec, seen) {
            Some(stalled) => Decision::go(
                AgentState::Stopping {
                    began: seen.now,
                    primary: false,
                },
                STREAM_STALLED,
                format!(
                    "the standby has not streamed for {}s while a writable primary answers: stopping cleanly, so that the restart rewinds it and rejoins",
                    stalled.as_secs()
                ),
            )
            .with_actions([AgentAction::StopClean]),
            None => following(),
        };
    }
    let chosen = |message: &str| {
        Decision::go(AgentState::Promoting, CHOSEN, message.to_owned())
            .with_actions(renew(spec, false))
            .with_actions([AgentAction::Promote])
    };
    let Some(_) = &spec.lease else {
        return chosen("labelled primary (no Lease): promoting");
    };
    let Some(lease) = seen.lease.seen().filter(|l| l.names(me(spec))) else {
        return following();
    };
    match &lease.released_at {
        Some(ReleasedAt::Invalid(value)) => Decision::stay(
            HELD_BACK,
            format!(
                "chosen, but the Lease's lockstep.dev/released-lsn {value:?} is not an LSN: not promoting (remove the annotation to promote)"
            ),
        )
        .requeue(spec.period()),
        Some(ReleasedAt::Lsn(lsn)) if !standby.has(*lsn) => Decision::stay(
            HELD_BACK,
            format!(
                "chosen, but not promoting before this standby has received up to {lsn}, the last WAL of the primary that stopped cleanly before it (the operator surveys the members and promotes the most advanced; only once its status names that way out, removing the Lease's lockstep.dev/released-lsn annotation promotes the standby it chose without them)"
            ),
        )
        .requeue(spec.period()),
        _ => chosen("labelled primary and holding the Lease: renewed, then promoting"),
    }
}

/// Start the server as a standby, streaming from whom [`upstream`] says from the start
/// (a start on the `-rw` Service, then a move to the holder, would restart the WAL
/// receiver at once, and one restarting as the primary stops cleanly misses its last
/// WAL).
pub(super) fn start_standby(spec: &AgentSpec, seen: &Observation) -> Vec<AgentAction> {
    upstream(spec, seen)
        .map(follow)
        .into_iter()
        .chain([AgentAction::StartStandby])
        .collect()
}

/// The action that points the WAL receiver at `upstream`.
fn follow(upstream: Upstream) -> AgentAction {
    AgentAction::Follow {
        holder: match upstream {
            Upstream::Holder(h) => Some(h),
            _ => None,
        },
    }
}

/// Whom the standby should stream from, if not from whom it does: with a Lease, its
/// holder while the holder's tenure lasts on this agent's clock (the Lease's
/// `renewTime + L` as read), and nobody once it ran out or while the Lease names nobody.
/// While the Lease is unreadable, the tenure last read still bounds it: a holder cut off
/// with this standby (a deposed primary whose pod the operator no longer reaches) gets
/// no acknowledgement from it once that tenure ran out, and one that never read the
/// Lease streams from nobody rather than the `-rw` Service. `None`: no change (no Lease:
/// the `-rw` Service; the Lease naming this pod, which promotes next: as it was).
pub(super) fn upstream(spec: &AgentSpec, seen: &Observation) -> Option<Upstream> {
    spec.lease.as_ref()?;
    let Some(lease) = seen.lease.seen() else {
        let lasts = match &seen.upstream {
            Upstream::Holder(h) => seen
                .tenure
                .as_ref()
                .is_some_and(|t| t.holder == *h && seen.now < t.until),
            // The `-rw` Service, which it starts on: no tenure vouches for the pod it
            // selects (the operator may not have relabelled a deposed primary yet).
            Upstream::Service => false,
            Upstream::Nobody => true,
        };
        return (!lasts).then_some(Upstream::Nobody);
    };
    if lease.names(me(spec)) {
        // Chosen: it promotes next, or waits for its label.
        return None;
    }
    let want = match (&lease.holder, lease.holder_until) {
        (Some(h), Some(until)) if seen.now < until => Upstream::Holder(h.clone()),
        _ => Upstream::Nobody,
    };
    (want != seen.upstream).then_some(want)
}

/// Whether a standby whose server is down cannot follow the primary on its data as it
/// is: labelled replica or demoted (never one chosen to promote), it never streamed since
/// it started, on data this process did not clone a moment ago (which a clone would not
/// mend), while a writable primary answers to clone from, and re-cloning is on.
fn unfollowable(spec: &AgentSpec, seen: &Observation) -> bool {
    matches!(seen.role, RoleLabel::Is(Role::Replica | Role::Demoted))
        && !seen.streamed
        && !seen.cloned
        && seen.upstream_writable
        && spec.reclone_on_rewind_failure
}

/// How long the standby has gone without streaming, once that is at least the stall
/// bound while a writable primary answers upstream; `None` otherwise.
fn stalled_for(spec: &AgentSpec, seen: &Observation) -> Option<std::time::Duration> {
    let stalled = seen.now.since(seen.not_streaming_since?);
    (seen.upstream_writable && stalled >= spec.standby_stall).then_some(stalled)
}

/// Asked to promote: once writable, the server is the primary. (Until then it is
/// guarded as a writable server, renewing and asking again every round:
/// [`super::guard`].)
pub(super) fn promoted(seen: &Observation) -> Option<AgentDecision> {
    matches!(seen.server, Server::Writable { .. }).then(|| {
        Decision::go(
            AgentState::Primary,
            PROMOTED,
            "the promotion finished: serving as the primary",
        )
    })
}
