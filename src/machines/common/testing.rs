//! Test fixtures every machine's unit tests share: a clock, worlds, decisions checked
//! against the declared table, Jobs and their outcomes, whole reconciles through the
//! engine, assertions that read as sentences (`assert_goes`, `assert_stays`,
//! `assert_says`, `has_action`), rendered containers and Jobs, and the backup contracts
//! every machine keeps, checked through its own `decide`.

use std::collections::BTreeMap;
use std::fmt::Debug;

use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::actions::JobAction;
use super::annotations::BACKUP_NOW;
use super::backup::BackupKind;
use super::finalize::{FINAL_BACKUP_FAILED, FINAL_BACKUP_SKIPPED};
use super::jobs::{JobOutcome, JobView, Purpose};
use super::meta::Owner;
use super::observe::PodView;
use super::on_demand::{BACKUP_REQUESTED, BACKUP_SUCCEEDED};
use crate::engine::machine::is_declared;
use crate::engine::{Decision, EngineStatus, Health, Input, Machine, Outcome, Wait, World, step};

/// The test clock: `secs` seconds after a fixed instant.
pub fn t(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap_or_default()
}

/// The model checks' clock starts here; their failed Jobs failed at this time.
pub fn epoch() -> DateTime<Utc> {
    DateTime::from_timestamp(1_767_225_600, 0).unwrap_or_default()
}

/// A world observing `observed`, not deleting, at `now`, in a state entered at
/// `entered` (both [`t`] seconds), with no request taken on.
pub fn world_at<O>(observed: O, now: i64, entered: i64) -> World<O> {
    World {
        observed,
        deleting: false,
        now: t(now),
        entered_at: t(entered),
        acks: BTreeMap::new(),
        entered_by: String::new(),
    }
}

/// `M`'s decision in `state` on `o` at `now` (state entered at `entered`); a transition
/// it takes must be declared in its table.
pub fn decide_at<M: Machine>(
    spec: &M::Spec,
    state: &M::State,
    o: M::Observed,
    now: i64,
    entered: i64,
) -> Decision<M::State, M::Action> {
    let d = M::decide(spec, state, &world_at(o, now, entered));
    assert_declared::<M>(state, &d);
    d
}

/// A transition `d` takes from `from` is declared in `M`'s table.
pub fn assert_declared<M: Machine>(from: &M::State, d: &Decision<M::State, M::Action>) {
    if let Decision::Go { to, reason, .. } = d {
        assert!(
            is_declared::<M>(from, to, reason),
            "undeclared: {from:?} -> {to:?} ({reason})"
        );
    }
}

/// Pod `uid` running `image` as observed: `ready` or not, `terminating` or not, of no
/// known creation time or version, its role label read as `role`.
pub fn pod<R>(uid: String, image: &str, ready: bool, terminating: bool, role: R) -> PodView<R> {
    PodView {
        uid,
        image: Some(image.to_owned()),
        ready,
        terminating,
        created: None,
        version: String::new(),
        role,
    }
}

/// What `pick` yields for each of `actions` that matches its pattern, in order:
/// `picked!(d.actions(), Action::DeletePod { ordinal, .. } => *ordinal)`.
macro_rules! picked {
    ($actions:expr, $pattern:pat => $picked:expr) => {
        $actions
            .iter()
            .filter_map(|a| match a {
                $pattern => Some($picked),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
}
pub(crate) use picked;

/// The state a decision goes to, if it transitions.
pub fn target<S, A>(d: &Decision<S, A>) -> Option<&S> {
    match d {
        Decision::Go { to, .. } => Some(to),
        Decision::Stay { .. } => None,
    }
}

/// Whether a decision stays Degraded.
pub fn is_degraded<S, A>(d: &Decision<S, A>) -> bool {
    matches!(
        d,
        Decision::Stay {
            health: Health::Degraded,
            ..
        }
    )
}

/// A decision's message.
pub fn message<S, A>(d: &Decision<S, A>) -> &str {
    match d {
        Decision::Go { message, .. } | Decision::Stay { message, .. } => message,
    }
}

/// The Job `key` of the owner `owner` (named `<owner>-<key>`), created at `t(0)`.
pub fn job(owner: &str, key: &str, purpose: Purpose, outcome: JobOutcome) -> JobView {
    JobView {
        name: format!("{owner}-{key}"),
        uid: format!("job-{key}"),
        key: Some(key.to_owned()),
        purpose: Some(purpose),
        created: Some(t(0)),
        outcome,
        held: None,
    }
}

/// A Job that failed at `t(at)` by reaching its backoff limit.
pub fn failed(at: i64) -> JobOutcome {
    JobOutcome::Failed {
        at: t(at),
        reason: "BackoffLimitExceeded".to_owned(),
        message: "Job has reached the specified backoff limit".to_owned(),
    }
}

/// A Job that succeeded at `t(0)`.
pub fn succeeded() -> JobOutcome {
    JobOutcome::Succeeded { at: t(0) }
}

/// A status whose record holds `state` (written as JSON, the way the API server has it),
/// entered at `t(0)`.
pub fn status_in<S: serde::Serialize + schemars::JsonSchema>(state: &S) -> EngineStatus<S> {
    let mut status = EngineStatus::default();
    status.machine = Some(
        serde_json::json!({
            "state": state,
            "enteredAt": t(0),
            "stateVersion": 1,
        })
        .into(),
    );
    status
}

/// One reconcile of `M` from `status` at `t(secs)`; `status` then holds what it wrote.
pub fn reconcile_at<M: Machine>(
    spec: &M::Spec,
    status: &mut EngineStatus<M::State>,
    o: &M::Observed,
    deleting: bool,
    secs: i64,
) -> Outcome<M> {
    let out = step::<M>(Input {
        spec,
        status,
        observed: o.clone(),
        generation: 1,
        deleting,
        now: t(secs),
    });
    *status = out.status.clone();
    out
}

/// The state a status's record holds, if it decodes.
pub fn current<M: Machine>(status: &EngineStatus<M::State>) -> Option<M::State> {
    crate::engine::step::decode::<M>(status)
        .ok()
        .flatten()
        .map(|r| r.state)
}

/// `d` transitions to `to`, for `reason`.
pub fn assert_goes<S: Debug + PartialEq, A: Debug>(d: &Decision<S, A>, reason: &str, to: &S) {
    assert_eq!(d.reason(), reason, "{d:?}");
    assert_eq!(target(d), Some(to), "{d:?}");
}

/// `d` stays where it is, for `reason`.
pub fn assert_stays<S: Debug, A: Debug>(d: &Decision<S, A>, reason: &str) {
    assert!(target(d).is_none(), "{d:?}");
    assert_eq!(d.reason(), reason, "{d:?}");
}

/// `d` stays, Degraded, for `reason`.
pub fn assert_degraded<S: Debug, A: Debug>(d: &Decision<S, A>, reason: &str) {
    assert!(is_degraded(d), "{d:?}");
    assert_eq!(d.reason(), reason, "{d:?}");
}

/// `d`'s message says each of `words`.
pub fn assert_says<S, A>(d: &Decision<S, A>, words: &[&str]) {
    for word in words {
        assert!(message(d).contains(word), "{word:?} in {:?}", message(d));
    }
}

/// Whether one of `d`'s actions is `wanted`.
pub fn has_action<S, A>(d: &Decision<S, A>, wanted: impl Fn(&A) -> bool) -> bool {
    d.actions().iter().any(wanted)
}

/// When a stay looks again (`None` for a transition).
pub fn wait_of<S, A>(d: &Decision<S, A>) -> Option<Wait> {
    match d {
        Decision::Stay { wait, .. } => Some(*wait),
        Decision::Go { .. } => None,
    }
}

/// A stay's requeue, in seconds, if it polls.
pub fn requeue_secs<S, A>(d: &Decision<S, A>) -> Option<u64> {
    match wait_of(d) {
        Some(Wait::Requeue(w)) => Some(w.as_secs()),
        _ => None,
    }
}

/// `M`'s decision at `t(1000)`, in a state entered at `t(0)`, while its object is being
/// deleted; a transition it takes must be declared.
pub fn decide_deleting<M: Machine>(
    spec: &M::Spec,
    state: &M::State,
    o: M::Observed,
) -> Decision<M::State, M::Action> {
    let w = World {
        deleting: true,
        ..world_at(o, 1000, 0)
    };
    let d = M::decide(spec, state, &w);
    assert_declared::<M>(state, &d);
    d
}

/// `M`'s decision at `t(1000)` in a state entered at `t(0)` with the request annotation
/// `annotation` already taken on as `token`.
pub fn decide_acked<M: Machine>(
    spec: &M::Spec,
    state: &M::State,
    o: M::Observed,
    (annotation, token): (&str, &str),
) -> Decision<M::State, M::Action> {
    let w = World {
        acks: [(annotation.to_owned(), token.to_owned())].into(),
        ..world_at(o, 1000, 0)
    };
    let d = M::decide(spec, state, &w);
    assert_declared::<M>(state, &d);
    d
}

/// A machine action that may be one on Jobs, for the helpers that pick those out.
pub trait OnJobs {
    /// The Job action this is, if it is one.
    fn on_jobs(&self) -> Option<&JobAction>;
}

/// Whether `actions` start a backup Job.
pub fn runs_backup<A: OnJobs>(actions: &[A]) -> bool {
    actions
        .iter()
        .any(|a| matches!(a.on_jobs(), Some(JobAction::RunBackup { .. })))
}

/// The Jobs `actions` delete, by name, in order.
pub fn deleted_jobs<A: OnJobs>(actions: &[A]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a.on_jobs() {
            Some(JobAction::DeleteJob { name, .. }) => Some(name.clone()),
            _ => None,
        })
        .collect()
}

/// The one action of `actions`, if there is exactly one and it is on Jobs.
pub fn only_job_action<A: OnJobs>(actions: &[A]) -> Option<&JobAction> {
    match actions {
        [one] => one.on_jobs(),
        _ => None,
    }
}

/// Whole reconciles of `M` through the engine, its status carried from one to the next.
pub struct Reconciles<M: Machine> {
    spec: M::Spec,
    /// The status as the last reconcile wrote it.
    pub status: EngineStatus<M::State>,
    deleting: bool,
}

impl<M: Machine> Reconciles<M> {
    /// From a record that holds `state`.
    pub fn from(spec: M::Spec, state: &M::State) -> Self {
        Self {
            spec,
            status: status_in(state),
            deleting: false,
        }
    }

    /// From a status whose record was lost, the object being deleted.
    pub fn deleting_without_a_record(spec: M::Spec) -> Self {
        Self {
            spec,
            status: EngineStatus::default(),
            deleting: true,
        }
    }

    /// One reconcile at `t(1000)`.
    pub fn once(&mut self, o: &M::Observed) -> Outcome<M> {
        self.once_at(o, 1000)
    }

    /// One reconcile at `t(secs)`.
    pub fn once_at(&mut self, o: &M::Observed, secs: i64) -> Outcome<M> {
        reconcile_at::<M>(&self.spec, &mut self.status, o, self.deleting, secs)
    }

    /// How many of `n` reconciles at `t(1000)` start a backup Job.
    pub fn backups_in(&mut self, n: usize, o: &M::Observed) -> usize
    where
        M::Action: OnJobs,
    {
        self.backups_playing(n, &mut o.clone(), |_| {})
    }

    /// How many of `n` reconciles at `t(1000)` start a backup Job, `started` playing the
    /// Job controller: it changes what is seen after each reconcile that started one.
    pub fn backups_playing(
        &mut self,
        n: usize,
        o: &mut M::Observed,
        started: impl Fn(&mut M::Observed),
    ) -> usize
    where
        M::Action: OnJobs,
    {
        let mut backups = 0;
        for _ in 0..n {
            if runs_backup(&self.once(o).actions) {
                backups += 1;
                started(o);
            }
        }
        backups
    }

    /// The state the record holds, if it decodes.
    pub fn current(&self) -> Option<M::State> {
        current::<M>(&self.status)
    }
}

/// What a machine observes in the steps of a backup contract, in order.
pub struct BackupSteps<O> {
    /// Before the step's Job ran: at rest (final backup) or with the token (on demand).
    pub before: O,
    /// Once the step's Job finished: failed (final backup) or succeeded (on demand).
    pub finished: O,
    /// Then: the skip annotation set (final backup), or the Job pruned (on demand).
    pub after: O,
}

/// The final-backup contract, checked on `M` through its own `decide`: from
/// `finalizing` (attempt 1) deletion runs the Job `final-backup-1` and nothing else;
/// once that Job failed the finalizer is held, Degraded, naming the Job's reason; with
/// the skip annotation the machine goes to `finalized`.
pub fn assert_final_backup_holds_the_finalizer<M: Machine>(
    spec: &M::Spec,
    finalizing: &M::State,
    finalized: &M::State,
    seen: BackupSteps<M::Observed>,
) where
    M::Action: OnJobs,
{
    let d = decide_deleting::<M>(spec, finalizing, seen.before);
    let first = JobAction::RunBackup {
        key: "final-backup-1".to_owned(),
        kind: BackupKind::Final,
    };
    assert_eq!(only_job_action(d.actions()), Some(&first), "{d:?}");
    let d = decide_deleting::<M>(spec, finalizing, seen.finished);
    assert_degraded(&d, FINAL_BACKUP_FAILED);
    assert_says(&d, &["BackoffLimitExceeded"]);
    assert!(!M::finalized(finalizing));
    let d = decide_deleting::<M>(spec, finalizing, seen.after);
    assert_goes(&d, FINAL_BACKUP_SKIPPED, finalized);
}

/// The on-demand backup contract, checked on `M` through its own `decide`: at rest
/// (`ready`), the `backup-now` token `t1` starts BackingUp, the transition itself running
/// the token's one on-demand backup Job; once it succeeded, BackingUp ends; back at
/// rest, the served token asks for nothing more (`serving`), Job or no Job. Returns the
/// BackingUp state it went to.
pub fn assert_a_token_runs_one_backup<M: Machine>(
    spec: &M::Spec,
    ready: &M::State,
    serving: &str,
    seen: BackupSteps<M::Observed>,
) -> M::State
where
    M::Action: OnJobs,
{
    let d = decide_at::<M>(spec, ready, seen.before, 1000, 0);
    assert_eq!(d.reason(), BACKUP_REQUESTED, "{d:?}");
    let backing_up = target(&d).cloned().unwrap_or_else(|| panic!("{d:?}"));
    // The Job is created by the transition that persists BackingUp (and acks the token).
    let run = JobAction::RunBackup {
        key: super::on_demand::key("t1", None),
        kind: BackupKind::OnDemand,
    };
    assert_eq!(only_job_action(d.actions()), Some(&run), "{d:?}");
    let served = (BACKUP_NOW, "t1");
    let d = decide_acked::<M>(spec, &backing_up, seen.finished.clone(), served);
    assert_eq!(d.reason(), BACKUP_SUCCEEDED, "{d:?}");
    for o in [seen.finished, seen.after] {
        assert_eq!(decide_acked::<M>(spec, ready, o, served).reason(), serving);
    }
    backing_up
}

/// `job` runs once: it never retries by itself (`backoffLimit: 0`) and is stopped after
/// `deadline` seconds.
pub fn assert_runs_once(job: &Job, deadline: i64) {
    let spec = job.spec.as_ref();
    assert_eq!(spec.and_then(|s| s.backoff_limit), Some(0));
    assert_eq!(spec.and_then(|s| s.active_deadline_seconds), Some(deadline));
}

/// The spec of the pods `job` makes.
pub fn job_pod(job: &Job) -> PodSpec {
    job.spec
        .as_ref()
        .and_then(|s| s.template.spec.clone())
        .unwrap_or_default()
}

/// `c`'s environment variables with a plain value, by name.
pub fn plain_env(c: &Container) -> BTreeMap<String, Option<String>> {
    c.env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone()))
        .collect()
}

/// `c`'s environment holds each of `vars` as a plain value.
pub fn assert_env(c: &Container, vars: &[(&str, &str)]) {
    let env = plain_env(c);
    for (name, value) in vars {
        assert_eq!(
            env.get(*name).cloned().flatten().as_deref(),
            Some(*value),
            "{name}"
        );
    }
}

/// `c`'s environment takes each of `vars` from a Secret: `(variable, (secret, key))`.
pub fn assert_secret_env(c: &Container, vars: &[(&str, (&str, &str))]) {
    for (name, (secret, key)) in vars {
        let from = c
            .env
            .iter()
            .flatten()
            .find(|e| e.name == *name)
            .and_then(|e| e.value_from.as_ref()?.secret_key_ref.as_ref())
            .map(|r| (r.name.as_str(), r.key.as_str()));
        assert_eq!(from, Some((*secret, *key)), "{name}");
    }
}

/// The owner `db` in the namespace `ns` (UID `u`), for what builds its children.
pub fn owner_db() -> Owner {
    Owner {
        name: "db".to_owned(),
        namespace: "ns".to_owned(),
        reference: OwnerReference {
            name: "db".to_owned(),
            uid: "u".to_owned(),
            ..OwnerReference::default()
        },
    }
}

/// The value of the label `key` in `meta`, if it has one.
pub fn label(meta: Option<&ObjectMeta>, key: &str) -> Option<String> {
    meta.and_then(|m| m.labels.as_ref()?.get(key).cloned())
}

/// A cache for owners of `O`'s kind holding `statefulsets` and `pods` and nothing else,
/// projected keeping what `O` declares ([`crate::driver::Operator::KEEP`]).
pub fn cache<O: crate::driver::Operator>(
    statefulsets: Vec<k8s_openapi::api::apps::v1::StatefulSet>,
    pods: Vec<k8s_openapi::api::core::v1::Pod>,
) -> crate::driver::Cache {
    use crate::driver::Owned;
    let (kind_label, keep) = (O::KIND_LABEL, O::KEEP);
    crate::driver::Cache {
        statefulsets: Owned::from_objects_keeping(kind_label, keep, statefulsets),
        pods: Owned::from_objects_keeping(kind_label, keep, pods),
        services: Owned::from_objects_keeping(kind_label, keep, Vec::new()),
        jobs: Owned::from_objects_keeping(kind_label, keep, Vec::new()),
        cronjobs: Owned::from_objects_keeping(kind_label, keep, Vec::new()),
        configmaps: Owned::from_objects_keeping(kind_label, keep, Vec::new()),
        pdbs: Owned::from_objects_keeping(kind_label, keep, Vec::new()),
        network_policies: Owned::from_objects_keeping(kind_label, keep, Vec::new()),
        pvcs: Owned::from_objects_keeping(kind_label, keep, Vec::new()),
        secrets: Owned::from_objects_keeping(kind_label, keep, Vec::new()),
        leases: Owned::from_objects_keeping(kind_label, keep, Vec::new()),
    }
}

/// `pod` meets the `restricted` Pod Security Standard (the rules the API server's
/// PodSecurity admission checks, at its latest version): no host namespaces, ports or
/// paths, only the volume kinds it allows, non-root (`runAsNonRoot` and no `runAsUser`
/// of 0, at the pod or in every container), a `RuntimeDefault` or `Localhost` seccomp
/// profile, and every container (init containers too) without privilege or its
/// escalation, dropping `ALL` capabilities and adding none but `NET_BIND_SERVICE`.
pub fn assert_restricted(pod: &PodSpec, what: &str) {
    let pod_sc = pod.security_context.clone().unwrap_or_default();
    for (flag, name) in [
        (pod.host_network, "hostNetwork"),
        (pod.host_pid, "hostPID"),
        (pod.host_ipc, "hostIPC"),
    ] {
        assert_ne!(flag, Some(true), "{what}: {name}");
    }
    for volume in pod.volumes.iter().flatten() {
        let allowed = volume.config_map.is_some()
            || volume.csi.is_some()
            || volume.downward_api.is_some()
            || volume.empty_dir.is_some()
            || volume.ephemeral.is_some()
            || volume.persistent_volume_claim.is_some()
            || volume.projected.is_some()
            || volume.secret.is_some();
        assert!(
            allowed,
            "{what}: volume {} is of a restricted kind",
            volume.name
        );
    }
    assert_ne!(pod_sc.run_as_user, Some(0), "{what}: the pod runs as root");
    let seccomp_ok = |p: Option<&k8s_openapi::api::core::v1::SeccompProfile>| {
        p.is_some_and(|p| p.type_ == "RuntimeDefault" || p.type_ == "Localhost")
    };
    assert!(
        pod_sc
            .seccomp_profile
            .as_ref()
            .is_none_or(|p| seccomp_ok(Some(p))),
        "{what}: the pod's seccomp profile"
    );
    let containers: Vec<&Container> = pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .collect();
    assert!(!containers.is_empty(), "{what}: a pod without containers");
    for c in containers {
        let name = format!("{what}: container {}", c.name);
        let sc = c.security_context.clone().unwrap_or_default();
        assert_eq!(sc.allow_privilege_escalation, Some(false), "{name}");
        assert_ne!(sc.privileged, Some(true), "{name}");
        assert_ne!(sc.run_as_user, Some(0), "{name} runs as root");
        assert!(
            sc.run_as_non_root.or(pod_sc.run_as_non_root) == Some(true)
                && sc.run_as_non_root != Some(false),
            "{name}: runAsNonRoot"
        );
        assert!(
            seccomp_ok(
                sc.seccomp_profile
                    .as_ref()
                    .or(pod_sc.seccomp_profile.as_ref())
            ),
            "{name}: a RuntimeDefault or Localhost seccomp profile"
        );
        let caps = sc.capabilities.unwrap_or_default();
        assert!(
            caps.drop.iter().flatten().any(|d| d == "ALL"),
            "{name}: drops ALL capabilities"
        );
        assert!(
            caps.add.iter().flatten().all(|a| a == "NET_BIND_SERVICE"),
            "{name}: adds no capability but NET_BIND_SERVICE"
        );
        assert!(
            c.ports
                .iter()
                .flatten()
                .all(|p| p.host_port.is_none_or(|h| h == 0)),
            "{name}: a host port"
        );
    }
}

/// The issued Secret's data as the API server stores it and the operator's cache keeps
/// it (only the keys it names).
pub fn cached(secret: &k8s_openapi::api::core::v1::Secret) -> k8s_openapi::api::core::v1::Secret {
    use crate::driver::cache::Project;
    let mut stored = secret.clone();
    stored.data = stored.string_data.take().map(|data| {
        data.into_iter()
            .map(|(k, v)| (k, k8s_openapi::ByteString(v.into_bytes())))
            .collect()
    });
    stored.metadata.uid = Some("tls-uid".to_owned());
    stored.metadata.resource_version = Some("7".to_owned());
    stored.project(&crate::driver::cache::Keep::NOTHING);
    stored
}

pub fn der(pem_text: &str) -> rustls_pki_types::CertificateDer<'static> {
    rustls_pki_types::CertificateDer::from(pem::parse(pem_text).expect("PEM").into_contents())
}

/// `leaf` chains to `ca` for `usage`, as a TLS peer checks it.
pub fn verifies(ca: &str, leaf: &str, usage: webpki::KeyUsage) -> Result<(), webpki::Error> {
    let ca = der(ca);
    let anchor = webpki::anchor_from_trusted_cert(&ca)?;
    let leaf = der(leaf);
    let cert = webpki::EndEntityCert::try_from(&leaf)?;
    cert.verify_for_usage(
        webpki::ALL_VERIFICATION_ALGS,
        &[anchor],
        &[],
        rustls_pki_types::UnixTime::now(),
        usage,
        None,
        None,
    )
    .map(|_| ())
}
