//! Specs the DistributedDB unit tests and model check both start from.

use std::collections::BTreeMap;

use super::api::{
    BackupPolicy, DbPort, DistributedDBSpec, Hook, ScalingPolicy, Storage, UpgradePolicy,
};

/// A spec of `replicas` pods at `image`, without hooks or backups.
pub(crate) fn spec(image: &str, replicas: i32) -> DistributedDBSpec {
    DistributedDBSpec {
        replicas,
        image: image.to_owned(),
        storage: Storage {
            storage_class_name: None,
            size: "1Gi".to_owned(),
        },
        backup_policy: None,
        bootstrap: None,
        upgrade: None,
        scaling: None,
        tls: None,
        resources: None,
        ports: vec![DbPort {
            name: "db".to_owned(),
            port: 8080,
        }],
        env: Vec::new(),
        pod_labels: BTreeMap::new(),
        pod_annotations: BTreeMap::new(),
        placement: None,
        readiness_probe: None,
        liveness_probe: None,
    }
}

/// A hook running `true` within 60 s, retried `retry_limit` times.
pub(crate) fn hook(retry_limit: i32) -> Hook {
    Hook {
        image: None,
        command: vec!["true".to_owned()],
        args: Vec::new(),
        env: Vec::new(),
        timeout_seconds: 60,
        retry_limit,
        pod_labels: BTreeMap::new(),
        pod_annotations: BTreeMap::new(),
    }
}

/// `s` with a pre- and a post-hook, each retried `retry_limit` times.
pub(crate) fn with_hooks(mut s: DistributedDBSpec, retry_limit: i32) -> DistributedDBSpec {
    s.upgrade = Some(UpgradePolicy {
        pre_hook: Some(hook(retry_limit)),
        post_hook: Some(hook(retry_limit)),
    });
    s
}

/// `s` with every scaling hook, each retried `retry_limit` times.
pub(crate) fn with_scaling_hooks(mut s: DistributedDBSpec, retry_limit: i32) -> DistributedDBSpec {
    s.scaling = Some(ScalingPolicy {
        pre_scale_up: Some(hook(retry_limit)),
        post_scale_up: Some(hook(retry_limit)),
        pre_scale_down: Some(hook(retry_limit)),
        post_scale_down: Some(hook(retry_limit)),
    });
    s
}

/// A backup policy to `s3://b` at 03:00 daily.
pub(crate) fn policy() -> BackupPolicy {
    BackupPolicy {
        schedule: "0 3 * * *".to_owned(),
        suspend: false,
        s3_endpoint: "https://s3.example".to_owned(),
        s3_credentials_secret: "s3".to_owned(),
        bucket: "b".to_owned(),
        prefix: None,
        retention: None,
        image: "backup:1".to_owned(),
        command: Vec::new(),
        args: Vec::new(),
        timeout_seconds: 600,
        pod_labels: BTreeMap::new(),
        pod_annotations: BTreeMap::new(),
    }
}
