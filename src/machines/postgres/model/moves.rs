//! What the model's runs change: a person's edits of the spec ([`Edit`]) and what the
//! world does on its own ([`Move`]), each a step a strategy draws.

use crate::pod::synchronous::{DataDurability, SynchronousSpec};

#[derive(Clone, Copy, Debug)]
pub(in crate::machines::postgres) enum Edit {
    Version(usize),
    Replicas(i32),
    Schedule(usize),
    /// Set `spec.fencing.leaseDurationSeconds` (pods keep the one they were created
    /// with).
    LeaseSeconds(i64),
    /// Change a parameter of `spec.postgresql` that a server applies only at its start
    /// (`shared_buffers`): every running server reports it pending, once its manager has
    /// read the change ([`Move::SettingsRead`], each on its own schedule), until it starts
    /// again ([`super::World::restart_settings`]).
    RestartSetting,
    /// Add or remove `spec.backup` (scenarios only). Removing it removes the `backup-now`
    /// annotation too: a request without a destination is a Degraded hold until the
    /// annotation goes (unit-tested), which the liveness phase would read as a quiet
    /// rest it is not.
    ToggleBackup,
    /// Set `spec.synchronous`'s `number` and `dataDurability` (the API server refuses a
    /// `number` at or above `spec.replicas`; a world without `spec.synchronous` keeps
    /// none). Each server runs the new terms once its manager reads them
    /// ([`Move::SettingsRead`], or at its start).
    Synchronous(i32, DataDurability),
    /// Set `spec.hibernate` (the hibernation check's edits only, so the whole world's
    /// generated runs keep their seeds).
    Hibernate(bool),
}

/// The synchronous terms a server runs: `spec.synchronous`, and how many members they
/// name ([`super::Pod::sync_runs`]).
pub(in crate::machines::postgres) type Runs = (Option<SynchronousSpec>, i32);

#[derive(Clone, Copy, Debug)]
pub(in crate::machines::postgres) enum Move {
    /// The StatefulSet controller creates the missing pod at this ordinal.
    Recreate(i32),
    /// The pod passes its readiness probe.
    BecomesReady(i32),
    /// The pod fails its readiness probe: its server does not answer.
    BecomesUnready(i32),
    /// The pod fails its readiness probe while its server runs and answers its own
    /// manager (its port blocked from outside): not Ready, it still streams and answers
    /// surveys.
    ProbeBlocked(i32),
    /// The pod is deleted by someone else (a drain, a node loss).
    Evicted(i32),
    /// The StatefulSet controller removes pods above its replica count, and their
    /// claims with them unless it holds no pod (its `whenScaled` policy).
    ScaledDown,
    /// The `nth` running Job finishes.
    JobFinishes { nth: u8, ok: bool },
    /// Someone edits the owned objects.
    Drift,
    /// The user sets a new `backup-now` token.
    RequestBackup,
    /// A person sets `lockstep.dev/switchover` to a new token naming this ordinal.
    RequestSwitchover(i32),
    /// The user sets `skip-final-backup=true`.
    SkipFinalBackup,
    /// Someone (a TTL controller, a cleanup) deletes the `nth` finished backup Job.
    BackupJobDeleted(u8),
    /// The pod's agent looks at its label and the Lease: a writable server that is no
    /// longer labelled `primary` or no longer holds the Lease stops (and, demoted while
    /// holding it, releases the Lease); a pod labelled primary that holds it starts.
    AgentTick(i32),
    /// A Terminating pod is finally gone.
    Terminated(i32),
    /// A client commits on the writable server.
    Write,
    /// A standby receives (and replays) everything the writable server wrote.
    Replicate(i32),
    /// Someone clears the Lease's holder (an edit by hand).
    LeaseCleared,
    /// The pod loses its path to the API server (a partition, or an `nft` rule as in the
    /// real-PostgreSQL e2e). A writable Lease holder stays alive and writable and keeps
    /// replicating, but can no longer renew; a standby can no longer renew either, so it
    /// is not promoted while cut off.
    Partition(i32),
    /// The pod reaches the API server again.
    Heal(i32),
    /// The pod is force-deleted (`--grace-period=0 --force`) while its node is
    /// partitioned: the object goes at once, its container keeps running cut off (a
    /// writable server stays writable until its agent's fence stops it; [`super::GONE`]).
    ForceDeleted(i32),
    /// Someone deletes the primary Lease: the agents read it as unreadable (they
    /// cannot renew it) until the operator creates it again.
    LeaseDeleted,
    /// The pod's manager reads the settings annotation as it stands (the kubelet
    /// refreshes each pod's file on its own schedule) and reports on them: a server
    /// running since before a restart-only change then reports it pending.
    SettingsRead(i32),
    /// The pods' clocks move to `sign × S` seconds from the operator's: within the
    /// bound `spec.fencing.clockSkewSeconds` the operator allows for (`-1..=1`), or
    /// twice beyond it (`±2`: the operator's own sighting of each renewal bounds the
    /// expiry then). A holder's `renewTime` is written by its own clock.
    ClockSkew(i8),
    /// A stop the pod's server runs (clean or immediate) finishes.
    ServerStops(i32),
    /// The pod's agent's next write to the API server (a renewal, a release) fails.
    RefuseNext(i32),
    /// The pod's agent's next accepted renewal is slower than `R`: it began `R + 1` s
    /// before it was accepted.
    SlowRenewal(i32),
    /// The writable server's WAL volume hangs (a frozen disk): its commits all wait, while
    /// its agent runs and renews; until the pod is gone or a person mends the volume.
    WalHangs(i32),
    /// The whole pod pauses (a frozen cgroup, a VM pause): no agent round, no write, no
    /// progress of a stop.
    Pause(i32),
    /// The paused pod resumes.
    Resume(i32),
    /// The pod's server finishes a promotion it was asked for.
    PromotionEnds(i32),
    /// The pod's server exits on its own.
    ServerCrashes(i32),
    /// The pod's agent's next long-running action (bootstrap, clone, ...) fails.
    TaskFails(i32),
    /// The pod is deleted gracefully: its container gets SIGTERM, and the pod is gone
    /// once its agent exits ([`Move::Terminated`] ends it sooner).
    Deleted(i32),
    /// A person sets the pod's role label to something that is no role.
    LabelGarbled(i32),
    /// Someone runs `pg_promote()` on the pod's standby by hand.
    PromotedByHand(i32),
    /// Someone leaves files on the pod's empty volume.
    ForeignFiles(i32),
    /// The pod's standby stops streaming and cannot start again as it is (a timeline it
    /// cannot follow, a broken replication connection): it receives nothing more until
    /// its server restarts.
    StreamBreaks(i32),
    /// The pod never answers the next survey it is asked (its manager's write lost, its
    /// node loaded), though it is Ready.
    AnswerLost(i32),
    /// The pod and its volume are gone (a claim deleted with its pod, a disk replaced):
    /// the StatefulSet makes it again with an empty volume. Only while another member
    /// has data: losing the last copy is a restore from a backup, not a failover.
    VolumeLost(i32),
    /// A person sets `spec.restore` to a new token, with a target this share (of 255)
    /// of the writable history ([`super::World::request_restore`]).
    RequestRestore(u8),
}
