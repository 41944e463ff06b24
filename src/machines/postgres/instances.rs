//! `status.instances`: each instance as `kubectl describe pgc` shows it — its role label,
//! whether it is Ready, what its server is and on which timeline (as its manager reports
//! it: [`crate::pod::server`]), and whether a standby streams.

use super::api::InstanceStatus;
use super::observe::Observed;
pub use crate::pod::server::ServerRole;

/// What a live instance pod (by ordinal) reports of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reported {
    /// Its server's role and timeline.
    pub server: Option<ServerRole>,
    /// For a standby, whether it streams ([`crate::pod::streaming`]).
    pub streaming: Option<bool>,
}

/// `status.instances` of the cluster `name`: every live instance pod, by ordinal.
#[must_use]
pub fn project(observed: &Observed, name: &str) -> Vec<InstanceStatus> {
    observed
        .pods
        .iter()
        .filter(|(_, p)| !p.terminating)
        .map(|(k, p)| {
            let said = observed.own.instances.get(k).copied().unwrap_or_default();
            InstanceStatus {
                pod: format!("{name}-{k}"),
                role: p.role.map(|r| <&str>::from(r).to_owned()),
                ready: p.ready,
                server: said
                    .server
                    .map(|s| if s.primary { "primary" } else { "standby" }.to_owned()),
                timeline: said.server.map(|s| s.timeline),
                streaming: said.streaming,
            }
        })
        .collect()
}
