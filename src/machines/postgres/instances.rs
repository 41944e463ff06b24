//! `status.instances`: each instance as `kubectl describe pgc` shows it — its role label,
//! whether it is Ready, what its server is and on which timeline, and whether a standby
//! streams.
//!
//! What the server is comes from its instance manager: the pod condition [`SERVER`],
//! written on its own pod (as [`super::archiving`]'s) when it changes.
//!
//! | status | reason | message |
//! |---|---|---|
//! | `True` | [`reason::PRIMARY`] | `a primary on timeline <n>` |
//! | `True` | [`reason::STANDBY`] | `a standby on timeline <n>` |
//!
//! # Guarantees
//! - **Written when it changes**: at a start, a promotion, a demotion and a timeline
//!   switch; never for positions or lag, which change with every commit. Those are on
//!   each instance's `/metrics` and in `kubectl lockstep status`, which read them when
//!   asked.
//! - A server that stops answering leaves its last report: the entry's `ready` says
//!   whether the pod serves.
//! - The timeline never goes back while a manager runs (a standby whose WAL receiver
//!   stopped reads it from its last restartpoint, which may predate the switch).
//!   A primary just promoted reports the timeline it left until the checkpoint that
//!   follows its promotion (the promote Job's), seconds later.
//!
//! # Assumptions
//! - The manager's report and [`ServerRole::parse`] share [`ON_TIMELINE`].

use super::api::InstanceStatus;
use super::observe::Observed;

/// The pod condition's type.
pub const SERVER: &str = "lockstep.dev/Server";

/// What precedes the timeline in the condition's message.
pub const ON_TIMELINE: &str = " on timeline ";

/// The condition's reasons.
pub mod reason {
    /// The server accepts writes.
    pub const PRIMARY: &str = "Primary";
    /// The server is in recovery.
    pub const STANDBY: &str = "Standby";
}

/// What a running server is, as its manager reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerRole {
    /// It accepts writes (else it is in recovery).
    pub primary: bool,
    /// Its timeline.
    pub timeline: u32,
}

impl ServerRole {
    /// The pod condition's status, reason and message.
    #[must_use]
    pub fn condition(self) -> (&'static str, &'static str, String) {
        let (why, what) = if self.primary {
            (reason::PRIMARY, "a primary")
        } else {
            (reason::STANDBY, "a standby")
        };
        ("True", why, format!("{what}{ON_TIMELINE}{}", self.timeline))
    }

    /// What a pod reported with `reason` and `message`; `None` if it does not say it as
    /// [`ServerRole::condition`] does.
    #[must_use]
    pub fn parse(reason: &str, message: &str) -> Option<ServerRole> {
        let primary = match reason {
            reason::PRIMARY => true,
            reason::STANDBY => false,
            _ => return None,
        };
        let (_, timeline) = message.rsplit_once(ON_TIMELINE)?;
        Some(ServerRole {
            primary,
            timeline: timeline.trim().parse().ok()?,
        })
    }
}

/// What a live instance pod (by ordinal) reports of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reported {
    /// Its server's role and timeline.
    pub server: Option<ServerRole>,
    /// For a standby, whether it streams ([`super::streaming`]).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_server_reports_is_read_back_as_written() {
        for role in [
            ServerRole {
                primary: true,
                timeline: 3,
            },
            ServerRole {
                primary: false,
                timeline: 12,
            },
        ] {
            let (status, why, message) = role.condition();
            assert_eq!(status, "True");
            assert_eq!(ServerRole::parse(why, &message), Some(role), "{message}");
        }
        assert_eq!(
            ServerRole {
                primary: true,
                timeline: 3
            }
            .condition()
            .2,
            "a primary on timeline 3"
        );
        assert_eq!(ServerRole::parse("Other", "a primary on timeline 3"), None);
        assert_eq!(ServerRole::parse(reason::PRIMARY, "a primary"), None);
    }
}
