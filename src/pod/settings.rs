//! `spec.postgresql`: the PostgreSQL parameters and `pg_hba.conf` rules a person sets,
//! which of them Lockstep keeps for itself, and how they reach every instance.
//!
//! # How a change reaches the servers
//! The operator renders [`annotation`] (this spec as JSON) onto the pod template and
//! onto every live instance pod ([`crate::machines::postgres::PgAction::Configure`],
//! fenced on the pod as observed). The kubelet writes a pod's annotations into the
//! downward-API volume as soon as it sees the pod change, and the instance manager
//! ([`crate::instance::run::settings`]) rewrites its configuration from it and reloads
//! the server. No API access is added to the pods, and no pod restarts: a parameter
//! that needs a restart is written, reported pending, and takes effect at the pod's next
//! start.
//!
//! # Guarantees
//! - A parameter Lockstep manages ([`MANAGED`]) is refused by the API server, naming
//!   it; and even if one arrived (an older CRD), the manager writes the managed
//!   settings after the user's, so the managed value wins.
//! - A value PostgreSQL refuses never reaches a server's next start: the manager keeps
//!   the last value the server accepted for that parameter, and says which it refused.
//! - The `pg_hba.conf` rules come after Lockstep's local and replication rules, so no
//!   rule of a person's can lock the manager or the standbys out.
//!
//! # Errors
//! [`parse`] fails on an annotation that is not this spec's JSON (a person edited it):
//! the manager keeps the configuration it has and logs why.

use std::collections::BTreeMap;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::managed::{DatabaseSpec, RoleSpec};
use super::synchronous::SyncStandbys;

/// The pod annotation carrying [`PostgresqlSpec`] as JSON to the instance manager (the
/// driver's cache keeps its digest, as PostgresCluster declares in `Operator::KEEP`).
pub const SETTINGS_ANNOTATION: &str = "lockstep.dev/postgresql";

/// The parameters (and configuration directives) Lockstep sets itself: replication,
/// recovery, archiving, the addresses and files the pods and Services rely on, and
/// `allow_alter_system` (off from PostgreSQL 17: what `ALTER SYSTEM` writes would
/// override them).
pub const MANAGED: &[&str] = &[
    "allow_alter_system",
    "archive_command",
    "archive_library",
    "archive_mode",
    "config_file",
    "data_directory",
    "external_pid_file",
    "hba_file",
    "hot_standby",
    "ident_file",
    "include",
    "include_dir",
    "include_if_exists",
    "listen_addresses",
    "max_replication_slots",
    "max_wal_senders",
    "password_encryption",
    "port",
    "primary_conninfo",
    "primary_slot_name",
    "promote_trigger_file",
    "recovery_target",
    "recovery_target_action",
    "recovery_target_inclusive",
    "recovery_target_lsn",
    "recovery_target_name",
    "recovery_target_time",
    "recovery_target_timeline",
    "recovery_target_xid",
    "restore_command",
    "synchronous_standby_names",
    "unix_socket_directories",
    "wal_keep_size",
    "wal_level",
    "wal_log_hints",
];

/// The CEL list literal of [`MANAGED`].
fn managed_list() -> String {
    let quoted: Vec<String> = MANAGED.iter().map(|p| format!("'{p}'")).collect();
    format!("[{}]", quoted.join(", "))
}

fn managed_rule() -> String {
    format!("{}.all(p, !(p in self))", managed_list())
}

fn managed_message() -> String {
    format!(
        "'spec.postgresql.parameters: ' + {}.filter(p, p in self)[0] + ' is managed by Lockstep and cannot be set'",
        managed_list()
    )
}

/// `spec.postgresql`.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PostgresqlSpec {
    /// `postgresql.conf` parameters, such as `shared_buffers: 256MB` or `work_mem:
    /// 16MB`. A change is applied by a reload; one PostgreSQL applies only at a restart
    /// is pending until the instance's next start. Parameters Lockstep manages
    /// (replication, recovery, archiving, ports and addresses) are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = 200,
        "additionalProperties" = {"type": "string", "maxLength": 1024}
    ))]
    #[x_kube(
        validation = Rule::new(managed_rule()).message(Message::Expression(managed_message())),
        validation = Rule::new("self.all(k, k.matches('^[a-z_][a-z0-9_.]*$'))")
            .message("spec.postgresql.parameters: every name is a PostgreSQL parameter name in lower case (letters, digits, '_' and '.')"),
        validation = Rule::new("self.all(k, !self[k].contains('\\n'))")
            .message("spec.postgresql.parameters: every value is one line (at most 1024 characters)")
    )]
    pub parameters: BTreeMap<String, String>,
    /// `pg_hba.conf` rules, one per entry (`host all app 10.0.0.0/8 scram-sha-256`),
    /// after Lockstep's own local and replication rules and before the default
    /// `host all all all scram-sha-256`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = 64, "items" = {"type": "string", "maxLength": 512}))]
    #[x_kube(
        validation = Rule::new("self.all(r, !r.contains('\\n'))")
            .message("spec.postgresql.pgHba: every rule is one line (at most 512 characters)")
    )]
    pub pg_hba: Vec<String>,
}

impl PostgresqlSpec {
    /// Nothing set.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.parameters.is_empty() && self.pg_hba.is_empty()
    }
}

/// What the pods' settings annotation carries: the person's `spec.postgresql`, and
/// `spec.synchronous` with the cluster's members.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct InstanceSettings {
    /// `spec.postgresql`.
    #[serde(flatten)]
    pub postgresql: PostgresqlSpec,
    /// `spec.synchronous`, with the members it names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synchronous: Option<SyncStandbys>,
    /// `spec.roles`, which the primary's manager keeps ([`super::managed`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<RoleSpec>,
    /// `spec.databases`, which the primary's manager keeps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub databases: Vec<DatabaseSpec>,
}

/// The value of [`SETTINGS_ANNOTATION`] for `settings`, or `None` when nothing is set
/// (so that a cluster without settings renders exactly as before them).
#[must_use]
pub fn annotation(settings: &InstanceSettings) -> Option<String> {
    if settings.postgresql.is_empty()
        && settings.synchronous.is_none()
        && settings.roles.is_empty()
        && settings.databases.is_empty()
    {
        return None;
    }
    serde_json::to_string(settings).ok()
}

/// The digest of the annotation that carries `settings` ([`annotation`], digested as
/// the driver's cache keeps it: [`crate::driver::cache::digest`]; no annotation digests
/// as the empty value). An instance manager reports it with what its server made of
/// the settings ([`super::applied`]), so the operator knows which value a report is
/// about.
#[must_use]
pub fn digest_of(settings: &InstanceSettings) -> String {
    annotation_digest(annotation(settings).as_deref())
}

/// [`digest_of`] the settings an annotation value carries (`None`: no annotation).
#[must_use]
pub fn annotation_digest(annotation: Option<&str>) -> String {
    crate::driver::cache::digest(annotation.unwrap_or_default())
}

/// The settings an annotation value carries.
///
/// # Errors
/// The value is not this type's JSON.
pub fn parse(value: &str) -> Result<InstanceSettings, serde_json::Error> {
    serde_json::from_str(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_spec_puts_no_annotation_on_the_pods() {
        assert_eq!(annotation(&InstanceSettings::default()), None);
    }

    #[test]
    fn the_annotation_carries_the_spec_back_unchanged() {
        let spec = InstanceSettings {
            postgresql: PostgresqlSpec {
                parameters: BTreeMap::from([("work_mem".to_owned(), "16MB".to_owned())]),
                pg_hba: vec!["host all app 10.0.0.0/8 scram-sha-256".to_owned()],
            },
            ..InstanceSettings::default()
        };
        let text = annotation(&spec).expect("an annotation");
        assert_eq!(parse(&text).expect("it parses"), spec);
        // What an instance digests of what it parsed is what the operator digests of
        // what it wrote.
        assert_eq!(
            digest_of(&parse(&text).expect("it parses")),
            crate::driver::cache::digest(&text)
        );
        // What a pod made before synchronous replication carries still parses.
        assert_eq!(
            parse(r#"{"parameters":{"work_mem":"16MB"}}"#)
                .expect("it parses")
                .synchronous,
            None
        );
    }

    #[test]
    fn synchronous_replication_alone_puts_the_members_on_the_pods() {
        use super::super::synchronous::{DataDurability, SyncMethod, SynchronousSpec};
        let sync = SyncStandbys::new(
            &SynchronousSpec {
                number: 1,
                method: SyncMethod::Any,
                data_durability: DataDurability::Required,
            },
            "pg",
            2,
        );
        let spec = InstanceSettings {
            postgresql: PostgresqlSpec::default(),
            synchronous: Some(sync),
            ..InstanceSettings::default()
        };
        let text = annotation(&spec).expect("an annotation");
        assert_eq!(
            text,
            r#"{"synchronous":{"number":1,"method":"Any","dataDurability":"Required","members":["pg-0","pg-1"]}}"#
        );
        assert_eq!(parse(&text).expect("it parses"), spec);
    }

    #[test]
    fn the_managed_rule_names_every_managed_parameter_once() {
        let rule = managed_rule();
        for p in MANAGED {
            assert_eq!(rule.matches(&format!("'{p}'")).count(), 1, "{p}");
        }
        assert!(MANAGED.windows(2).all(|w| w[0] < w[1]), "MANAGED is sorted");
    }
}
