//! The side effects the DistributedDB machine asks for, as data, and the names they
//! carry (hook and backup Job keys, the StatefulSet's shape).

use super::api::{DistributedDBSpec, Hook};
use super::state::DdbState;
pub use crate::machines::common::actions::JobAction;
use crate::machines::common::meta::short_hash;
use crate::machines::common::tls::Renewal;

/// Every hook, for messages, Job keys and the hook's `HOOK` variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "kebab-case")]
pub enum HookPhase {
    /// Before the pod is replaced (an upgrade).
    Pre,
    /// After its replacement is Ready (an upgrade).
    Post,
    /// Before a member's pod is created.
    PreScaleUp,
    /// After the added member's pod is Ready.
    PostScaleUp,
    /// Before a member's pod is removed.
    PreScaleDown,
    /// After the removed member's pod is gone.
    PostScaleDown,
}

impl HookPhase {
    /// `pre-upgrade hook`, `pre-scale-up hook`, ...
    pub fn describe(self) -> &'static str {
        match self {
            HookPhase::Pre => "pre-upgrade hook",
            HookPhase::Post => "post-upgrade hook",
            HookPhase::PreScaleUp => "pre-scale-up hook",
            HookPhase::PostScaleUp => "post-scale-up hook",
            HookPhase::PreScaleDown => "pre-scale-down hook",
            HookPhase::PostScaleDown => "post-scale-down hook",
        }
    }

    /// The hook's spec, if configured.
    pub fn of(self, spec: &DistributedDBSpec) -> Option<&Hook> {
        let upgrade = || spec.upgrade.as_ref();
        let scaling = || spec.scaling.as_ref();
        match self {
            HookPhase::Pre => upgrade()?.pre_hook.as_ref(),
            HookPhase::Post => upgrade()?.post_hook.as_ref(),
            HookPhase::PreScaleUp => scaling()?.pre_scale_up.as_ref(),
            HookPhase::PostScaleUp => scaling()?.post_scale_up.as_ref(),
            HookPhase::PreScaleDown => scaling()?.pre_scale_down.as_ref(),
            HookPhase::PostScaleDown => scaling()?.post_scale_down.as_ref(),
        }
    }
}

/// What the StatefulSet should hold in a state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// The pod template's image.
    pub image: String,
    /// `spec.replicas`.
    pub replicas: i32,
    /// The volume claim template's size. Claim templates are immutable, so this is the
    /// live StatefulSet's when there is one; growth is applied to the claims directly.
    pub claim_size: String,
}

/// A side effect of the DistributedDB machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DdbAction {
    /// Create `<name>-tls` (a new CA, the member and client certificates) if absent.
    CreateCertificates,
    /// Renew the leaves of `<name>-tls` (the Secret as read), signed by its CA.
    RenewCertificates(Renewal),
    /// Apply the headless Service.
    EnsureService,
    /// Apply the PodDisruptionBudget.
    EnsurePdb,
    /// Apply the StatefulSet in this shape.
    EnsureStatefulSet(Shape),
    /// Evict pod `ordinal` if it still has `uid`, through the eviction API: the
    /// PodDisruptionBudget refuses it while another member is down by the API server's
    /// count, which a decision made on a lagging cache may not have seen yet.
    EvictPod {
        /// The ordinal.
        ordinal: i32,
        /// The UID precondition.
        uid: String,
    },
    /// Delete pod `ordinal`, which never became Ready at an earlier image, only as it
    /// was read (`uid` at `version`): one that became Ready since is a member now.
    DeleteUnstarted {
        /// The ordinal.
        ordinal: i32,
        /// The UID precondition.
        uid: String,
        /// The resourceVersion precondition.
        version: String,
    },
    /// Create a hook Job (if absent).
    RunHook {
        /// Pre or post.
        phase: HookPhase,
        /// The pod it is about.
        ordinal: i32,
        /// The Job's key.
        key: String,
        /// The image the cluster is upgraded from.
        from: String,
        /// The image it is upgraded to (the hook's default image).
        to: String,
    },
    /// Grow pod `ordinal`'s volume claim to `size`.
    ExpandVolume {
        /// The ordinal.
        ordinal: i32,
        /// The new size.
        size: String,
    },
    /// Run a backup Job, keep the backup CronJob as the spec wants it, or delete a
    /// finished Job (hook Jobs are pruned once the cluster is at rest).
    Jobs(JobAction),
}

impl From<JobAction> for DdbAction {
    fn from(action: JobAction) -> Self {
        DdbAction::Jobs(action)
    }
}

/// The key of the hook Job for `phase` of pod `ordinal` (with `pod_uid`) moving to `to`.
pub fn hook_key(phase: HookPhase, ordinal: i32, to: &str, pod_uid: &str, attempt: u32) -> String {
    let phase: &str = phase.into();
    format!("{phase}-{ordinal}-{}-{attempt}", short_hash(&[to, pod_uid]))
}

pub use crate::machines::common::on_demand::key as backup_key;

/// What the StatefulSet should hold in `state` (`None` while deleting: nothing is
/// created or restored then). `live_claim` is the live claim template's size.
pub fn shape(
    spec: &DistributedDBSpec,
    state: &DdbState,
    live_claim: Option<&str>,
) -> Option<Shape> {
    let (image, replicas) = match state {
        DdbState::Creating => (spec.image.clone(), spec.replicas),
        DdbState::Ready { version, replicas }
        | DdbState::Scaling {
            version, replicas, ..
        }
        | DdbState::BackingUp {
            version, replicas, ..
        } => (version.clone(), *replicas),
        DdbState::Upgrading(u) => (u.to.clone(), u.replicas),
        DdbState::Finalizing { .. } | DdbState::Finalized => return None,
    };
    Some(Shape {
        image,
        replicas,
        claim_size: live_claim.unwrap_or(&spec.storage.size).to_owned(),
    })
}
