//! Synchronous replication (`spec.synchronous`): a commit is acknowledged only once
//! `number` standbys have it, so a failover that promotes one of them loses nothing
//! acknowledged.
//!
//! The operator renders the request and the cluster's members into the pods'
//! settings annotation ([`super::settings::InstanceSettings`]); each instance manager
//! turns them into `synchronous_standby_names` ([`standby_names`]), naming every other
//! member by its `application_name` (the pod name), and applies it by a reload. The
//! value is the same on every member, so a promoted standby enforces it at once.
//!
//! # Guarantees
//! - `dataDurability: Required` (the default): the primary always names `number` of the
//!   other members, whether or not they are connected. A commit waits (it is not
//!   acknowledged) until that many have flushed it. A failover promotes only a member the
//!   survey read among at least `others - number + 1` of the other members (every
//!   acknowledged commit is on `number` of them, so on one of those read), the most
//!   advanced by (receive, replay); with fewer, it waits, Degraded, and surveys again.
//! - `dataDurability: Preferred`: as `Required` while at least `number` standbys stream;
//!   below that the primary drops to asynchronous replication (an empty
//!   `synchronous_standby_names`), says so in its log and on `/metrics`
//!   (`lockstep_instance_synchronous_degraded`), and goes back once they stream again.
//!   A failover then promotes the most advanced member that answered, as without
//!   `spec.synchronous`.
//!
//! - While a member names synchronous standbys, commits wait for them: its manager
//!   writes `synchronous_commit = on` after the person's parameters
//!   ([`managed_commit`]) unless they ask for the stronger `remote_apply`, the API
//!   server refuses a weaker level with `spec.synchronous` ([`COMMIT_RULE`]), and
//!   `postgresql.auto.conf` (what `ALTER SYSTEM` writes, read after every other file)
//!   keeps none of the settings Lockstep manages.
//!
//! # Assumptions
//! - Standbys connect with `application_name` = their pod name (the manager's default).
//! - A client may still lower `synchronous_commit` for its own session or transaction
//!   (`SET`), or for a role or database (`ALTER ROLE`/`ALTER DATABASE ... SET`), as
//!   PostgreSQL allows: its commits are then acknowledged before the standbys hold them,
//!   by its own choice.
//! - `number` < `spec.replicas` (the API server refuses more): a primary never waits for
//!   more standbys than the cluster has.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The levels of `synchronous_commit` at which a commit waits for the synchronous
/// standbys to flush it (or, `remote_apply`, to apply it).
pub const WAITING_COMMIT_LEVELS: &[&str] = &["on", "remote_apply"];

/// The CEL rule on the spec refusing, with `spec.synchronous`, a `synchronous_commit`
/// at which commits do not wait for the standbys (`off`, `local`, `remote_write`).
pub const COMMIT_RULE: &str = "!has(self.synchronous) || !has(self.postgresql) || !has(self.postgresql.parameters) || !('synchronous_commit' in self.postgresql.parameters) || self.postgresql.parameters['synchronous_commit'].lowerAscii() in ['on', 'remote_apply']";

/// [`COMMIT_RULE`]'s message, naming the field.
pub const COMMIT_MESSAGE: &str = "spec.postgresql.parameters.synchronous_commit must be on or remote_apply with spec.synchronous: at a weaker level a commit is acknowledged before the synchronous standbys hold it, and a failover may lose it";

/// The `synchronous_commit` a member that names synchronous standbys writes after the
/// person's parameters: `on` unless the person's (`user`) is one at which commits wait
/// already ([`WAITING_COMMIT_LEVELS`]; an older CRD may have let another through).
#[must_use]
pub fn managed_commit(user: Option<&str>) -> Option<&'static str> {
    let waits = user.is_some_and(|v| {
        WAITING_COMMIT_LEVELS
            .iter()
            .any(|level| v.trim().eq_ignore_ascii_case(level))
    });
    (!waits).then_some("on")
}

/// The pod condition a primary's instance manager writes on its own pod (as
/// [`crate::pod::archiving`]'s) while `spec.synchronous` is set, when it changes:
///
/// | status | reason | when |
/// |---|---|---|
/// | `True` | [`reason::SYNCHRONOUS`] | commits wait for `number` standbys |
/// | `False` | [`reason::ASYNCHRONOUS`] | `Preferred` turned replication asynchronous: fewer than `number` standbys stream |
/// | `False` | [`reason::ASYNCHRONOUS`] | the server runs other settings than its manager wrote (`SHOW`: an `ALTER SYSTEM` since, say); the manager writes its files again and reloads |
///
/// The operator reads the primary's into the cluster condition `SynchronousReplication`.
pub const SYNCHRONOUS: &str = "lockstep.dev/Synchronous";

/// The condition's reasons.
pub mod reason {
    /// Commits wait for the standbys.
    pub const SYNCHRONOUS: &str = "Synchronous";
    /// `Preferred` turned replication asynchronous.
    pub const ASYNCHRONOUS: &str = "Asynchronous";
}

/// What a primary's commits wait for, as its instance manager finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waiting {
    /// The `number` standbys asked for.
    Standbys(i32),
    /// None: `Preferred` turned replication asynchronous (fewer than the `number` asked
    /// for stream).
    Relaxed(i32),
    /// Not what the manager wrote: the server runs these values (read with `SHOW`).
    NotInForce {
        /// The `number` asked for.
        number: i32,
        /// `synchronous_standby_names` as the server runs it.
        names: String,
        /// `synchronous_commit` as the server runs it.
        commit: String,
    },
}

impl Waiting {
    /// What a primary's commits wait for: the `number` asked for, whether `Preferred`
    /// turned replication asynchronous (`relaxed`), what the manager wrote (`written`,
    /// `synchronous_standby_names`) and what the server runs (`running`: `names` and
    /// `commit`, none when not read after the files were last written).
    #[must_use]
    pub fn of(number: i32, relaxed: bool, written: &str, running: Option<(&str, &str)>) -> Self {
        match running {
            Some((names, commit))
                if names != written
                    || (!written.is_empty() && managed_commit(Some(commit)).is_some()) =>
            {
                Waiting::NotInForce {
                    number,
                    names: names.to_owned(),
                    commit: commit.to_owned(),
                }
            }
            _ if relaxed => Waiting::Relaxed(number),
            _ => Waiting::Standbys(number),
        }
    }
}

/// The condition's status, reason and message for a primary whose commits wait as
/// `waiting` says.
#[must_use]
pub fn condition(waiting: &Waiting) -> (&'static str, &'static str, String) {
    let (asynchronous, number) = match waiting {
        Waiting::Standbys(number) => (false, *number),
        Waiting::Relaxed(number) => (true, *number),
        Waiting::NotInForce {
            number,
            names,
            commit,
        } => {
            return (
                "False",
                reason::ASYNCHRONOUS,
                format!(
                    "the server runs synchronous_standby_names = '{names}' and synchronous_commit = {commit}, not what its manager wrote for {}, so commits may be acknowledged before they have them (an ALTER SYSTEM?); the manager writes its settings again and reloads",
                    standbys_of(*number)
                ),
            );
        }
    };
    let standbys = standbys_of(number);
    if asynchronous {
        let fewer = if number == 1 {
            "no standby streams".to_owned()
        } else {
            format!("fewer than {number} standbys stream")
        };
        (
            "False",
            reason::ASYNCHRONOUS,
            format!(
                "{fewer}, so commits are acknowledged without waiting for {standbys} (spec.synchronous.dataDurability: Preferred): a failover now may lose the last of them"
            ),
        )
    } else {
        (
            "True",
            reason::SYNCHRONOUS,
            format!(
                "commits wait until {standbys} {} them",
                if number == 1 { "has" } else { "have" }
            ),
        )
    }
}

/// "one standby" or "`number` standbys".
fn standbys_of(number: i32) -> String {
    if number == 1 {
        "one standby".to_owned()
    } else {
        format!("{number} standbys")
    }
}

/// `spec.synchronous`.
#[derive(JsonSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SynchronousSpec {
    /// How many standbys must have a commit before it is acknowledged (at least 1, less
    /// than `spec.replicas`).
    #[schemars(range(min = 1, max = 8))]
    pub number: i32,
    /// `Any` (a quorum: any `number` of the other members, PostgreSQL's `ANY`) or
    /// `First` (the first `number` by ordinal that are connected, `FIRST`).
    #[serde(default)]
    pub method: SyncMethod,
    /// `Required`: a commit waits for `number` standbys, even if that means waiting.
    /// `Preferred`: replication turns asynchronous while fewer than `number` stream.
    #[serde(default)]
    pub data_durability: DataDurability,
}

/// Which standbys count towards `number`.
#[derive(JsonSchema, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMethod {
    /// Any `number` of the other members (a quorum).
    #[default]
    Any,
    /// The first `number` connected members, by ordinal.
    First,
}

/// What a commit waits for when too few standbys stream.
#[derive(JsonSchema, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DataDurability {
    /// Wait: no commit is acknowledged that fewer than `number` standbys have.
    #[default]
    Required,
    /// Turn asynchronous until enough standbys stream again.
    Preferred,
}

/// What the instances are told: the request and the cluster's members (pod names, by
/// ordinal), part of the settings annotation.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SyncStandbys {
    /// `spec.synchronous`.
    #[serde(flatten)]
    pub spec: SynchronousSpec,
    /// Every member's pod name, by ordinal.
    pub members: Vec<String>,
}

impl SyncStandbys {
    /// The request for a cluster `name` of `replicas` members.
    #[must_use]
    pub fn new(spec: &SynchronousSpec, name: &str, replicas: i32) -> Self {
        SyncStandbys {
            spec: spec.clone(),
            members: (0..replicas).map(|k| format!("{name}-{k}")).collect(),
        }
    }
}

/// `synchronous_standby_names` for the member `me`: the other members, `number` of them
/// required. `streaming`: the `application_name`s streaming from this server now, when
/// it is a primary (`Preferred` turns asynchronous, an empty value, while fewer than
/// `number` of the others stream). Empty when there is no other member.
#[must_use]
pub fn standby_names(
    sync: &SyncStandbys,
    me: &str,
    streaming: Option<&std::collections::BTreeSet<String>>,
) -> String {
    let others: Vec<&String> = sync.members.iter().filter(|m| *m != me).collect();
    let Ok(number) = usize::try_from(sync.spec.number) else {
        return String::new();
    };
    let number = number.min(others.len());
    if number == 0 {
        return String::new();
    }
    if sync.spec.data_durability == DataDurability::Preferred
        && let Some(streaming) = streaming
        && others.iter().filter(|m| streaming.contains(**m)).count() < number
    {
        return String::new();
    }
    let method = match sync.spec.method {
        SyncMethod::Any => "ANY",
        SyncMethod::First => "FIRST",
    };
    let names: Vec<String> = others.iter().map(|m| format!("\"{m}\"")).collect();
    format!("{method} {number} ({})", names.join(", "))
}

/// How many of the `others` other members a failover must read to be sure that one of
/// them has every acknowledged commit (`None`: any answer will do).
#[must_use]
pub fn survey_quorum(spec: Option<&SynchronousSpec>, others: usize) -> Option<usize> {
    let spec = spec?;
    if spec.data_durability != DataDurability::Required {
        return None;
    }
    let number = usize::try_from(spec.number).ok()?.min(others);
    (number > 0).then(|| others - number + 1)
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_member_naming_standbys_makes_commits_wait_unless_the_person_asked_for_more() {
        for weaker in [
            None,
            Some("off"),
            Some("local"),
            Some("remote_write"),
            Some("bogus"),
        ] {
            assert_eq!(managed_commit(weaker), Some("on"), "{weaker:?}");
        }
        for waits in ["on", "ON", " remote_apply "] {
            assert_eq!(managed_commit(Some(waits)), None, "{waits}");
        }
    }

    use std::collections::BTreeSet;

    use super::*;

    fn sync(number: i32, method: SyncMethod, durability: DataDurability) -> SyncStandbys {
        SyncStandbys::new(
            &SynchronousSpec {
                number,
                method,
                data_durability: durability,
            },
            "pg",
            3,
        )
    }

    #[test]
    fn every_member_names_the_others_so_a_promoted_standby_enforces_it_at_once() {
        let s = sync(1, SyncMethod::Any, DataDurability::Required);
        assert_eq!(standby_names(&s, "pg-0", None), r#"ANY 1 ("pg-1", "pg-2")"#);
        assert_eq!(standby_names(&s, "pg-1", None), r#"ANY 1 ("pg-0", "pg-2")"#);
        let s = sync(2, SyncMethod::First, DataDurability::Required);
        assert_eq!(
            standby_names(&s, "pg-2", None),
            r#"FIRST 2 ("pg-0", "pg-1")"#
        );
    }

    #[test]
    fn required_waits_even_with_no_standby_streaming() {
        let s = sync(1, SyncMethod::Any, DataDurability::Required);
        let none = BTreeSet::new();
        assert_eq!(
            standby_names(&s, "pg-0", Some(&none)),
            r#"ANY 1 ("pg-1", "pg-2")"#
        );
    }

    #[test]
    fn the_condition_says_how_many_standbys_a_commit_waits_for_or_that_none_streams() {
        assert_eq!(
            condition(&Waiting::Standbys(2)),
            (
                "True",
                reason::SYNCHRONOUS,
                "commits wait until 2 standbys have them".to_owned()
            )
        );
        assert_eq!(
            condition(&Waiting::Standbys(1)).2,
            "commits wait until one standby has them"
        );
        let (status, why, message) = condition(&Waiting::Relaxed(1));
        assert_eq!((status, why), ("False", reason::ASYNCHRONOUS));
        assert!(
            message.starts_with(
                "no standby streams, so commits are acknowledged without waiting for one standby"
            ),
            "{message}"
        );
    }

    /// What the server runs (`SHOW`) is what counts: an `ALTER SYSTEM` since the manager
    /// wrote its files may have emptied the names or lowered the commit level.
    #[test]
    fn a_server_running_other_settings_than_written_is_reported_not_waiting() {
        let written = r#"ANY 1 ("pg-1", "pg-2")"#;
        assert_eq!(
            Waiting::of(1, false, written, Some((written, "on"))),
            Waiting::Standbys(1)
        );
        assert_eq!(Waiting::of(1, false, written, None), Waiting::Standbys(1));
        assert_eq!(
            Waiting::of(1, true, "", Some(("", "on"))),
            Waiting::Relaxed(1)
        );
        for running in [("", "on"), (written, "local")] {
            let waiting = Waiting::of(1, false, written, Some(running));
            assert!(matches!(waiting, Waiting::NotInForce { .. }), "{running:?}");
            let (status, _, message) = condition(&waiting);
            assert_eq!(status, "False");
            assert!(message.contains("ALTER SYSTEM"), "{message}");
        }
        // Asynchronous as written: any commit level is the person's.
        assert_eq!(
            Waiting::of(1, true, "", Some(("", "off"))),
            Waiting::Relaxed(1)
        );
    }

    #[test]
    fn preferred_turns_asynchronous_while_too_few_stream_and_back() {
        let s = sync(2, SyncMethod::Any, DataDurability::Preferred);
        let one: BTreeSet<String> = ["pg-1".to_owned()].into();
        assert_eq!(standby_names(&s, "pg-0", Some(&one)), "");
        let two: BTreeSet<String> = ["pg-1".to_owned(), "pg-2".to_owned()].into();
        assert_eq!(
            standby_names(&s, "pg-0", Some(&two)),
            r#"ANY 2 ("pg-1", "pg-2")"#
        );
        // Not a primary (no streaming set read): the value a promotion starts from.
        assert_eq!(standby_names(&s, "pg-0", None), r#"ANY 2 ("pg-1", "pg-2")"#);
    }

    #[test]
    fn a_single_member_has_no_one_to_wait_for() {
        let s = SyncStandbys::new(
            &SynchronousSpec {
                number: 1,
                method: SyncMethod::Any,
                data_durability: DataDurability::Required,
            },
            "pg",
            1,
        );
        assert_eq!(standby_names(&s, "pg-0", None), "");
    }

    #[test]
    fn a_failover_reads_enough_members_to_meet_every_quorum() {
        let required = SynchronousSpec {
            number: 1,
            method: SyncMethod::Any,
            data_durability: DataDurability::Required,
        };
        // 2 others, 1 must have each commit: both must be read.
        assert_eq!(survey_quorum(Some(&required), 2), Some(2));
        // 4 others, 2 must have each commit: any 3 of them hold every commit.
        let two = SynchronousSpec {
            number: 2,
            ..required.clone()
        };
        assert_eq!(survey_quorum(Some(&two), 4), Some(3));
        let preferred = SynchronousSpec {
            data_durability: DataDurability::Preferred,
            ..required
        };
        assert_eq!(survey_quorum(Some(&preferred), 2), None);
        assert_eq!(survey_quorum(None, 2), None);
    }
}
