//! What the engine persists in a custom resource's `.status`.
//!
//! The engine owns these status fields; each kind's status type embeds
//! [`EngineStatus`] with `#[serde(flatten)]` and adds its own observations.
//!
//! ```yaml
//! status:
//!   phase: Upgrading          # projected from machine.state, for printer columns
//!   step: "2/PreHook"          # projected progress within the phase
//!   observedGeneration: 4
//!   conditions: [Ready, Progressing, Degraded]   # projected, never set ad hoc
//!   machine:
//!     state: {name: Upgrading, ordinal: 2, step: PreHook, ...}
//!     enteredAt: "2026-11-29T18:00:00Z"
//!     stateVersion: 1
//!     history: [{from, to, reason, message, at}, ...]   # last HISTORY_LIMIT
//!     acks: {lockstep.dev/backup-now: "t1"}   # the last request token taken on, per kind
//!     lastError: null
//! ```

use std::collections::BTreeMap;
use std::marker::PhantomData;

use chrono::{DateTime, Utc};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

/// How many transitions the persisted history keeps.
pub const HISTORY_LIMIT: usize = 10;

/// The persisted machine record: the single source of truth for where an object's
/// lifecycle stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(bound = "S: JsonSchema")]
pub struct MachineRecord<S> {
    /// The current state.
    #[schemars(schema_with = "super::schema::hoisted::<S>")]
    pub state: S,
    /// When the current state was entered.
    pub entered_at: DateTime<Utc>,
    /// The encoding version of `state`, for future migrations.
    pub state_version: u32,
    /// The most recent transitions, oldest first.
    #[serde(default)]
    pub history: Vec<HistoryEntry>,
    /// The last token of each kind of request (an annotation such as
    /// `lockstep.dev/backup-now`) that a state took on ([`crate::engine::Machine::acks`]).
    /// Persisted with the state that takes it on and kept through every later state, so
    /// a request is acted on once even after the objects that served it are gone.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub acks: BTreeMap<String, String>,
    /// The error of the last reconcile that failed, if the reconciles since have not
    /// succeeded: the next successful reconcile's write clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// One transition in the persisted history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// The state left, as `Kind` or `Kind step` (empty for the first entry).
    pub from: String,
    /// The state entered.
    pub to: String,
    /// The declared reason of the edge taken.
    pub reason: String,
    /// What the machine said.
    pub message: String,
    /// When.
    pub at: DateTime<Utc>,
}

/// A status condition, shaped like `metav1.Condition`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The condition type: one of the constants in [`crate::engine::conditions`].
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// A CamelCase constant.
    pub reason: String,
    /// A human-readable message.
    #[serde(default)]
    pub message: String,
    /// When `status` last changed.
    pub last_transition_time: DateTime<Utc>,
    /// The generation this condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The engine-owned part of a custom resource's status.
///
/// `machine` is kept as raw JSON so that a record this build cannot decode (written by a
/// newer operator, or edited by hand) never fails deserialization of the whole object:
/// the engine decodes it and, on failure, holds and reports `Degraded`. Its schema is the
/// typed [`MachineRecord`] schema.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct EngineStatus<S: JsonSchema> {
    /// The current state's kind, for printer columns.
    pub phase: Option<String>,
    /// Progress within the phase (for example `2/PreHook`), for printer columns.
    pub step: Option<String>,
    /// The generation of the spec the status reflects.
    pub observed_generation: Option<i64>,
    /// Ready, Progressing and Degraded, projected from the machine.
    pub conditions: Vec<Condition>,
    /// The persisted machine record.
    #[schemars(schema_with = "record_schema::<S>")]
    pub machine: Option<RawRecord>,
    #[serde(skip)]
    #[schemars(skip)]
    _state: PhantomData<S>,
}

impl<S: JsonSchema> Default for EngineStatus<S> {
    fn default() -> Self {
        Self {
            phase: None,
            step: None,
            observed_generation: None,
            conditions: Vec::new(),
            machine: None,
            _state: PhantomData,
        }
    }
}

impl<S: JsonSchema> EngineStatus<S> {
    /// The condition of type `type_`, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// The schema of the `machine` field: the typed record.
/// `status.machine` as its compact JSON text.
///
/// The record is read by the engine once per reconcile and written once per transition,
/// but held between them for every object in the reflector's store. As a
/// `serde_json::Value` a 10-entry history took ~6 KiB (a B-tree node per map); as text
/// it takes its length. It (de)serializes as the JSON value itself, through any serde
/// format; the text is canonical (keys sorted), so equal records compare equal.
#[derive(Clone)]
pub struct RawRecord(Box<serde_json::value::RawValue>);

impl RawRecord {
    /// The record of `value`.
    pub fn from_value(value: &serde_json::Value) -> Self {
        // A Value always serializes; the fallback is unreachable but total.
        Self(serde_json::value::to_raw_value(value).unwrap_or_else(|_| null_record()))
    }

    /// The record as a JSON value.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(self.0.get()).unwrap_or(serde_json::Value::Null)
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }
}

fn null_record() -> Box<serde_json::value::RawValue> {
    serde_json::value::RawValue::from_string("null".to_owned())
        .unwrap_or_else(|_| unreachable!("null is JSON"))
}

impl From<serde_json::Value> for RawRecord {
    fn from(value: serde_json::Value) -> Self {
        Self::from_value(&value)
    }
}

impl PartialEq for RawRecord {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl std::fmt::Debug for RawRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.get())
    }
}

impl std::fmt::Display for RawRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.get())
    }
}

impl Serialize for RawRecord {
    fn serialize<Se: serde::Serializer>(&self, serializer: Se) -> Result<Se::Ok, Se::Error> {
        self.to_value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for RawRecord {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(deserializer).map(|v| Self::from_value(&v))
    }
}

fn record_schema<S: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<MachineRecord<S>>()
}

/// Checks that a kind's status type (which embeds [`EngineStatus`]) reads and writes
/// today's status JSON.
#[cfg(test)]
pub(crate) fn assert_status_as_today<T>(today: &str)
where
    T: Serialize + serde::de::DeserializeOwned + Default + PartialEq + std::fmt::Debug,
{
    let status: T = serde_json::from_str(today).expect("today's status decodes");
    assert_eq!(serde_json::to_string(&status).ok().as_deref(), Some(today));
    // Every field may be absent; absent ones are not written.
    let empty: T = serde_json::from_str("{}").expect("an empty status decodes");
    assert_eq!(empty, T::default());
    assert_eq!(
        serde_json::to_string(&empty).ok().as_deref(),
        Some(r#"{"conditions":[]}"#)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_status_is_written_as_today() {
        assert_status_as_today::<EngineStatus<String>>(
            r#"{"phase":"Ready","step":"3/3","observedGeneration":2,"conditions":[],"machine":{"state":"x"}}"#,
        );
    }
}
