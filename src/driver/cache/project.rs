//! What each kind keeps once projected ([`Project`]): the parts no machine reads are
//! dropped before an object is stored.

#[allow(clippy::wildcard_imports)] // the cache's vocabulary, imported once in its parent
use super::*;

/// Reduce an object to what machines read, before it is stored.
pub trait Project:
    Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// Drop what no machine reads, keeping what the operator declared in `keep`. The
    /// default drops `managedFields`.
    fn project(&mut self, keep: &Keep) {
        let _ = keep;
        self.meta_mut().managed_fields = None;
    }

    /// Whether [`Project::quiet`] clears anything (so comparisons need to apply it).
    const HAS_QUIET: bool = false;

    /// Clear what machines read but what must not trigger a reconcile by itself when
    /// it changes (a Lease's renewal time). The stored object keeps it. The default
    /// clears nothing.
    fn quiet(&mut self) {}

    /// A value whose every change machines time on this process's own clock (a Lease's
    /// renewal time, written on the holder's clock): the store keeps when it first saw
    /// each ([`super::Owned::moment_seen`]). The default: none.
    fn moment(&self) -> Option<String> {
        None
    }
}

impl Project for Service {
    /// Keeps metadata and spec (the drift check reads what Lockstep applies); the status
    /// (load balancer ingress) is never read.
    fn project(&mut self, _: &Keep) {
        self.meta_mut().managed_fields = None;
        self.status = None;
    }
}

impl Project for ConfigMap {}

/// The annotation by which an owned Secret names the keys of its data the cache keeps
/// (comma-separated); every other key is dropped before the Secret is stored.
pub const CACHED_KEYS: &str = "lockstep.dev/cached-keys";

impl Project for Secret {
    /// Keeps metadata, and of the data only the keys the Secret names in [`CACHED_KEYS`]
    /// (none by default): a machine that must read part of a Secret it owns (a CA it
    /// signs with) says so on the Secret, and no password it does not read is held.
    fn project(&mut self, _: &Keep) {
        self.meta_mut().managed_fields = None;
        self.string_data = None;
        let kept: Vec<String> = self
            .annotations()
            .get(CACHED_KEYS)
            .map(|keys| keys.split(',').map(|k| k.trim().to_owned()).collect())
            .unwrap_or_default();
        self.data = self
            .data
            .take()
            .map(|data| {
                data.into_iter()
                    .filter(|(k, _)| kept.contains(k))
                    .collect::<std::collections::BTreeMap<_, _>>()
            })
            .filter(|data| !data.is_empty());
    }
}

impl Project for StatefulSet {
    /// Keeps metadata and spec (the drift check, image, replicas, claim size) and, of
    /// the status, `observedGeneration` (whether the controller has caught up). Replica
    /// counts are read from the pods.
    fn project(&mut self, _: &Keep) {
        self.meta_mut().managed_fields = None;
        self.status = self.status.take().map(|status| StatefulSetStatus {
            observed_generation: status.observed_generation,
            ..StatefulSetStatus::default()
        });
    }
}

impl Project for CronJob {
    /// Keeps metadata and spec (the drift check); the status (last schedule) is never
    /// read: the Jobs it makes are watched themselves.
    fn project(&mut self, _: &Keep) {
        self.meta_mut().managed_fields = None;
        self.status = None;
    }
}

impl Project for PodDisruptionBudget {
    /// Keeps metadata and spec (the drift check); the status is never read.
    fn project(&mut self, _: &Keep) {
        self.meta_mut().managed_fields = None;
        self.status = None;
    }
}

impl Project for NetworkPolicy {
    /// Keeps metadata and spec (the drift check).
    fn project(&mut self, _: &Keep) {
        self.meta_mut().managed_fields = None;
    }
}

impl Project for Pod {
    /// Keeps, of the metadata, what identifies the pod and what is read of it (name,
    /// namespace, UID, creation and deletion timestamps, Lockstep's and the Job
    /// controller's labels, the owner references' kind, name, UID and controller
    /// flag); each container's name, image and the literal environment variables the
    /// operator keeps ([`Keep::env_prefix`]); the Ready condition's type and status while it holds
    /// (`True`): what readiness, images, ordinals and roles are read from; the type,
    /// status, reason and message of the conditions a pod's own agent writes (types
    /// under [`LOCKSTEP_CONDITION_PREFIX`]); the digests of the annotations the operator
    /// keeps ([`Keep::digested_annotations`]). Other annotations,
    /// other environment variables and the labels other controllers add
    /// (`controller-revision-hash`, `pod-index`, …) are dropped.
    ///
    /// A Ready condition that does not hold (`False`, `Unknown`) is dropped like an
    /// absent one: machines read readiness as "the Ready condition is True"
    /// (`common::observe::pod_ready`), so a pod being scheduled and reported not ready
    /// yet wakes no machine; becoming ready, or losing readiness, does.
    fn project(&mut self, keep: &Keep) {
        slim_metadata(self.meta_mut(), keep);
        self.spec = self.spec.take().map(|spec| PodSpec {
            containers: spec
                .containers
                .into_iter()
                .map(|c| Container {
                    name: c.name,
                    image: c.image,
                    env: c
                        .env
                        .map(|env| {
                            env.into_iter()
                                .filter(|e| keep.keeps_env(&e.name) && e.value.is_some())
                                .collect::<Vec<_>>()
                        })
                        .filter(|env| !env.is_empty()),
                    ..Container::default()
                })
                .collect(),
            ..PodSpec::default()
        });
        // A Job's pod also keeps what its containers reported when they terminated (a
        // base backup's first recoverable point, in its termination message); a server pod's container
        // statuses (restarts, probes) are dropped.
        let job_pod = self.labels().contains_key(JOB_NAME_LABEL);
        self.status = self.status.take().map(|status| PodStatus {
            conditions: status.conditions.map(|conditions| {
                conditions
                    .into_iter()
                    .filter_map(|c| {
                        if c.type_ == "Ready" && c.status == "True" {
                            Some(PodCondition {
                                type_: c.type_,
                                status: c.status,
                                ..PodCondition::default()
                            })
                        } else if c.type_.starts_with(LOCKSTEP_CONDITION_PREFIX) {
                            // What a pod's own agent reports (a PostgreSQL instance's
                            // settings): its words, not its times.
                            Some(PodCondition {
                                type_: c.type_,
                                status: c.status,
                                reason: c.reason,
                                message: c.message,
                                ..PodCondition::default()
                            })
                        } else {
                            None
                        }
                    })
                    .collect()
            }),
            container_statuses: status
                .container_statuses
                .filter(|_| job_pod)
                .map(|statuses| statuses.into_iter().map(terminated_only).collect()),
            ..PodStatus::default()
        });
    }
}

/// Reduce the metadata of an object Lockstep reads only by name, labels, owner and
/// version (pods, claims) to those: no managedFields, annotations, finalizers,
/// `generateName` or `generation`; only the labels Lockstep sets or reads
/// (`app.kubernetes.io/*`, `lockstep.dev/*`, [`JOB_NAME_LABEL`]); owner references
/// without `apiVersion` and `blockOwnerDeletion`.
fn slim_metadata(meta: &mut ObjectMeta, keep: &Keep) {
    meta.managed_fields = None;
    // The annotations a machine writes and reads back stay, each as the digest of its
    // value: enough to tell whether it holds what the machine would write, at a fixed
    // cost.
    meta.annotations = meta
        .annotations
        .take()
        .map(|annotations| {
            annotations
                .into_iter()
                .filter(|(key, _)| keep.digested_annotations.contains(&key.as_str()))
                .map(|(key, value)| (key, digest(&value)))
                .collect::<BTreeMap<_, _>>()
        })
        .filter(|kept| !kept.is_empty());
    meta.finalizers = None;
    meta.generate_name = None;
    meta.generation = None;
    if let Some(labels) = meta.labels.as_mut() {
        labels.retain(|key, _| {
            key.starts_with("app.kubernetes.io/")
                || key.starts_with("lockstep.dev/")
                || key == JOB_NAME_LABEL
        });
    }
    if let Some(references) = meta.owner_references.as_mut() {
        for reference in references {
            reference.api_version = String::new();
            reference.block_owner_deletion = None;
        }
    }
}

/// What an operator's machines read of their objects beyond what every machine reads
/// ([`crate::driver::Operator::KEEP`]): the driver knows no machine's annotations or
/// variables, each operator declares its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keep {
    /// The annotations kept on pods and claims, each as its [`digest`]: what a machine
    /// writes on them and reads back (PostgresCluster's settings and in-place restore).
    pub digested_annotations: &'static [&'static str],
    /// The prefix of the literal environment variables kept of each pod container
    /// (what a pod was created with: PostgresCluster reads the lease duration its fence
    /// runs with); `None`: none kept.
    pub env_prefix: Option<&'static str>,
}

impl Keep {
    /// Nothing beyond what every machine reads.
    pub const NOTHING: Keep = Keep {
        digested_annotations: &[],
        env_prefix: None,
    };

    /// Whether a container's variable `name` is kept.
    #[must_use]
    pub fn keeps_env(&self, name: &str) -> bool {
        self.env_prefix
            .is_some_and(|prefix| name.starts_with(prefix))
    }
}

impl Default for Keep {
    fn default() -> Self {
        Keep::NOTHING
    }
}

/// What a projected object keeps of a [`Keep::digested_annotations`] `value`: a digest
/// that differs for different values (64-bit FNV-1a, so it is the same in every process
/// and every build: an instance manager can say which value it judged, and the operator
/// compare it with the one it wrote).
#[must_use]
pub fn digest(value: &str) -> String {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = value.bytes().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    });
    format!("{hash:016x}")
}

/// The prefix of the pod condition types Lockstep's agents write on their own pods
/// (`lockstep.dev/SettingsApplied`), which the cache keeps.
pub const LOCKSTEP_CONDITION_PREFIX: &str = "lockstep.dev/";

/// The label the Job controller puts on its pods.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";

/// A container status reduced to its name and how it terminated (exit code, message).
fn terminated_only(status: ContainerStatus) -> ContainerStatus {
    ContainerStatus {
        name: status.name,
        state: status.state.map(|state| ContainerState {
            terminated: state.terminated.map(|t| ContainerStateTerminated {
                exit_code: t.exit_code,
                message: t.message,
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

impl Project for Lease {
    /// Keeps metadata and the spec: holder, renewal time, duration, transitions.
    /// A renewal alone (only `spec.renewTime` changed) is stored but triggers nothing:
    /// the holder renews every few seconds, and the machine computes the expiry it
    /// waits for and asks for a requeue at that time instead.
    fn project(&mut self, _: &Keep) {
        self.meta_mut().managed_fields = None;
    }

    const HAS_QUIET: bool = true;

    fn quiet(&mut self) {
        if let Some(spec) = self.spec.as_mut() {
            spec.renew_time = None;
        }
    }

    /// The renewal time: an expiry is judged from when this process saw it change too,
    /// not from the holder's clock alone.
    fn moment(&self) -> Option<String> {
        Some(self.spec.as_ref()?.renew_time.as_ref()?.0.to_string())
    }
}

impl Project for Job {
    /// Keeps metadata and, of the status, the conditions and completion time: a Job is
    /// judged by its labels and its outcome; its pod template is never read back.
    fn project(&mut self, _: &Keep) {
        self.meta_mut().managed_fields = None;
        self.spec = None;
        self.status = self.status.take().map(|status| JobStatus {
            conditions: status.conditions,
            completion_time: status.completion_time,
            ..JobStatus::default()
        });
    }
}

impl Project for PersistentVolumeClaim {
    /// Keeps the metadata `slim_metadata` keeps and the requested resources (what
    /// volume expansion reads). The phase (bound or not), the binding annotations, the
    /// protection finalizer and the creation time are never read, so a claim's binding
    /// wakes no machine.
    fn project(&mut self, keep: &Keep) {
        slim_metadata(self.meta_mut(), keep);
        self.meta_mut().creation_timestamp = None;
        self.spec = self.spec.take().map(|spec| PersistentVolumeClaimSpec {
            resources: spec.resources,
            ..PersistentVolumeClaimSpec::default()
        });
        self.status = None;
    }
}
