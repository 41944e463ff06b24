//! The DistributedDB world model for the engine's model-checking harness
//! ([`crate::engine::check`]).
//!
//! The world: a StatefulSet controller that lags (it observes a new template in one move
//! and creates missing pods from the template it last observed in another, so a pod can
//! come back at a stale image), pods that become Ready one by one or get stuck until the
//! world settles, hook and backup Jobs that succeed or fail, drift of every owned object
//! (including a rogue edit of the template image), a CronJob that fires, and a user who
//! asks for backups or to skip the final one. Crashes, stale caches, 409s, lost writes,
//! failing actions, spec edits and deletion come from the harness.
//!
//! The upgrade's evictions go through the PodDisruptionBudget the world keeps (when it
//! exists): the API server refuses to evict a Ready pod while fewer pods are healthy
//! than the StatefulSet's replicas, whatever the operator's cache shows.
//!
//! With scaling hooks, the world keeps the database's own membership (etcd's member
//! list): a pre-scale-up hook adds its member, a pre-scale-down hook removes it.
//!
//! Invariants, checked after every event:
//! - with scaling hooks, the operator never shrinks the StatefulSet past a member the
//!   database still counts, nor grows it over one the database does not know (unless
//!   that member's hook failed and the user may have skipped it); at rest, the
//!   membership is the pods;
//! - a pod is taken down (a Ready pod deleted, or removed by a scale-down) only while
//!   every other pod is Ready (for deletes) and no other pod taken down is still down,
//!   and no pod is deleted, removed or has its pre-hook started while another pod,
//!   drained by its pre-hook, waits: at most one member is deliberately out of service;
//! - no pod already running the target image is ever deleted (so no pod is replaced
//!   twice, and a restarted operator cannot delete the replacement), but for one that
//!   never became Ready while Creating: read from a cache behind the operator's own
//!   last write of the template (the spec's image changed back and forth), such a pod
//!   may be replaced once more than needed, which costs its start and nothing else
//!   (found by the deep model check; the delete is preconditioned on the pod as read,
//!   so it never takes a pod that became Ready);
//! - within one pass over a target image, the ordinals taken down never go up; a pod
//!   that is already down may be replaced out of order;
//! - a Ready pod is deleted only after its pre-hook Job succeeded, and the next pod only
//!   after the previous one's post-hook Job succeeded (when hooks are configured);
//! - the StatefulSet template only ever holds an image some spec asked for;
//! - the Finalized state (which releases the finalizer) is reached only after a final
//!   backup Job succeeded, or the user skipped it or had no backup policy;
//! - the outcome finalizer of a Job is never removed while the persisted state still
//!   reads that Job's outcome (an on-demand backup being served, a final-backup attempt);
//!   at rest, none is held any more (bounded liveness);
//! - no on-demand backup Job key is ever created twice: one `backup-now` token runs at
//!   most one backup, even when finished backup Jobs are deleted by someone else (a TTL
//!   controller, a cleanup) before or after the operator read their outcome.
//!
//! Bounded liveness is the harness's: once faults stop and the world settles, the
//! machine reaches Ready at the spec's image and replicas and then stays quiet.

mod invariants;
mod scenarios;
mod world;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use proptest::prelude::*;

use super::actions::{DdbAction, HookPhase, JobAction, hook_key};
use super::api::DistributedDBSpec;
use super::fixtures::{self, policy};
use super::machine::DistributedDb;
use super::observe::{CronJobView, HookRequests, Observed, Own, Requests, StatefulSetView};
use super::state::DdbState;
use crate::engine::Machine;
use crate::engine::check::{
    CheckConfig, Event, Reconcile, Scenario, WorldModel, assert_every_edge_taken, check_machine,
};
use crate::machines::common::backup::BackupKind;
use crate::machines::common::jobs::{Hold, JobOutcome, JobView, Purpose};
use crate::machines::common::meta::short_hash;
use crate::machines::common::testing::{self, epoch};
use crate::machines::common::{finalize, on_demand};

const IMAGES: [&str; 3] = ["db:1", "db:2", "db:3"];
/// How many moves back a reconcile may read the world (the harness's staleness bound is
/// 3 events, each at most one move or edit).
const STALE_TICKS: u64 = 3;

/// The image a rogue edit puts into the StatefulSet template.
const ROGUE: &str = "db:0";

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pod {
    uid: String,
    image: String,
    ready: bool,
    terminating: bool,
    stuck: bool,
}

impl Pod {
    /// Its resourceVersion: it changes whenever the pod does. (Derived from what the
    /// model plays of a pod, so a pod changed and changed back has its old version
    /// again: the model accepts a delete as read that the API server would refuse,
    /// never the other way round.)
    fn version(&self) -> String {
        format!(
            "{}/{}/{}/{}/{}",
            self.uid, self.image, self.ready, self.terminating, self.stuck
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Running,
    Succeeded,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Job {
    name: String,
    uid: String,
    key: Option<String>,
    purpose: Purpose,
    outcome: Outcome,
    /// It carries the outcome finalizer (every run-once Job does, from its creation).
    held: bool,
    /// Someone deleted it while it was held: it stays until the finalizer goes.
    deleting: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Sts {
    image: String,
    replicas: i32,
    generation: i64,
    observed: i64,
    drifted: bool,
    /// The template the controller last observed (what it creates pods from).
    synced_image: String,
    synced_replicas: i32,
}

/// One pass of take-downs over a target image.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pass {
    image: String,
    last: i32,
}

/// The simulated namespace of one DistributedDB.
#[derive(Clone)]
pub(super) struct Cluster {
    spec: DistributedDBSpec,
    requests: Requests,
    hook_requests: HookRequests,
    /// `Some(in sync)` when the Service exists.
    service: Option<bool>,
    /// The PodDisruptionBudget exists.
    pdb: bool,
    sts: Option<Sts>,
    pods: BTreeMap<i32, Pod>,
    jobs: Vec<Job>,
    /// `(uid, in sync)` when the CronJob exists.
    cron: Option<(String, bool)>,
    next_uid: u64,
    /// A final backup Job succeeded (its Job may have been deleted since).
    final_backup_done: bool,
    /// `<name>-tls` exists (issued by the operator).
    certificates: bool,
    /// Every on-demand backup Job key ever created.
    backup_keys: BTreeSet<String>,
    /// The keys of the on-demand backup Jobs whose token a persisted state served
    /// (noted as the invariants read it). Until then the Job is not deleted: the
    /// sub-machine's assumption ([`crate::machines::common::on_demand`]), which a
    /// status write lost after the Job's creation would otherwise break (found by the
    /// model check: the token served again, its Job created a second time).
    persisted_keys: std::cell::RefCell<BTreeSet<String>>,
    /// The token the last persisted backing-up state served (noted as the invariants
    /// read it): the request at rest is served when it is this one.
    persisted_token: std::cell::RefCell<Option<String>>,
    /// Every image a spec asked for.
    asked: BTreeSet<String>,
    /// The spec had no backup policy at some point.
    ever_without_policy: bool,
    /// Ordinals taken down whose replacement is not Ready yet.
    down: BTreeSet<i32>,
    /// Pods whose pre-hook succeeded (ordinal to UID), until they are deleted: out of
    /// service although Ready.
    drained: BTreeMap<i32, String>,
    /// Ordinals whose pod someone else evicted, until a pod there is Ready again.
    evicted: BTreeSet<i32>,
    /// Counts environment moves and spec edits (a reconcile's view lags by at most
    /// [`STALE_TICKS`] of them).
    tick: u64,
    /// When each pod was last seen not Ready.
    last_down: BTreeMap<String, u64>,
    /// Every pod was Ready at some point: the cluster has served. Before that, replacing
    /// a pod at a superseded image is not a take-down (and may act on a stale view of a
    /// pod that just became Ready).
    served: bool,
    pass: Option<Pass>,
    /// The database's own membership (the members its quorum counts), when the spec
    /// has scaling hooks: the StatefulSet's replicas while the machine creates the
    /// cluster, then changed only by the hooks (a pre-scale-up hook adds its member, a
    /// pre-scale-down hook removes it).
    members: BTreeSet<i32>,
    /// The persisted state has left Creating: the membership is the hooks' from now on.
    bootstrapped: std::cell::Cell<bool>,
    /// Ordinals whose scaling hook failed at some point: the user may go on without it
    /// (`skip-hook`), so their membership is theirs to mend.
    scale_hook_failed: BTreeSet<i32>,
    /// The keys of the Jobs whose outcome finalizer the operator removed while the
    /// persisted state read their outcome. (One released before a state read it, such
    /// as the Job of a token whose serving write was lost, released at rest and asked
    /// for again later, is read without its finalizer: gone, it is reported lost.)
    released: BTreeSet<String>,
    /// The key of the Job whose outcome the persisted state reads, as the invariants
    /// last saw it.
    reading: std::cell::RefCell<Option<String>>,
    violations: Vec<String>,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hooks = if self.spec.upgrade.is_some() {
            " +hooks"
        } else {
            ""
        };
        let backups = if self.spec.backup_policy.is_some() {
            " +backups"
        } else {
            ""
        };
        write!(
            f,
            "spec {} x{}{hooks}{backups}",
            self.spec.image, self.spec.replicas
        )?;
        match &self.sts {
            Some(s) => write!(
                f,
                "; sts {} x{} gen {}/{}{}",
                s.image,
                s.replicas,
                s.observed,
                s.generation,
                if s.drifted { " drifted" } else { "" }
            )?,
            None => write!(f, "; no sts")?,
        }
        write!(f, "; pods [")?;
        for (k, p) in &self.pods {
            let status = match (p.terminating, p.ready, p.stuck) {
                (true, _, _) => "terminating",
                (_, true, _) => "Ready",
                (_, _, true) => "stuck",
                _ => "starting",
            };
            write!(f, " {k}:{}:{}:{status}", p.uid, p.image)?;
        }
        write!(f, " ]; jobs [")?;
        for j in &self.jobs {
            write!(
                f,
                " {}:{:?}",
                j.key.as_deref().unwrap_or(&j.name),
                j.outcome
            )?;
        }
        write!(f, " ]")?;
        if let Some(t) = &self.requests.backup_now {
            write!(f, "; backup-now={t}")?;
        }
        if self.requests.skip_final_backup {
            write!(f, "; skip-final-backup")?;
        }
        Ok(())
    }
}

/// Something the environment does.
#[derive(Debug, Clone, Copy)]
pub(super) enum Move {
    /// The StatefulSet controller observes the current template.
    StsObserves,
    /// The StatefulSet controller creates missing pods (from the template it last
    /// observed) and removes pods beyond its replicas.
    StsCreatesPods,
    /// A terminating pod is gone.
    PodGone(u8),
    /// A pod becomes Ready (unless stuck).
    PodReady(u8),
    /// A starting pod will not become Ready until the world settles.
    PodStuck(u8),
    /// A Ready pod goes NotReady on its own (a crash; scenarios only: a stale view of it
    /// is indistinguishable from a take-down while it was Ready).
    PodFails(u8),
    /// Someone else deletes a pod (an eviction, a node drain).
    PodEvicted(u8),
    /// The user asks to go on without a hook that is out of retries.
    SkipHook(u8),
    /// The n-th running Job finishes.
    JobFinishes(u8, bool),
    /// Someone removes the outcome finalizer of the n-th finished backup Job and
    /// deletes it (or it was never held): it is gone at once. An on-demand one only once
    /// a persisted state served its token.
    BackupJobDeleted(u8),
    /// Someone (a person, a TTL controller, a cleanup) deletes the n-th Job, finished or
    /// not: it stays, marked for deletion, while the outcome finalizer holds it.
    JobDeleted(u8),
    /// Someone edits the StatefulSet.
    StsDrifts,
    /// Someone puts another image into the StatefulSet template.
    StsImageTampered,
    /// Someone puts an image a spec may ask for into the StatefulSet template (scenarios
    /// only: generated runs tamper with [`ROGUE`]).
    StsImageSet(u8),
    /// Someone deletes the Service.
    ServiceDeleted,
    /// Someone deletes the PodDisruptionBudget.
    PdbDeleted,
    /// Someone deletes the CronJob.
    CronJobDeleted,
    /// The CronJob starts a scheduled backup.
    CronFires,
    /// The user asks for a backup.
    BackupNow(u8),
    /// The user asks to delete without a final backup.
    SkipFinalBackup,
}

/// A change to the spec.
#[derive(Debug, Clone, Copy)]
pub(super) enum Edit {
    /// A new image.
    Image(u8),
    /// New replicas.
    Replicas(i32),
    /// Add or remove the backup policy.
    ToggleBackups,
}

/// The spec a model run starts from: `replicas` at the first image, with hooks retried
/// `hooks` times and a backup policy if asked. With hooks it is configured as the etcd
/// example is: scaling hooks too, and certificates the operator issues (`spec.tls`).
fn spec(replicas: i32, hooks: Option<i32>, backups: bool) -> DistributedDBSpec {
    let mut spec = fixtures::spec(IMAGES[0], replicas);
    spec.backup_policy = backups.then(fixtures::policy);
    match hooks {
        Some(retry) => {
            let mut spec = fixtures::with_scaling_hooks(fixtures::with_hooks(spec, retry), retry);
            spec.tls = Some(crate::machines::distributeddb::api::DdbTls::default());
            spec
        }
        None => spec,
    }
}

impl Cluster {
    fn new(replicas: i32, hooks: Option<i32>, backups: bool) -> Self {
        Cluster {
            spec: spec(replicas, hooks, backups),
            requests: Requests::default(),
            hook_requests: HookRequests::default(),
            service: None,
            pdb: false,
            sts: None,
            pods: BTreeMap::new(),
            jobs: Vec::new(),
            cron: None,
            next_uid: 0,
            backup_keys: BTreeSet::new(),
            persisted_keys: std::cell::RefCell::default(),
            persisted_token: std::cell::RefCell::default(),
            final_backup_done: false,
            certificates: false,
            asked: BTreeSet::from([IMAGES[0].to_owned()]),
            ever_without_policy: !backups,
            down: BTreeSet::new(),
            evicted: BTreeSet::new(),
            drained: BTreeMap::new(),
            served: false,
            tick: 0,
            last_down: BTreeMap::new(),
            pass: None,
            released: BTreeSet::new(),
            reading: std::cell::RefCell::default(),
            members: BTreeSet::new(),
            bootstrapped: std::cell::Cell::new(false),
            scale_hook_failed: BTreeSet::new(),
            violations: Vec::new(),
        }
    }

    fn uid(&mut self, prefix: &str) -> String {
        self.next_uid += 1;
        format!("{prefix}{}", self.next_uid)
    }

    fn add_job(&mut self, key: Option<String>, purpose: Purpose) {
        if key.is_some() && self.jobs.iter().any(|j| j.key == key) {
            return; // AlreadyExists
        }
        if purpose == Purpose::Backup
            && let Some(k) = &key
            && !self.backup_keys.insert(k.clone())
        {
            self.violations.push(format!(
                "on-demand backup Job {k} created a second time: a token ran two backups"
            ));
        }
        let uid = self.uid("j");
        let key_held = key.is_some();
        let name = match &key {
            Some(k) => format!("db-{k}"),
            None => format!("db-backup-{uid}"),
        };
        self.jobs.push(Job {
            name,
            uid,
            key,
            purpose,
            outcome: Outcome::Running,
            held: key_held,
            deleting: false,
        });
    }

    /// Someone deletes the Job `uid`: it goes at once unless the outcome finalizer holds
    /// it.
    fn delete_job(&mut self, uid: &str) {
        for j in self.jobs.iter_mut().filter(|j| j.uid == uid) {
            j.deleting = true;
        }
        self.jobs.retain(|j| j.held || !j.deleting);
    }

    /// The operator removes the outcome finalizer of the Job `uid`. It must not while the
    /// persisted state still reads the Job's outcome ([`Self::released`], checked by the
    /// invariants).
    fn release_job(&mut self, uid: &str) {
        for j in self.jobs.iter_mut().filter(|j| j.uid == uid) {
            j.held = false;
            if let Some(key) = &j.key
                && self.reading.borrow().as_ref() == Some(key)
            {
                self.released.insert(key.clone());
            }
        }
        self.jobs.retain(|j| j.held || !j.deleting);
    }

    /// Whether a hook Job with this key prefix succeeded, or failed while the user asked
    /// to skip hooks.
    fn hook_done(&self, prefix: &str) -> bool {
        self.jobs.iter().any(|j| {
            let done = match j.outcome {
                Outcome::Succeeded => true,
                Outcome::Failed => self.hook_requests.skip_hook.is_some(),
                Outcome::Running => false,
            };
            done && j.key.as_deref().is_some_and(|k| k.starts_with(prefix))
        })
    }

    /// Whether the PodDisruptionBudget (`maxUnavailable: 1`, unhealthy pods always
    /// evictable) refuses to evict `pod`, as the API server decides: with its own count
    /// of healthy pods (Ready, not terminating, any ordinal) against the StatefulSet's
    /// replicas. The world's count is current: the disruption controller's own lag is
    /// not played (an eviction it let through on a lagging count is a failure at the
    /// same moment, which no operator can hold).
    fn budget_refuses(&self, pod: &Pod) -> bool {
        let expected = self.sts.as_ref().map_or(0, |s| s.replicas);
        let healthy = self
            .pods
            .values()
            .filter(|p| p.ready && !p.terminating)
            .count();
        self.pdb && pod.ready && !pod.terminating && i32::try_from(healthy).unwrap_or(0) < expected
    }

    /// Bookkeeping after any change.
    fn refresh(&mut self) {
        let pods = &self.pods;
        let up = |k: &i32| pods.get(k).is_some_and(|p| p.ready && !p.terminating);
        let replicas = self.sts.as_ref().map_or(0, |s| s.replicas);
        // A removed pod (beyond the replicas) is back once it is gone.
        self.down
            .retain(|k| !up(k) && (*k < replicas || pods.contains_key(k)));
        self.drained
            .retain(|k, uid| pods.get(k).is_some_and(|p| p.uid == *uid && !p.terminating));
        self.evicted.retain(|k| !up(k));
        for p in self.pods.values().filter(|p| !p.ready && !p.terminating) {
            self.last_down.insert(p.uid.clone(), self.tick);
        }
        if let Some(s) = &self.sts {
            self.served |= (0..s.replicas).all(|k| up(&k));
            let uniform = (0..s.replicas).all(|k| {
                self.pods
                    .get(&k)
                    .is_some_and(|p| p.ready && !p.terminating && p.image == s.image)
            });
            if uniform {
                self.pass = None;
            }
        }
    }

    fn sts_observes(&mut self) {
        if let Some(s) = &mut self.sts {
            s.observed = s.generation;
            s.synced_image = s.image.clone();
            s.synced_replicas = s.replicas;
        }
    }

    fn sts_creates_pods(&mut self) {
        let Some(s) = self.sts.clone() else { return };
        if s.observed == 0 {
            return;
        }
        for k in 0..s.synced_replicas {
            if !self.pods.contains_key(&k) {
                let uid = self.uid("p");
                self.pods.insert(
                    k,
                    Pod {
                        uid,
                        image: s.synced_image.clone(),
                        ready: false,
                        terminating: false,
                        stuck: false,
                    },
                );
            }
        }
        let removed: Vec<i32> = self
            .pods
            .range(s.synced_replicas..)
            .filter(|(_, p)| !p.terminating)
            .map(|(k, _)| *k)
            .collect();
        for k in removed {
            self.check_removal(k);
            if let Some(p) = self.pods.get_mut(&k) {
                p.terminating = true;
            }
        }
    }

    fn running_job(&mut self, n: u8) -> Option<&mut Job> {
        let running: Vec<usize> = (0..self.jobs.len())
            .filter(|i| self.jobs[*i].outcome == Outcome::Running)
            .collect();
        let pick = *running.get(usize::from(n) % running.len().max(1))?;
        self.jobs.get_mut(pick)
    }

    /// Someone else writes `image` into the StatefulSet template.
    fn tamper(&mut self, image: &str) {
        if let Some(s) = &mut self.sts {
            s.image = image.to_owned();
            s.generation += 1;
        }
    }

    /// A cluster whose objects already exist and run (as after the operator was
    /// reinstalled): the machine adopts them.
    fn existing(replicas: i32, hooks: Option<i32>, backups: bool) -> Self {
        let mut world = Cluster::new(replicas, hooks, backups);
        world.service = Some(true);
        world.pdb = true;
        world.sts = Some(Sts {
            image: IMAGES[0].to_owned(),
            replicas,
            generation: 1,
            observed: 1,
            drifted: false,
            synced_image: IMAGES[0].to_owned(),
            synced_replicas: replicas,
        });
        world.members = (0..replicas).collect();
        WorldModel::<DistributedDb>::settle(&mut world);
        world.hook_requests.retry_hook = None;
        world
    }

    fn pod_at(&mut self, n: u8) -> Option<&mut Pod> {
        self.pods.get_mut(&i32::from(n % 4))
    }
}
