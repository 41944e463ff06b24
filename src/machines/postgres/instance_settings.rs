//! The pods' settings annotation ([`crate::pod::settings`]) made from a cluster's spec.

use kube::ResourceExt;

use super::api::PostgresCluster;
use crate::pod::settings::{InstanceSettings, annotation};
use crate::pod::synchronous::SyncStandbys;

impl InstanceSettings {
    /// The settings of `pg`'s instances.
    #[must_use]
    pub fn of(pg: &PostgresCluster) -> Self {
        InstanceSettings {
            postgresql: pg.spec.postgresql.clone(),
            synchronous: pg
                .spec
                .synchronous
                .as_ref()
                .map(|s| SyncStandbys::new(s, &pg.name_any(), pg.spec.replicas)),
            roles: pg.spec.roles.clone(),
            databases: pg.spec.databases.clone(),
        }
    }
}

/// The value of [`crate::pod::settings::SETTINGS_ANNOTATION`] on `pg`'s pods (what [`annotation`] makes of
/// [`InstanceSettings::of`]).
#[must_use]
pub fn annotation_of(pg: &PostgresCluster) -> Option<String> {
    annotation(&InstanceSettings::of(pg))
}
