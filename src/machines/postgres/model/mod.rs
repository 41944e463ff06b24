//! The PostgresCluster world model for the engine's model-checking harness
//! ([`crate::engine::check`]).
//!
//! The world is the StatefulSet and its pods (with their role labels), the PostgreSQL
//! timeline (which ordinal's data is the writable primary), the Jobs (surveys and
//! backups run when the environment says so), the CronJob and the simple owned objects.
//! The environment recreates, readies, unreadies and evicts pods, runs each pod's agent
//! (a Ready standby labelled primary that holds the Lease promotes itself, and each
//! agent reports on its pod what its server is, as `instance::observe::report_of` says),
//! finishes Jobs, drifts objects, and the user edits
//! the version, the replica count and the schedule, requests backups and sets the
//! skip-final-backup annotation.
//!
//! # Invariants checked after every event
//! 1. At most one pod is labelled `primary`.
//! 2. A pod labelled `primary` holds the writable timeline (`-rw` never routes to a
//!    standby), except while the object is being deleted.
//! 3. No pod labelled `replica` is writable (`-ro` never routes to a primary): a pod
//!    that started labelled `primary` or was promoted runs as a primary until it is
//!    deleted, and meanwhile is labelled `primary` or `demoted`, except while the object
//!    is being deleted.
//! 4. A running standby is promoted only while Ready: its agent promotes it only while
//!    the server accepts connections (what the readiness probe measures), and the
//!    machine labels a target `primary` only once it *observes* it Ready (unit-tested).
//! 5. The serving primary is never deleted for an upgrade while it has replicas.
//! 6. Replicas are upgraded before the primary: within one upgrade round (one template
//!    image), the pod that was primary when the round began is deleted for the upgrade
//!    only once every other pod runs the round's image (unless a failover took its role
//!    away in between).
//! 7. No pod is deleted twice for one upgrade round, nor twice for one change of a
//!    restart-only parameter (a rolling restart is an upgrade to the same image).
//! 8. The finalizer is released (state `Finalized`) only after a final backup Job
//!    succeeded, or with the skip annotation, or without a backup destination.
//! 9. No on-demand backup Job key is created twice: one `backup-now` token runs at most
//!    one backup, even when finished backup Jobs are deleted by someone else (a TTL
//!    controller, a cleanup) before or after the operator read their outcome.
//!
//! 10. **At most one writable server** at any instant (a server is writable from its
//!     start as a primary holding the Lease, or its promotion request, until it is down:
//!     a stop, clean or immediate, counts as writable until it finishes).
//! 11. The Lease changes holder only while its old holder runs no writable server (a
//!     writable holder renews, also while a clean stop runs, so only its release, its
//!     pod's end, a person, or - cut off from the API server - its own fence (down by
//!     `T` after its last accepted renewal began, before `renewTime + L + S` on the
//!     operator's clock) can end its tenure).
//! 12. **A promotion takes the most advanced available replica**: no other Ready
//!     standby (besides the old primary) holds more of the writable history than the
//!     one promoted, in a failover (the survey) and in a planned switchover (a clean
//!     stop of the old primary sends every Ready standby all it wrote). What a member
//!     holds is measured on timelines ([`history`]): WAL it received past a fork the
//!     writable history left counts for nothing, however high its LSN. One exception: a
//!     member that had missed every survey a failover may ask when the Lease was handed
//!     (the operator's last read; answering only after it changes nothing).
//! 13. **A planned switchover loses no acknowledged write**: no promotion falls short
//!     of the position a primary that stopped cleanly on demotion released the Lease at
//!     (the agent's gate; only a person removing that position from the Lease, the
//!     settling world's escape hatch, accepts a loss).
//! 14. **With `spec.synchronous` `Required`, no promotion loses an acknowledged
//!     commit**: none falls short of the furthest commit that `number` standbys (any of
//!     them, or the first connected by ordinal, as `method` says) had received from the
//!     writable server of its time (what the client was told), in a failover too,
//!     whatever pods are down, evicted or force-deleted meanwhile (the survey must read
//!     `others - number + 1` of the other members: `synchronous::survey_quorum`).
//!     `Preferred` promises no acknowledgement (it turns asynchronous when too few
//!     standbys stream), so its worlds check the other invariants only.
//! 15. **No empty database in place of the cluster's**: once a server accepted writes,
//!     no pod bootstraps (`initdb`) a new one, even when the primary's pod and volume are
//!     lost ([`Move::VolumeLost`]) and the operator hands the Lease to its empty
//!     successor (the agent's guard: the Lease's `lockstep.dev/initialized` mark; only
//!     a person removing it, the settling world's way out when no member within the
//!     replicas has the data, accepts the loss). The planted agent blind to the mark is
//!     found in `agent_planted.rs`.
//! 16. **A release never lowers the released position** on the Lease (the high-water
//!     mark of `lockstep.dev/released-lsn`): a release without a position keeps the one
//!     there, one with a lower position keeps the higher. The position goes away only
//!     when a writable holder that moved past it renews, a promotion reaches it, the
//!     operator waives it, a person removes it, or the Lease is deleted. Checked at each
//!     release the agents make (the manager's own rule, `observe::released_position`).
//!
//! Fencing in this world: the primary Lease (holder, renewal, release, edits by hand),
//! and each pod's agent, which is the instance manager's own `decide`
//! ([`crate::instance`], driven by [`agent`]; nothing here re-implements it): it takes a
//! round every `R` on the true time (sooner when its decision asks), and whenever
//! [`Move::AgentTick`] says, and its steps are not atomic where reality is not (a stop
//! runs until [`Move::ServerStops`], a promotion until [`Move::PromotionEnds`], a write
//! to the API server can fail, a renewal can be slower than `R`, the whole pod can
//! pause). Failed primaries whose pods linger Terminating while their server may still
//! run ([`Move::Terminated`] ends them), commits and replication ([`Move::Write`],
//! [`Move::Replicate`]) so that standbys stand at different WAL positions, on the
//! timelines each promotion forks (a standby past a fork cannot follow: its stream
//! breaks; [`history`]), a standby
//! whose stream breaks for good ([`Move::StreamBreaks`]: it receives and acknowledges
//! nothing until its agent, once the stall bound has passed with a writable primary
//! answering, stops it and its restart rewinds it), and the standbys' agents answering
//! the failover's survey at their rounds through the real `answers::answer` (a pod may
//! never answer a survey: [`Move::AnswerLost`]; the real machine surveys again, and
//! skips such a member only after `SURVEYS_FOR_EVERY_MEMBER` surveys missed it). Lost status is the world's initial state (a running
//! cluster, the machine in `Creating`), with the primary moved in a scenario.
//!
//! Partitions and clocks: the world keeps the true time (the operator's clock, told by
//! the harness: [`WorldModel::clock`]). A pod can be cut off from the API server
//! ([`Move::Partition`]): alive, its server writable or not and replicating, its agent
//! unable to read or renew the Lease or read a new label. The Lease keeps the
//! `renewTime` of its last accepted renewal, written by the pod's clock, which runs
//! `skew` seconds from the operator's ([`Move::ClockSkew`]: `-S`, `0` or `+S`, `S` =
//! `spec.fencing.clockSkewSeconds`, or `±2S`, beyond the bound; the operator sees each
//! renewal as it is written, the earliest a real one may, and a person brings a clock
//! beyond `S` back within it once faults stop). A cut-off agent fences its server (an immediate
//! stop at `T - G`, a kill at `T` after its last accepted renewal began); [`Move::Heal`]
//! ends the cut. The model's `S` (10 s) exceeds the slack `L - T` (8 s at the default
//! `L` = 15 s), so that an operator leaving `S` out of its expiry is unsafe here, and is
//! the most the CRD allows with that `L` (`L >= S + 5`: with `S` near `L`, a standby,
//! which follows the holder only while `renewTime + L` lasts on its own clock, stops
//! streaming at the full skew; found at `S` = 30 s, a planned switchover's target had
//! received nothing). A
//! standby cut off from the API server is never promoted: only its own agent promotes
//! it, right after a renewal it could not make. A `pg_promote()` from outside
//! ([`Move::PromotedByHand`]) is taken as one move with its agent's fence. Not modelled:
//! a pod whose clock runs at a different rate (the agent counts `T` on a monotonic
//! clock).
//!
//! Fencing, the operator's side (`docs/decisions/0002-zero-loss.md`): the user changes `spec.fencing.leaseDurationSeconds`
//! ([`Edit::LeaseSeconds`]; each pod's agent keeps the `L` it was created with and
//! publishes it in the Lease at every renewal); a pod is force-deleted while its node is
//! partitioned ([`Move::ForceDeleted`]: the object goes, its container runs on, cut off,
//! its agent deciding as any other's); the Lease is deleted ([`Move::LeaseDeleted`]); a
//! paused pod stays as Ready as it was, and the operator must take a primary that stops
//! renewing for lost. The settling world's person also sets `lockstep.dev/fenced` for a
//! holder whose server is certainly down.
//!
//! Planted bugs the check must find ([`planted`]): a failover or switchover that hands
//! the Lease over before the old primary is fenced, a failover that chooses by ordinal,
//! and an operator that expires the Lease at `renewTime + L`, leaving the clock skew out
//! (found by its scenario: a partitioned holder whose clock runs `S` behind). And the
//! agent's ([`agent_planted`]): the old bash agent's clean stop, which renews nothing
//! while it runs (a switchover could lose its tail), found in a slow switchover against the old operator, which
//! hands a planned switchover over by expiry, and shrunk (each side's fix alone passes).
//! The operator's side of a lowered `L` and a vanished pod ([`planted`]): an expiry counting the spec's
//! `L` alone, and a vanished pod taken for fenced. And synchronous replication's: a
//! failover that promotes without reading the quorum (invariant 14), found where the
//! standby that acknowledged the last commit is NotReady as the primary fails. And
//! timelines' ([`planted_timelines`]): a failover that compares the answers' LSNs
//! without their timelines, found in a second failover where a standby kept the first
//! one's lost writes. And the in-place restore's ([`planted_restore`]): a restore that
//! replaces the volumes once no pod is left, without waiting for the Lease holder's
//! fence, found with a force-deleted primary still writing on a partitioned node. And
//! `Required` durability's ([`planted_required`]): a failover that weighs only the
//! answers of Ready members, found by generated runs of a world focused on failovers
//! ([`focused`]) where the standby that alone acknowledged the last commits fails its
//! readiness probe while it streams and answers ([`Move::ProbeBlocked`]). And the
//! recreated Lease's ([`planted_lease`]): a Lease recreated with the spec's `L`. And
//! the synchronous terms' ([`planted_terms`]): a failover whose quorum follows the spec
//! of the moment, not the terms the commits were acknowledged under, found by generated
//! runs of a world focused on changes of those terms (each server runs the terms its
//! manager last read, [`Pod::sync_runs`], and a primary acknowledges under its own).
//!
//! Worlds with `spec.synchronous` are a third of the generated ones with two members
//! or more: `Any` or `First`, `Required` or `Preferred`, `number` 1 (or 2 with three
//! members); an edit to `number` members or fewer is refused as the API server refuses
//! it. The focused worlds also edit `number` and `dataDurability` ([`Edit::Synchronous`]).
//!
//! The in-place restore ([`restore`]): a person sets `spec.restore` to a new token
//! ([`Move::RequestRestore`]) whose target is a position of the writable history; the
//! StatefulSet controller makes each pod's claim with it, the operator deletes claims
//! and the Lease on their UIDs, and a manager that bootstraps with the restore
//! annotation forks a new timeline at the target. Its invariants are in [`restore`].
//!
//! Every edge of the agent's table is taken: by generated runs, or by the stories of
//! `agent::stories` (asserted in `scenarios`), except the one `agent::UNIT_TESTED_ONLY`
//! names, with why.
//!
//! Bounded liveness (convergence to `Ready` at the spec with every pod Ready and labelled,
//! then a quiet reconcile) is checked by the harness itself.

mod agent;
mod agent_planted;
mod environment;
mod focused;
mod hibernation;
mod history;
mod jobs;
mod moves;
mod observed;
mod planted;
mod planted_lease;
mod planted_required;
mod planted_restore;
mod planted_terms;
mod planted_timelines;
mod pods;
mod regressions;
mod restore;
mod scenarios;
mod servers;
mod settle;
mod world;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use chrono::{DateTime, Utc};
use proptest::prelude::*;

use super::actions::{DeleteCause, JobAction, LsnGate, PgAction, Role, ServiceKind};
use super::api::{BackupSpec, PostgresClusterSpec};
use super::instances::{Reported, ServerRole};
use super::machine::Postgres;
use super::observe::{
    CronJobView, InSync, LeaseView, Observed, Own, PgRequests, Requests, StatefulSetView,
};
use super::state::{PgState, SwitchCause};
use crate::engine::Machine;
use crate::engine::check::{
    CheckConfig, Event, Reconcile, Scenario, WorldModel, assert_every_edge_taken, check_machine,
};
use crate::instance::observe::Upstream;
use crate::instance::observe::answer;
use crate::instance::observe::report_of;
use crate::instance::{AgentState, Finished};
use crate::machines::common::backup::BackupKind;
use crate::machines::common::jobs::{Hold, JobOutcome, JobView, Purpose};
use crate::machines::common::testing::{self, epoch};
use crate::pod::answers::Answer;
use crate::pod::applied::SettingsReport;
use crate::pod::synchronous::{DataDurability, SyncMethod, SynchronousSpec};
use agent::{AgentDecide, AnswerGate, REAL_AGENT, REAL_GATE, Srv, Vol};
use history::{Pos, Timelines};
use jobs::{Job, JobKind};
pub(super) use moves::{Edit, Move, Runs};

const VERSIONS: [&str; 3] = ["16.1", "16.2", "16.3"];
const MAX_PODS: i32 = 3;
const SCHEDULES: [Option<&str>; 3] = [None, Some("0 3 * * *"), Some("30 4 * * *")];
/// `L`: `spec.fencing.leaseDurationSeconds` (the default); [`Edit::LeaseSeconds`]
/// moves it between this and [`LONG_LEASE_SECONDS`].
const LEASE_SECONDS: i64 = 15;
/// A longer `L` a user may set (and lower again, which must never shorten a wait).
const LONG_LEASE_SECONDS: i64 = 120;
/// `S`: `spec.fencing.clockSkewSeconds`. Larger than the default so that it exceeds
/// the slack `L - (T + R + 1)` = 5 s of the default `L`: an operator that leaves `S`
/// out of its expiry is then unsafe, and the check must find it.
const SKEW_SECONDS: i64 = 10;
/// `T` of a pod created with lease duration `l`: a holder that has not renewed for
/// this long fences itself (`FencingSpec::fence_seconds`).
fn fence_seconds(l: i64) -> i64 {
    l / 2
}
/// The key in [`World::pods`] of a pod force-deleted while its node is partitioned
/// ([`Move::ForceDeleted`]) is `GONE + ordinal`: its object is gone (the operator does
/// not see it, and the StatefulSet controller makes a new pod at the ordinal), its
/// container runs on, cut off, its agent deciding as any other's until its own fence
/// stops its server and it exits (or its node answers again and the kubelet kills it:
/// the settling world).
const GONE: i32 = 100;

/// The ordinal of the pod at `key` in [`World::pods`] (a force-deleted one's too).
fn ordinal(key: i32) -> i32 {
    key % GONE
}
/// `R`: how often the agent looks (and renews).
const RENEW_SECONDS: i64 = crate::machines::postgres::api::FencingSpec::RENEW_SECONDS;
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pod {
    uid: u64,
    image: String,
    ready: bool,
    /// Its readiness probe fails from outside while its server runs and answers its own
    /// manager ([`Move::ProbeBlocked`]: its port blocked, as in the real-node
    /// reproduction of a failover that promoted below the furthest member): it is not
    /// Ready, yet it streams, acknowledges commits and answers surveys.
    probe_blocked: bool,
    role: Option<Role>,
    /// Its current role label was set while it was not Ready: the operator asked a pod
    /// it could not see serving to take the primary role. (A pod labelled while Ready
    /// whose readiness fails before its agent promotes it is no decision of the
    /// operator's: found by the deep model check, a probe failing between the label and
    /// the agent's next round.)
    labelled_unready: bool,
    /// It runs as a writable primary: it started labelled `primary` while holding the
    /// Lease (its agent, `lockstep instance`, waits for the Lease) or
    /// was promoted. It stays one until the pod is deleted or its agent fences it (it
    /// sees its label or the Lease name it no longer: [`Move::AgentTick`]; or its Lease
    /// lapsed unrenewed).
    writable: bool,
    /// Labelled `primary` while it waited for its first label: it starts writable once
    /// it holds the Lease.
    starts_primary: bool,
    /// Deleted but lingering (a failed primary on an unreachable node): its server may
    /// still run until [`Move::Terminated`].
    terminating: bool,
    /// Cut off from the API server ([`Move::Partition`]) since this instant (true time;
    /// for a writable Lease holder, when its last successful renewal began). It cannot
    /// renew, nor read the Lease or its label: a writable server stays writable and
    /// replicating until its agent fences it once `T` has passed on its own (monotonic)
    /// clock, at the latest by `T + R + 1` ([`World::clock_to`]); a standby is not
    /// promoted.
    cut: Option<DateTime<Utc>>,
    /// Its agent: the instance manager's own machine ([`crate::instance`]).
    agent: AgentState,
    /// Its server.
    server: Srv,
    /// When (true time) the last renewal by this container's agent that the API server
    /// accepted began.
    renewed: Option<DateTime<Utc>>,
    /// The long-running action of its agent that finished since the agent's last round.
    finished: Option<Finished>,
    /// When its agent's next round is due (true time).
    next_round: DateTime<Utc>,
    /// The role label as its agent last read it (a pod cut off reads no new one).
    role_seen: Option<Role>,
    /// The whole pod is paused ([`Move::Pause`]).
    paused: bool,
    /// The lease duration `L` the pod was created with (its environment,
    /// `LOCKSTEP_LEASE_SECONDS`): its agent runs with it, `T` = `L / 2`, whatever the
    /// spec says later (pods are `OnDelete`).
    lease_seconds: i64,
    /// Its agent's next write to the API server fails ([`Move::RefuseNext`]).
    refuse_next: bool,
    /// Its agent's next accepted renewal is slow ([`Move::SlowRenewal`]).
    slow_next: bool,
    /// Its agent's next long-running action fails ([`Move::TaskFails`]).
    fail_task: bool,
    /// A person set its role label to something that is no role ([`Move::LabelGarbled`];
    /// the operator's view is left as it was).
    garbled: bool,
    /// Its standby's WAL receiver stopped streaming at this instant (true time;
    /// [`Move::StreamBreaks`]): it receives nothing until its server starts again.
    stream_broken: Option<DateTime<Utc>>,
    /// Its standby's server was seen streaming by its agent since it last started.
    streamed: bool,
    /// This container's agent cloned its volume.
    cloned: bool,
    /// The holder's tenure from the last Lease this container's agent read.
    tenure: Option<crate::instance::Tenure>,
    /// The [`World::restart_settings`] its server last started with.
    settings_started: u32,
    /// The [`World::restart_settings`] its manager last read and reported on
    /// ([`Move::SettingsRead`]; at its server's start it reads the current ones).
    settings_judged: u32,
    /// The synchronous terms its server runs (`spec.synchronous` and how many members
    /// they name), as its manager last read them ([`Move::SettingsRead`], or at its
    /// server's start); `None`: the world's own, until an edit changes them.
    sync_runs: Option<Runs>,
    /// Whether its volume holds a database, as its manager last reported it on the pod
    /// (each round, before it decides; a pod cut off writes nothing): `None` before its
    /// first report ([`crate::pod::volume`]).
    data_reported: Option<bool>,
    /// What its manager last reported of its server on the pod
    /// ([`crate::machines::postgres::instances`]): `None` before its first report.
    server_reported: Option<ServerRole>,
    /// What its manager last answered to a survey, on the pod
    /// ([`crate::pod::answers`]); kept across container restarts.
    answer: Option<Answer>,
    /// The survey token this container's manager answered (or, its answer lost, never
    /// will): each is answered once.
    answered: Option<String>,
    /// Whom its standby's configuration streams from ([`AgentAction::Follow`]).
    upstream: Upstream,
    /// The uid of the server its WAL receiver is connected to: set as it streams, and
    /// kept while that server is paused (a frozen server's kernel keeps the connection
    /// open) until either server stops or its upstream changes.
    connected_to: Option<u64>,
    /// The in-place restore annotation the operator wrote on it (its value).
    restore: Option<String>,
    /// Since when its WAL volume hangs ([`Move::WalHangs`]): its server's commits all
    /// wait, and its manager reads the flush position standing still while it writes.
    wal_hung: Option<DateTime<Utc>>,
}

impl Pod {
    /// A pod the StatefulSet controller just made: no label, its agent starting.
    fn new(uid: u64, image: String, now: DateTime<Utc>, lease_seconds: i64) -> Pod {
        Pod {
            uid,
            image,
            ready: false,
            probe_blocked: false,
            role: None,
            labelled_unready: false,
            writable: false,
            starts_primary: false,
            terminating: false,
            cut: None,
            agent: AgentState::Starting,
            server: Srv::Down,
            renewed: None,
            finished: None,
            next_round: now,
            role_seen: None,
            paused: false,
            lease_seconds,
            refuse_next: false,
            slow_next: false,
            fail_task: false,
            stream_broken: None,
            streamed: false,
            cloned: false,
            tenure: None,
            garbled: false,
            settings_started: 0,
            settings_judged: 0,
            sync_runs: None,
            data_reported: None,
            server_reported: None,
            answer: None,
            answered: None,
            upstream: Upstream::Service,
            connected_to: None,
            restore: None,
            wal_hung: None,
        }
    }
}

/// The primary Lease. Its holder renews it while it runs a writable server (then it never
/// looks expired); a holder that is not writable (a standby handed the Lease, a pod
/// recreated since) never renews, so the Lease expires `L + S` after the hand-over.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ModelLease {
    /// `(ordinal, uid)` of the holder.
    holder: Option<(i32, u64)>,
    renewed: DateTime<Utc>,
    /// When the operator saw `renewed` written, on its clock: at once (its watch is
    /// the model's own world), the earliest a real operator may see it.
    seen: DateTime<Utc>,
    released_by: Option<(i32, u64)>,
    /// The WAL position a primary stopped cleanly at on demotion (the annotation
    /// `lockstep.dev/released-lsn`): nobody promotes before receiving it. Kept by the
    /// operator's hand-overs; dropped by the next primary once writable.
    released_lsn: Option<u64>,
    transitions: i32,
    version: u64,
    /// `spec.leaseDurationSeconds` as written: the spec's at a creation or hand-over,
    /// the holder's own `L` at each of its renewals.
    duration: i64,
    /// The annotation `lockstep.dev/initialized`: added by a holder's renewal made with
    /// data, kept by the operator's hand-overs (a merge patch), gone with the Lease.
    initialized: bool,
    /// The annotation `lockstep.dev/survey`: the token of the survey the operator asks
    /// the standbys to answer; kept by hand-overs (a merge patch).
    survey: Option<String>,
    /// The annotation `lockstep.dev/never-held`: created before anything of the cluster
    /// existed; every hand-over removes it.
    never_held: bool,
}

/// The simulated cluster.
#[derive(Clone)]
pub(super) struct World {
    // The spec and annotations.
    version: usize,
    replicas: i32,
    backup: bool,
    schedule: usize,
    backup_token: u32,
    /// `lockstep.dev/switchover`: the ordinal it names and its token's serial
    /// (`pg-<k>:<n>`), if set.
    switchover: Option<(i32, u32)>,
    /// The serial of the last `lockstep.dev/switchover` token a persisted state took on
    /// (what the record's acks hold), noted as the states are checked: a request is
    /// served once a switchover state carried it.
    switchover_served: std::cell::Cell<u32>,
    /// The backup token the last persisted backing-up state served (noted as the
    /// invariants read it): the request at rest is served when it is this one.
    backup_served: std::cell::RefCell<Option<String>>,
    skip_final: bool,
    /// `lockstep.dev/retry-promote` is set (to one token: the settled world's).
    retry_promote: bool,
    /// `lockstep.dev/adopt-primary` names the pod holding the writable timeline.
    adopt_hatch: bool,
    /// `spec.fencing.leaseDurationSeconds` ([`Edit::LeaseSeconds`]).
    lease_seconds: i64,
    /// `status.longestLeaseSeconds` as the operator reads it: the longest `L` the spec
    /// ever had, as the status projection records it at the write that follows each edit
    /// (taken here as landed with the edit); `None` once the status was lost (a running
    /// world starts so).
    longest_lease: Option<i64>,
    /// How many times a restart-only parameter of `spec.postgresql` changed
    /// ([`Edit::RestartSetting`]): a running server that started before the last change
    /// reports it pending ([`Pod::settings_started`]).
    restart_settings: u32,
    /// `spec.hibernate` ([`Edit::Hibernate`]).
    hibernate: bool,
    /// The custom resource was deleted ([`WorldModel::deleted`]).
    deleted: bool,
    /// `spec.synchronous`: with `Required`, a commit is acknowledged only once `number`
    /// standbys have it, any of them (`Any`) or the first connected by ordinal (`First`)
    /// ([`World::acked`]); with `Preferred`, no acknowledgement is promised.
    synchronous: Option<SynchronousSpec>,
    /// `status.synchronousTerms` as the operator reads it: the terms commits may have
    /// been acknowledged under, as the status projection records them at each tick
    /// ([`crate::machines::postgres::status::synchronous_terms`]); `None` before the
    /// first (a running world's status was lost).
    terms_record: Option<Vec<crate::machines::postgres::terms::Terms>>,
    /// `lockstep.dev/fenced` names the Lease's holder (or, with none, its last one)
    /// whenever that holder's server is not writable: a person who knows its node is
    /// down (the settling world's escape hatch).
    fenced_hatch: bool,
    /// The holder the Lease named before it was cleared or deleted.
    last_holder: Option<(i32, u64)>,
    // Owned objects.
    in_sync: InSync,
    sts: Option<(String, i32)>,
    pods: BTreeMap<i32, Pod>,
    jobs: Vec<Job>,
    cronjob: Option<(u64, Option<&'static str>)>,
    lease: Option<ModelLease>,
    next_uid: u64,
    /// The true time: the operator's clock ([`WorldModel::clock`]).
    now: DateTime<Utc>,
    /// How far the pods' clocks are ahead of the operator's, in seconds (within `±S`).
    skew: i64,
    // PostgreSQL.
    db_primary: i32,
    /// The head of the writable history: its timeline and its last commit (acknowledged
    /// commits, when replication is asynchronous).
    head: Pos,
    /// Every timeline so far: each promotion forks one ([`World::held`]).
    timelines: Timelines,
    /// With [`World::synchronous`] `Required`: the furthest commit acknowledged to a
    /// client, that is one that the standbys its writable server waited for had received
    /// ([`World::sync_acked`]). No promotion may fall short of it (invariant 14).
    acked: u64,
    /// A server of this cluster has accepted writes: its database exists, and a
    /// bootstrap of an empty one in its place would lose it (invariant 15).
    served: bool,
    /// The Lease, and its `initialized` mark, was deleted after [`World::served`]: the
    /// guard against a new bootstrap is off until a holder with data renews it again (an
    /// assumption of the agent's: `src/instance/mod.rs`).
    mark_lost: bool,
    /// The WAL each ordinal's data directory has received (kept on its volume), as a
    /// position on its timeline ([`World::pos`]).
    received: BTreeMap<i32, Pos>,
    /// The ordinals that never answer the next survey they are asked
    /// ([`Move::AnswerLost`]).
    answers_lost: BTreeSet<i32>,
    /// The survey tokens the operator wrote on the Lease, in order: a failover may skip
    /// a member only after it missed `SURVEYS_FOR_EVERY_MEMBER` of them
    /// ([`World::missed`], the most-advanced invariant's one exception).
    asked: Vec<String>,
    /// How many surveys each ordinal had missed ([`World::missed`]) when the Lease was
    /// last handed to a pod, until that pod is promoted: the operator's last read before
    /// the hand-over. A member that answers only after it cannot be weighed, and counts
    /// as it stood then.
    missed_at_hand_over: Option<BTreeMap<i32, u32>>,
    /// The ordinals whose pod was not Ready (absent, terminating, or not Ready) when the
    /// Lease was last handed to a pod, until that pod is promoted. A member away then
    /// cannot be weighed by the operator's choice (it waits a while for a target that is
    /// away, [`TARGET_RETURN_SECONDS`]; a story checks that wait), so one back only
    /// after the hand-over does not count against the promotion.
    ///
    /// [`TARGET_RETURN_SECONDS`]: crate::machines::postgres::decide::switching_over::surveying::TARGET_RETURN_SECONDS
    away_at_hand_over: Option<BTreeSet<i32>>,
    /// The standbys connected to the writable server that runs now: each joins by a
    /// [`Move::Replicate`] once both run, and a writable server that starts (after a
    /// crash, or a promotion) has none. A clean stop sends its last WAL to these only.
    streaming: BTreeSet<i32>,
    /// What each ordinal's volume holds (none: empty).
    volumes: BTreeMap<i32, Vol>,
    /// Each ordinal's volume claim, by UID: made with its pod, deleted by a restore.
    claims: BTreeMap<i32, u64>,
    /// `spec.restore`: its token's serial and the position of the writable history
    /// its target names ([`World::request_restore`]).
    restore: Option<(u32, Pos)>,
    /// The target of every restore request so far, by serial.
    restore_targets: BTreeMap<u32, Pos>,
    /// The serial of the last restore token a persisted state took on (noted as the
    /// states are checked).
    restore_served: std::cell::Cell<u32>,
    /// The serial of the last restore a restoring state carried (begun, not only taken
    /// as served).
    restore_started: std::cell::Cell<u32>,
    /// The serial of the last restore a manager ran.
    restored: u32,
    /// The timeline the last restore's promotion made.
    restore_epoch: Option<u32>,
    /// How every pod's agent decides: the real one, or a planted bug.
    agent_decide: AgentDecide,
    /// Whether an agent may answer a survey yet: the real gate, or a planted bug.
    answer_gate: AnswerGate,
    /// The agents run with `RECLONE_ON_REWIND_FAILURE=false` (a scenario's).
    reclone_off: bool,
    // Audit.
    round: u32,
    round_primary: Option<i32>,
    upgrade_deletes: BTreeMap<(u32, u32, i32), u32>,
    final_backup_succeeded: bool,
    /// Every on-demand backup Job key ever created.
    backup_keys: BTreeSet<String>,
    /// The keys of the on-demand backup Jobs whose token a persisted state served
    /// (noted as the invariants read it). Until then nobody deletes the Job outright:
    /// the sub-machine's assumption ([`crate::machines::common::on_demand`]), which a
    /// status write lost after the Job's creation would otherwise break (found by the
    /// deep model check: the token served again, its Job created a second time; the
    /// DistributedDB model keeps the same rule).
    persisted_keys: std::cell::RefCell<BTreeSet<String>>,
    /// `spec.backup` was unset at some point (releasing the finalizer without a final
    /// backup is then allowed).
    ever_without_backup: bool,
    violations: Vec<String>,
    /// Settles in a row that found nothing to do, with nothing else changing the world in
    /// between. Two mean that a reconcile ran (fresh, the harness only runs fresh ones
    /// once faults stop) against the settled world, so the status it wrote is the one a
    /// settled world deserves: a `Degraded` written from a stale view has been cleared.
    quiet_settles: u8,
}

impl fmt::Debug for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "spec v{} x{} L{}s{}{}{}; sts {:?}; db primary {}; skew {}s; ",
            VERSIONS[self.version],
            self.replicas,
            self.lease_seconds,
            if self.backup { " +backup" } else { "" },
            SCHEDULES[self.schedule].map_or(String::new(), |s| format!(" @'{s}'")),
            if self.hibernate { " hibernate" } else { "" },
            self.sts,
            self.db_primary,
            self.skew
        )?;
        if let Some(l) = &self.lease {
            write!(
                f,
                "lease {:?} released {:?}; ",
                l.holder.map(|(k, uid)| format!("{k}/{uid}")),
                l.released_lsn
            )?;
        }
        write!(f, "head {}; pods [", self.head.lsn)?;
        for (k, p) in &self.pods {
            let at = if *k >= GONE {
                format!("{}(force-deleted)", ordinal(*k))
            } else {
                k.to_string()
            };
            write!(
                f,
                " {at}:uid{} @{} L{}s {}{}{}{}{}{}{} {:?}",
                p.uid,
                self.held(*k),
                p.lease_seconds,
                p.image
                    .rsplit_once(':')
                    .map_or(p.image.as_str(), |(_, tag)| tag),
                if p.ready { " ready" } else { "" },
                if p.writable { " W" } else { "" },
                if p.terminating { " terminating" } else { "" },
                if p.cut.is_some() { " cut" } else { "" },
                match p.role {
                    Some(Role::Primary) => " P",
                    Some(Role::Replica) => " R",
                    Some(Role::Demoted) => " D",
                    None => "",
                },
                if p.paused { " paused" } else { "" },
                crate::instance::AgentKind::from(&p.agent),
            )?;
        }
        write!(f, " ]; jobs {:?}", self.jobs)?;
        if !self.violations.is_empty() {
            write!(f, "; violations {:?}", self.violations)?;
        }
        Ok(())
    }
}

fn image(version: usize) -> String {
    format!(
        "{}:{}",
        crate::machines::postgres::actions::DEFAULT_POSTGRES_IMAGE_REPOSITORY,
        VERSIONS[version]
    )
}
