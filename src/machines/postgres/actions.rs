//! The side effects the PostgresCluster machine asks for, as data, the roles pods are
//! labelled with, and the names actions carry.

use std::sync::OnceLock;

use super::api::PostgresClusterSpec;
pub use crate::machines::common::actions::JobAction;
use crate::machines::common::meta::short_hash;

pub use crate::pod::Role;

/// What a hand-over of the primary Lease does with the position the old primary
/// released (`lockstep.dev/released-lsn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LsnGate {
    /// Kept: the new holder's agent promotes only once it has received that position
    /// (a planned switchover loses no acknowledged commit).
    Keep,
    /// Removed: a failover promises the most advanced standby, not the old primary's
    /// last commits. Its release can name a position nobody received (it came back
    /// after a crash, wrote, and was demoted before a standby reconnected); kept, it
    /// would hold the new primary back forever.
    Waive,
}

/// Why a pod is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteCause {
    /// It is recreated at the target image.
    Upgrade,
    /// It is a failed primary: it must come back as a standby.
    Fence,
}

/// The Services the cluster has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, strum::EnumIter)]
pub enum ServiceKind {
    /// `<name>`: headless, every instance's stable DNS name.
    Headless,
    /// `<name>-rw`: the primary.
    ReadWrite,
    /// `<name>-ro`: the replicas.
    ReadOnly,
}

/// A side effect of the PostgresCluster machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgAction {
    /// Create the generated credentials Secret (random passwords) if absent.
    CreateCredentials,
    /// Renew the leaves of `<name>-tls` (the Secret as read), signed by its CA.
    RenewCertificates(crate::machines::common::tls::Renewal),
    /// Apply the ConfigMap holding the pod scripts.
    EnsureScripts,
    /// Apply a Service.
    EnsureService(ServiceKind),
    /// Apply the PodDisruptionBudget.
    EnsurePdb,
    /// Apply the NetworkPolicy (`spec.networkPolicy.enabled`).
    EnsureNetworkPolicy,
    /// Delete the NetworkPolicy made while `spec.networkPolicy.enabled` was true, only
    /// the object observed (by its UID).
    DeleteNetworkPolicy {
        /// The observed policy's UID.
        uid: String,
    },
    /// Apply the StatefulSet with this image and replica count.
    EnsureStatefulSet {
        /// The template's image.
        image: String,
        /// `spec.replicas`.
        replicas: i32,
    },
    /// Set pod `ordinal`'s role label, only on the pod as observed (`uid` at `version`):
    /// a stale decision cannot move a role label on a pod that changed since.
    Label {
        /// The ordinal.
        ordinal: i32,
        /// The role.
        role: Role,
        /// The UID of the pod as observed.
        uid: String,
        /// Its resourceVersion as observed.
        version: String,
    },
    /// Set pod `ordinal`'s settings annotation to the spec's `postgresql` (removed when
    /// nothing is set), only on the pod as observed (`uid` at `version`). Its instance
    /// manager reloads the server from it ([`crate::pod::settings`]).
    Configure {
        /// The ordinal.
        ordinal: i32,
        /// The UID of the pod as observed.
        uid: String,
        /// Its resourceVersion as observed.
        version: String,
    },
    /// Create the primary Lease `<name>-primary` (if absent), naming `holder`
    /// (`<pod-name>/<pod-uid>`) with `renewTime` = `at`, or nobody.
    CreateLease {
        /// The pod allowed to be writable, if any.
        holder: Option<String>,
        /// The operator's clock (the renewal time the holder starts from).
        at: chrono::DateTime<chrono::Utc>,
        /// The `leaseDurationSeconds` it carries: for a Lease created in place of one
        /// that vanished, the longest `L` any former holder may run with (at least
        /// `status.longestLeaseSeconds`, or [`super::api::MAX_LEASE_SECONDS`] when the
        /// status does not say), so that every later expiry judgement of it waits that
        /// long.
        seconds: i64,
        /// Created before any volume claim, StatefulSet or pod of the cluster existed:
        /// nobody ever held it (the annotation [`super::observe::NEVER_HELD`]), so it is
        /// handed to pod 0 without waiting.
        never_held: bool,
    },
    /// Hand the primary Lease to `holder` (or to nobody), only on the Lease as observed
    /// (`uid` at `version`): a concurrent renewal or release makes it refused and
    /// re-decided. Clears the released-by annotation; `renewTime` = `acquireTime` = `at`.
    HandLease {
        /// The new holder (`<pod-name>/<pod-uid>`), or nobody.
        holder: Option<String>,
        /// Whether the old primary's released position stays a condition of the
        /// promotion.
        gate: LsnGate,
        /// `leaseTransitions` after the hand-over.
        transitions: i32,
        /// The operator's clock.
        at: chrono::DateTime<chrono::Utc>,
        /// The Lease's UID as observed.
        uid: String,
        /// Its resourceVersion as observed.
        version: String,
    },
    /// Write the in-place restore `value` ([`crate::pod::restore::RESTORE_ANNOTATION`]) on
    /// pod `ordinal`, only on the pod as observed (`uid` at `version`).
    AnnotateRestore {
        /// The ordinal.
        ordinal: i32,
        /// The annotation's value ([`crate::pod::restore::annotation_value`]).
        value: String,
        /// The UID of the pod as observed.
        uid: String,
        /// Its resourceVersion as observed.
        version: String,
    },
    /// Delete instance `ordinal`'s volume claim if it still has `uid` (an in-place
    /// restore: its data is replaced from the repository).
    DeleteClaim {
        /// The ordinal.
        ordinal: i32,
        /// The UID precondition.
        uid: String,
    },
    /// Delete the primary Lease if it still has `uid` (an in-place restore, once its
    /// holder is certainly fenced: the restored primary starts a new one).
    DeleteLease {
        /// The UID precondition.
        uid: String,
    },
    /// Delete pod `ordinal` if it still has `uid`.
    DeletePod {
        /// The ordinal.
        ordinal: i32,
        /// The UID precondition.
        uid: String,
        /// Why.
        cause: DeleteCause,
    },
    /// Ask the standbys for their WAL positions: write `token` on the Lease (the
    /// annotation [`crate::pod::answers::SURVEY`]), on the Lease as observed; each standby's
    /// instance manager answers it on its own pod ([`crate::pod::answers`]).
    AskSurvey {
        /// The survey's token ([`survey_key`]).
        token: String,
        /// The Lease's UID as observed.
        uid: String,
        /// Its resourceVersion as observed.
        version: String,
    },
    /// Run a backup Job, keep the backup CronJob as the spec wants it, or delete a
    /// finished Job.
    Jobs(JobAction),
}

impl From<JobAction> for PgAction {
    fn from(action: JobAction) -> Self {
        PgAction::Jobs(action)
    }
}

/// The token of survey `attempt` of the failover of the primary with `old_uid`, asked
/// while the Lease's term is `term`: unique per failover and attempt, so an answer to
/// another survey never counts.
pub fn survey_key(old_uid: &str, term: i32, attempt: u32) -> String {
    format!("survey-{}-{term}-{attempt}", short_hash(&[old_uid]))
}

pub use crate::machines::common::on_demand::key as backup_key;

/// The repository of the server image when `spec.image` is unset, unless the operator
/// was told otherwise: the project's PostgreSQL images (`tools/images/build.sh`
/// `postgres-<major>`, pushed by `tools/registry/push.sh`).
pub const DEFAULT_POSTGRES_IMAGE_REPOSITORY: &str = "ghcr.io/lockstep-dev/postgres";

static POSTGRES_IMAGE_REPOSITORY: OnceLock<String> = OnceLock::new();

/// Sets the repository of the default server image (`lockstep run
/// --postgres-image-repository`), once per process, at start; a later call is ignored
/// (the first one wins), so every decision of a process agrees, as with the instance
/// image.
pub fn set_postgres_image_repository(repository: String) {
    let _ = POSTGRES_IMAGE_REPOSITORY.set(repository);
}

/// The repository of the default server image: the one set at start, else
/// [`DEFAULT_POSTGRES_IMAGE_REPOSITORY`].
pub fn postgres_image_repository() -> &'static str {
    POSTGRES_IMAGE_REPOSITORY
        .get()
        .map_or(DEFAULT_POSTGRES_IMAGE_REPOSITORY, String::as_str)
}

/// The image a spec asks for under the process's configured repository
/// ([`image_in`] with [`postgres_image_repository`]).
pub fn spec_image(spec: &PostgresClusterSpec) -> String {
    image_in(spec, postgres_image_repository())
}

/// The image a spec asks for: `spec.image`, else `<repository>:<version>`.
pub fn image_in(spec: &PostgresClusterSpec, repository: &str) -> String {
    spec.image
        .clone()
        .unwrap_or_else(|| format!("{repository}:{}", spec.version))
}
