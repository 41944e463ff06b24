//! Observation: the machine's [`Observed`] snapshot, built purely from the driver's
//! reflector stores and the custom resource itself.
//!
//! Drift is judged here, against the objects [`super::render`] produces, so that `decide`
//! only sees `in_sync` flags.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use kube::ResourceExt;

use super::actions::{PgAction, Role, ServiceKind};
use super::api::{DEFAULT_LEASE_SECONDS, LastArchived, PostgresCluster};
use super::instances::{Reported, ServerRole};
use super::render::{self, CONTAINER, KIND_LABEL, ROLE_LABEL};
use crate::driver::Cache;
use crate::driver::cache::{JOB_NAME_LABEL, digest};
use crate::machines::common::annotations;
use crate::machines::common::observe::{self as common, Reading};
pub use crate::machines::common::observe::{CronJobView, Requests, StatefulSetView, ordinal_of};
use crate::pod::answers::{Answer, SURVEY, SURVEYED};
use crate::pod::applied::{SETTINGS_APPLIED, SettingsReport};
use crate::pod::archived::ARCHIVED;
use crate::pod::archiving::ARCHIVING;
use crate::pod::managed::{OBJECTS_APPLIED, ObjectsReport};
use crate::pod::server::SERVER;
use crate::pod::settings;
use crate::pod::streaming::STREAMING;
use crate::pod::synchronous::SYNCHRONOUS;

/// Everything the machine sees of the world.
pub type Observed = common::Observed<Option<Role>, Own>;

/// A PostgreSQL pod as observed, with its `lockstep.dev/role` label if it is a known
/// role.
pub type PodView = common::PodView<Option<Role>>;

impl PodView {
    /// The action that labels this pod (`ordinal`) `role`, fenced on the pod as read.
    pub fn label(&self, ordinal: i32, role: Role) -> PgAction {
        PgAction::Label {
            ordinal,
            role,
            uid: self.uid.clone(),
            version: self.version.clone(),
        }
    }
}

/// Which of the simple owned objects match their rendering.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InSync {
    /// The scripts ConfigMap.
    pub scripts: bool,
    /// The headless Service.
    pub headless: bool,
    /// `<name>-rw`.
    pub read_write: bool,
    /// `<name>-ro`.
    pub read_only: bool,
    /// The PodDisruptionBudget.
    pub pdb: bool,
    /// The NetworkPolicy is as `spec.networkPolicy` wants it: present and as rendered
    /// when enabled, absent when not.
    pub network_policy: bool,
}

impl InSync {
    /// Everything matches.
    pub const ALL: InSync = InSync {
        scripts: true,
        headless: true,
        read_write: true,
        read_only: true,
        pdb: true,
        network_policy: true,
    };
}

/// What the user asked of PostgresCluster alone through annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PgRequests {
    /// [`annotations::RETRY_PROMOTE`].
    pub retry_promote: Option<String>,
    /// [`ADOPT_PRIMARY`]: the pod a person says is the primary, when a lost status
    /// cannot be re-adopted unambiguously.
    pub adopt_primary: Option<String>,
    /// [`FENCED`]: the Lease holder (`<pod-name>/<pod-uid>`) a person says is certainly
    /// no longer writable (its node is powered off), when the operator cannot tell.
    pub fenced: Option<String>,
    /// [`SWITCHOVER`]: the request to move the primary role to a pod.
    pub switchover: Option<String>,
}

/// Request: `lockstep.dev/switchover: <pod>[:<anything>]` moves the primary role to
/// `<pod>` by the same fenced switchover as an upgrade, once per value (a suffix after
/// `:` makes a new request for the same pod).
pub const SWITCHOVER: &str = "lockstep.dev/switchover";

/// Escape hatch: `lockstep.dev/adopt-primary: <pod-name>` names the primary when a
/// cluster whose status was lost cannot be re-adopted unambiguously.
pub const ADOPT_PRIMARY: &str = "lockstep.dev/adopt-primary";
/// Escape hatch: `lockstep.dev/fenced: <pod-name>/<pod-uid>` asserts that this Lease
/// holder's server is certainly down (for example its node is powered off), so a
/// failover need not wait for its Lease to expire or its pod to go.
pub const FENCED: &str = "lockstep.dev/fenced";

impl PgRequests {
    /// Read the requests from an object's annotations.
    pub fn from_annotations(a: &BTreeMap<String, String>) -> Self {
        PgRequests {
            retry_promote: annotations::token(a, annotations::RETRY_PROMOTE),
            adopt_primary: annotations::token(a, ADOPT_PRIMARY),
            fenced: annotations::token(a, FENCED),
            switchover: annotations::token(a, SWITCHOVER),
        }
    }
}

/// The primary Lease `<name>-primary` as observed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseView {
    /// `spec.holderIdentity` (`<pod-name>/<pod-uid>`), `None` when absent or empty.
    pub holder: Option<String>,
    /// `spec.renewTime`: the holder's clock when it started its last successful renewal
    /// (or the operator's when it handed the Lease over).
    pub renewed: Option<DateTime<Utc>>,
    /// When this operator first saw the current `renewTime`, on its own clock (rounded
    /// up to the second): the holder renewed no later than that, whatever its clock says.
    /// `None` when unknown.
    pub renewal_seen: Option<DateTime<Utc>>,
    /// `spec.leaseDurationSeconds` (`L`) as last written: the holder's own at each of
    /// its renewals, the spec's at a creation or hand-over by the operator.
    pub duration: i64,
    /// `spec.leaseTransitions`.
    pub transitions: i32,
    /// The annotation [`RELEASED_BY`]: the holder that stopped its server on purpose
    /// and gave the Lease up.
    pub released_by: Option<String>,
    /// The annotation [`RELEASED_LSN`]: the last WAL position of a primary that stopped
    /// cleanly on demotion, which the next primary's agent must have received before it
    /// promotes. A planned switchover never hands the Lease over without it (unless a
    /// person asserts the holder is down): it is the only proof that no acknowledged
    /// commit is left behind.
    pub released_lsn: Option<String>,
    /// The annotation [`crate::pod::answers::SURVEY`]: the token of the survey the operator
    /// last asked the standbys to answer.
    pub survey: Option<String>,
    /// The annotation [`NEVER_HELD`]: the operator created it before any volume claim,
    /// StatefulSet or pod of the cluster existed, and nobody held it since.
    pub never_held: bool,
    /// Its UID.
    pub uid: String,
    /// Its resourceVersion as read: a hand-over is made only on the Lease as observed.
    pub version: String,
}

pub use crate::pod::lease::{INITIALIZED, RELEASED_BY, RELEASED_LSN};

/// The Lease annotation the operator sets on a Lease it creates before any volume
/// claim, StatefulSet or pod of the cluster exists (a brand-new cluster): no server can
/// have held it, so it is handed to pod 0 without waiting. Every hand-over removes it.
pub const NEVER_HELD: &str = "lockstep.dev/never-held";

/// `<pod-name>/<pod-uid>`: how a Lease names its holder.
pub fn holder_identity(pod: &str, uid: &str) -> String {
    format!("{pod}/{uid}")
}

/// What only PostgresCluster observes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Own {
    /// The simple owned objects.
    pub in_sync: InSync,
    /// The primary Lease, if it exists.
    pub lease: Option<LeaseView>,
    /// The UID of the cluster's NetworkPolicy, if one exists (what a delete is
    /// preconditioned on once `spec.networkPolicy` is turned off).
    pub network_policy_uid: Option<String>,
    /// The termination messages of owned Jobs' pods, by Job name (a base backup's
    /// first recoverable point).
    pub job_results: BTreeMap<String, String>,
    /// What the live instance pods (by ordinal) last answered to a failover's survey
    /// ([`crate::pod::answers`]), whichever survey it was.
    pub answers: BTreeMap<i32, Answer>,
    /// The requests of PostgresCluster alone.
    pub requests: PgRequests,
    /// The lease duration `L` each observed PostgreSQL pod (by ordinal) was created
    /// with ([`pod_lease_seconds`]): its fence runs with it, whatever the spec says now
    /// (pods are `OnDelete`), so a wait for a holder counts the longest of them.
    pub lease_seconds: BTreeMap<i32, i64>,
    /// `status.longestLeaseSeconds` as read: the longest `L` the status has seen the
    /// spec or any pod of the cluster carry;
    /// `None` when the status does not say (it was lost).
    pub longest_lease_seconds: Option<i64>,
    /// The live instance pods (by ordinal) whose settings annotation is not the spec's
    /// `postgresql` ([`crate::pod::settings`]): their managers have yet to be told.
    pub unconfigured: BTreeSet<i32>,
    /// What the live instance pods (by ordinal) report their servers made of the
    /// settings ([`crate::pod::applied`]); a pod that reports nothing yet is absent.
    pub settings: BTreeMap<i32, SettingsReport>,
    /// The live instance pods (by ordinal) whose report is about other settings than the
    /// spec's ([`SettingsReport::judged`]): their managers have yet to read, or their
    /// servers to reload, what the spec asks for.
    pub unjudged: BTreeSet<i32>,
    /// The live instance pods (by ordinal) whose report is about the spec's settings
    /// ([`SettingsReport::judged`]): they run the spec's synchronous terms.
    pub judged: BTreeSet<i32>,
    /// `status.synchronousTerms` as read ([`super::terms`]); `None` when the status does
    /// not say.
    pub synchronous_terms: Option<Vec<super::terms::Terms>>,
    /// The live instance pods (by ordinal) that report their standby not streaming
    /// ([`crate::pod::streaming`]): behind the primary.
    pub lagging: BTreeSet<i32>,
    /// What the live instance pods (by ordinal) last reported of WAL archiving
    /// ([`crate::pod::archiving`]): whether it works, and the message. Only a primary
    /// writes it; a pod keeps what it wrote while it was one.
    pub archiving: BTreeMap<i32, (bool, String)>,
    /// The newest WAL file each live instance pod (by ordinal) last reported archived
    /// ([`super::archived`]). Only a primary writes it; a pod keeps what it wrote
    /// while it was one.
    pub archived: BTreeMap<i32, LastArchived>,
    /// What the pod labelled primary reports of `spec.roles` and `spec.databases`
    /// ([`crate::pod::managed`]), when its report is about the spec's current entries.
    pub objects: Option<ObjectsReport>,
    /// What each live instance pod (by ordinal) reports of its server and its
    /// streaming ([`super::instances`]), for `status.instances`.
    pub instances: BTreeMap<i32, Reported>,
    /// What the live instance pods (by ordinal) last reported of synchronous
    /// replication ([`crate::pod::synchronous::SYNCHRONOUS`]): whether commits wait for
    /// standbys, and the message. Only a primary writes it.
    pub synchronous: BTreeMap<i32, (bool, String)>,
    /// The live instance pods (by ordinal) whose instance manager reported its
    /// bootstrap from backups failed ([`crate::pod::recovery`]), with the error.
    pub recovery_failed: BTreeMap<i32, String>,
    /// The live instance pods (by ordinal) whose instance manager reports that their
    /// volume holds no database ([`crate::pod::volume`]): they hold no commit.
    pub empty: BTreeSet<i32>,
    /// The live instance pods (by ordinal) whose instance manager was copied from
    /// another operator image than this operator's (a pod created before Lockstep was
    /// upgraded): it may not report what this operator waits for, such as a promotion's
    /// Lease term ([`super::instances`]).
    pub older_managers: BTreeSet<i32>,
    /// The instances' volume claims (`data-<name>-<ordinal>`), by ordinal, with their
    /// UIDs: an in-place restore deletes them all before it restores.
    pub claims: BTreeMap<i32, String>,
    /// The digest of each live instance pod's restore annotation
    /// ([`crate::pod::restore::RESTORE_ANNOTATION`]), by ordinal, where it carries one.
    pub restore_annotated: BTreeMap<i32, String>,
    /// `<name>-tls` as the cache holds it ([`render::tls`]), if it exists.
    pub certificates: Option<CertificatesView>,
}

pub use crate::machines::common::tls::CertificatesView;

impl Observed {
    /// The pod at `ordinal` if it exists and is not terminating.
    pub(super) fn live(&self, ordinal: i32) -> Option<&PodView> {
        self.pods.get(&ordinal).filter(|p| !p.terminating)
    }

    pub(super) fn serving(&self, ordinal: i32) -> bool {
        self.pods.get(&ordinal).is_some_and(PodView::serving)
    }

    /// `<pod-name>/<pod-uid>` of the pod at `ordinal`, if it exists.
    pub fn identity(&self, ordinal: i32) -> Option<String> {
        self.pods
            .get(&ordinal)
            .map(|p| holder_identity(&self.pod_name(ordinal), &p.uid))
    }

    /// The ordinal of the pod a Lease holder identity names, if that pod (with that
    /// UID) is observed.
    pub fn holder_ordinal(&self, holder: &str) -> Option<i32> {
        self.pods
            .keys()
            .copied()
            .find(|k| self.identity(*k).as_deref() == Some(holder))
    }
}

/// The lease duration `L` a PostgreSQL pod was created with: its server container's
/// [`render::LEASE_SECONDS_ENV`] (an environment variable is fixed for the pod's
/// life), if it has one that parses.
pub fn pod_lease_seconds(pod: &Pod) -> Option<i64> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == CONTAINER)?
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == render::LEASE_SECONDS_ENV)?
        .value
        .as_deref()?
        .parse()
        .ok()
}

/// What the machine needs to know of the primary Lease, with when this operator first
/// saw its renewal time ([`crate::driver::Owned::moment_seen`]: the value it saw, and
/// when), if known.
pub fn lease_view_seen(lease: &Lease, seen: Option<(String, DateTime<Utc>)>) -> LeaseView {
    let renewal_seen = seen
        .filter(|(moment, _)| Some(moment) == crate::driver::Project::moment(lease).as_ref())
        .map(|(_, at)| round_up(at));
    LeaseView {
        renewal_seen,
        ..lease_view(lease)
    }
}

/// `at`, rounded up to the second: an expiry is never computed early.
fn round_up(at: DateTime<Utc>) -> DateTime<Utc> {
    let up = i64::from(at.timestamp_subsec_nanos() > 0);
    DateTime::<Utc>::from_timestamp(at.timestamp().saturating_add(up), 0).unwrap_or(at)
}

/// What the machine needs to know of the primary Lease.
pub fn lease_view(lease: &Lease) -> LeaseView {
    let spec = lease.spec.clone().unwrap_or_default();
    LeaseView {
        holder: spec.holder_identity.filter(|h| !h.is_empty()),
        renewed: spec.renew_time.map(|t| {
            let nanos = u32::try_from(t.0.subsec_nanosecond()).unwrap_or(0);
            round_up(DateTime::<Utc>::from_timestamp(t.0.as_second(), nanos).unwrap_or_default())
        }),
        renewal_seen: None,
        duration: spec
            .lease_duration_seconds
            .map_or(DEFAULT_LEASE_SECONDS, i64::from),
        transitions: spec.lease_transitions.unwrap_or(0),
        released_by: lease.annotations().get(RELEASED_BY).cloned(),
        released_lsn: lease.annotations().get(RELEASED_LSN).cloned(),
        survey: lease.annotations().get(SURVEY).cloned(),
        never_held: lease.annotations().contains_key(NEVER_HELD),
        uid: lease.metadata.uid.clone().unwrap_or_default(),
        version: lease.metadata.resource_version.clone().unwrap_or_default(),
    }
}

/// Build the observation of `pg` from the cache. It does not depend on the machine's
/// state: the StatefulSet is judged against what would be rendered for its own image and
/// replicas, and `decide` compares those with what its state wants.
pub fn observe(pg: &PostgresCluster, cache: &Cache) -> Observed {
    let read = Reading::new(pg, cache, KIND_LABEL, CONTAINER);
    let name = pg.name_any();
    let statefulset = read.named(&cache.statefulsets, &name).map(|sts| {
        StatefulSetView::of(&sts, CONTAINER, |image, replicas| {
            let own = render::statefulset(pg, image, replicas).ok();
            common::in_sync(Some(sts.as_ref()), own)
        })
    });

    let services = read.owned(&cache.services);
    let service_in_sync = |kind: ServiceKind| {
        let live = services
            .iter()
            .find(|s| s.name_any() == render::service_name(pg, kind));
        common::in_sync(live.map(|s| s.as_ref()), render::service(pg, kind).ok())
    };
    let scripts = read.named(&cache.configmaps, &render::scripts_name(pg));
    let pdb = read.named(&cache.pdbs, &name);
    let policy = read.named(&cache.network_policies, &render::network_policy_name(pg));
    let network_policy_uid = policy.as_ref().and_then(|p| p.metadata.uid.clone());
    let in_sync = InSync {
        scripts: common::in_sync(scripts.as_deref(), render::scripts(pg).ok()),
        headless: service_in_sync(ServiceKind::Headless),
        read_write: service_in_sync(ServiceKind::ReadWrite),
        read_only: service_in_sync(ServiceKind::ReadOnly),
        pdb: common::in_sync(pdb.as_deref(), render::pdb(pg).ok()),
        network_policy: if pg.spec.network_policy.enabled {
            common::in_sync(policy.as_deref(), render::network_policy(pg).ok())
        } else {
            policy.is_none()
        },
    };

    let lease = read.named(&cache.leases, &render::lease_name(pg)).map(|l| {
        let seen = cache
            .leases
            .moment_seen(l.namespace().as_deref(), &l.name_any());
        lease_view_seen(&l, seen)
    });

    let job_results = read
        .owned(&cache.pods)
        .iter()
        .filter_map(|p| {
            let job = p.labels().get(JOB_NAME_LABEL)?.clone();
            let message = p
                .status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .iter()
                .find_map(|c| c.state.as_ref()?.terminated.as_ref()?.message.clone())?;
            Some((job, message))
        })
        .collect();

    let lease_seconds = read
        .owned(&cache.pods)
        .iter()
        .filter_map(|p| Some((ordinal_of(p, &name)?, pod_lease_seconds(p)?)))
        .collect();

    // What the live instance pods say, by ordinal: read once, asked seven ways.
    let pods = read.owned(&cache.pods);
    let live: Vec<(i32, &Pod)> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| Some((ordinal_of(p, &name)?, p.as_ref())))
        .collect();
    // The cache keeps the annotation as a digest (PostgresCluster's `Operator::KEEP`);
    // an instance reports the digest of the one it judged (`settings::digest_of`).
    let annotation = super::instance_settings::annotation_of(pg);
    let wanted = annotation.as_deref().map(digest);
    let spec_digest = settings::annotation_digest(annotation.as_deref());
    let unconfigured = live
        .iter()
        .filter(|(_, p)| p.annotations().get(settings::SETTINGS_ANNOTATION) != wanted.as_ref())
        .map(|(k, _)| *k)
        .collect();
    let reports: BTreeMap<i32, SettingsReport> = live
        .iter()
        .filter_map(|(k, p)| Some((*k, settings_report(p)?)))
        .collect();
    let unjudged = reports
        .iter()
        .filter(|(_, r)| r.judged.as_ref().is_some_and(|d| *d != spec_digest))
        .map(|(k, _)| *k)
        .collect();
    let judged = reports
        .iter()
        .filter(|(_, r)| r.judged.as_ref() == Some(&spec_digest))
        .map(|(k, _)| *k)
        .collect();
    // What each live pod reports under the pod condition `type_`: whether it holds,
    // and the message.
    let reported = |type_: &str| -> BTreeMap<i32, (bool, String)> {
        live.iter()
            .filter_map(|(k, p)| {
                let (status, message) = pod_condition(p, type_)?;
                Some((*k, (status == "True", message)))
            })
            .collect()
    };
    let archiving = reported(ARCHIVING);
    let archived = live
        .iter()
        .filter_map(|(k, p)| {
            let (_, message) = pod_condition(p, ARCHIVED)?;
            Some((*k, LastArchived::parse(&p.name_any(), &message)?))
        })
        .collect();
    let synchronous = reported(SYNCHRONOUS);
    let answers = live
        .iter()
        .filter_map(|(k, p)| {
            let (_, message) = pod_condition(p, SURVEYED)?;
            Some((*k, Answer::parse(&message)?))
        })
        .collect();
    let instances: BTreeMap<i32, Reported> = live
        .iter()
        .map(|(k, p)| {
            let server = condition_of(p, SERVER).and_then(|c| {
                ServerRole::parse(
                    c.reason.as_deref().unwrap_or_default(),
                    c.message.as_deref().unwrap_or_default(),
                )
            });
            let streaming = condition_status(p, STREAMING).map(|s| s == "True");
            (*k, Reported { server, streaming })
        })
        .collect();
    let lagging = instances
        .iter()
        .filter(|(_, r)| r.streaming == Some(false))
        .map(|(k, _)| *k)
        .collect();
    let recovery_failed = live
        .iter()
        .filter_map(|(k, p)| Some((*k, recovery_failure(p)?)))
        .collect();
    let empty = live
        .iter()
        .filter(|(_, p)| condition_status(p, crate::pod::volume::DATA) == Some("False"))
        .map(|(k, _)| *k)
        .collect();

    let older_managers = live
        .iter()
        .filter(|(_, p)| {
            let installed = p.spec.as_ref().and_then(|s| {
                s.init_containers
                    .as_ref()?
                    .iter()
                    .find(|c| c.name == render::INSTALL_CONTAINER)?
                    .image
                    .clone()
            });
            installed.is_some_and(|i| i != render::instance_image())
        })
        .map(|(k, _)| *k)
        .collect();

    let claim_prefix = format!("{}-{name}-", render::VOLUME);
    let claims = read
        .owned(&cache.pvcs)
        .iter()
        .filter_map(|c| {
            let k = c.name_any().strip_prefix(&claim_prefix)?.parse().ok()?;
            Some((k, c.metadata.uid.clone()?))
        })
        .collect();
    let restore_annotated = live
        .iter()
        .filter_map(|(k, p)| {
            let value = p
                .annotations()
                .get(crate::pod::restore::RESTORE_ANNOTATION)?;
            Some((*k, value.clone()))
        })
        .collect();

    let own = Own {
        claims,
        restore_annotated,
        recovery_failed,
        empty,
        older_managers,
        in_sync,
        lease,
        network_policy_uid,
        job_results,
        answers,
        requests: PgRequests::from_annotations(pg.annotations()),
        lease_seconds,
        longest_lease_seconds: pg.status.as_ref().and_then(|s| s.longest_lease_seconds),
        unconfigured,
        settings: reports,
        unjudged,
        judged,
        synchronous_terms: pg.status.as_ref().and_then(|s| s.synchronous_terms.clone()),
        lagging,
        archiving,
        archived,
        objects: live
            .iter()
            .find(|(_, p)| role_label(p) == Some(Role::Primary))
            .and_then(|(_, p)| ObjectsReport::from_condition(&pod_condition(p, OBJECTS_APPLIED)?.1))
            .filter(|r| r.judged == spec_digest),
        instances,
        synchronous,
        certificates: read
            .named(&cache.secrets, &render::tls::secret_name(pg))
            .map(|secret| CertificatesView::of(&secret)),
    };
    read.observed(
        statefulset,
        role_label,
        || render::cronjob(pg).ok().flatten(),
        own,
    )
}

/// The error of a bootstrap from backups that the pod's instance manager reported
/// before it exited ([`crate::pod::recovery`]).
fn recovery_failure(pod: &Pod) -> Option<String> {
    let (status, message) = pod_condition(pod, crate::pod::recovery::RECOVERY)?;
    (status == "False").then_some(message)
}

/// What the pod's instance manager reports of its settings: its condition
/// [`SETTINGS_APPLIED`], if it carries one this version can read.
pub fn settings_report(pod: &Pod) -> Option<SettingsReport> {
    let condition = condition_of(pod, SETTINGS_APPLIED)?;
    SettingsReport::from_condition(&condition.status, condition.message.as_deref()?)
}

/// The status of the pod's condition `type_`, if it has one.
fn condition_status<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    pod_condition(pod, type_).map(|(status, _)| status)
}

/// The status and message of the pod's condition `type_`, if it has one.
fn pod_condition<'a>(pod: &'a Pod, type_: &str) -> Option<(&'a str, String)> {
    condition_of(pod, type_).map(|c| (c.status.as_str(), c.message.clone().unwrap_or_default()))
}

/// The pod's condition `type_`, if it has one.
fn condition_of<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// The pod's `lockstep.dev/role` label, if it is a known role.
fn role_label(pod: &Pod) -> Option<Role> {
    pod.labels()
        .get(ROLE_LABEL)
        .and_then(|r| r.parse::<Role>().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    #[test]
    fn a_renewal_time_is_rounded_up_to_the_second_so_an_expiry_is_never_early() {
        let renewed_at = |nanos: i32| {
            let lease = Lease {
                spec: Some(LeaseSpec {
                    renew_time: Some(MicroTime(
                        k8s_openapi::jiff::Timestamp::new(1000, nanos).expect("a time"),
                    )),
                    ..LeaseSpec::default()
                }),
                ..Lease::default()
            };
            lease_view(&lease).renewed.map(|t| t.timestamp())
        };
        assert_eq!(renewed_at(0), Some(1000));
        assert_eq!(renewed_at(1), Some(1001));
        assert_eq!(renewed_at(999_999_999), Some(1001));
    }
}
