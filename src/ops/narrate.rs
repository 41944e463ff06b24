//! `lockstep narrate KIND/NAME`: one readable line per transition, as it happens.
//!
//! It watches one object and prints each new entry of `status.machine.history` (the
//! engine appends one per persisted transition), the errors the driver records in
//! `status.machine.lastError`, and the object's deletion:
//!
//! ```text
//! 18:00:01  demo  · → Creating              Initialized: first reconcile
//! 18:00:09  demo  Creating → Ready          AllMembersReady: 3/3 members ready
//! 18:00:09  demo  ! error: applying StatefulSet demo: ...
//! 18:01:30  demo  deleted
//! ```
//!
//! # Guarantees
//! - Each history entry is printed once, in order, even when several arrive in one
//!   update; entries that scrolled out of the bounded history between two updates are
//!   reported as a gap rather than silently skipped.
//! - It reads only the object's status; it prints no spec and no Secret.

use std::collections::HashSet;
use std::io::Write;

use futures::TryStreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use kube::discovery::{Discovery, Scope};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;

use super::Error;
use crate::driver::WatchBackoff;

/// What [`narrate`] watches and when it stops.
#[derive(Debug, Clone)]
pub struct Target {
    /// The kind, its plural, or a custom resource's short name (`DistributedDB`,
    /// `distributeddbs`, `ddb`), case-insensitively.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// The object's namespace.
    pub namespace: String,
}

impl Target {
    /// Parse `KIND/NAME` in `namespace`.
    ///
    /// # Errors
    /// [`Error::Resolve`] when the argument is not `KIND/NAME`.
    pub fn parse(arg: &str, namespace: impl Into<String>) -> Result<Self, Error> {
        match arg.split_once('/') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(Self {
                    kind: kind.to_owned(),
                    name: name.to_owned(),
                    namespace: namespace.into(),
                })
            }
            _ => Err(Error::Resolve(format!("expected KIND/NAME, got {arg:?}"))),
        }
    }
}

/// Find the API of `kind`: a namespaced resource whose kind or plural it is, or a custom
/// resource whose short name it is (read from its CRD, as kubectl does, since discovery
/// does not carry short names), case-insensitively.
///
/// # Errors
/// [`Error::Api`] if discovery fails, [`Error::Resolve`] if no namespaced kind matches.
pub async fn resolve(client: &Client, kind: &str) -> Result<ApiResource, Error> {
    let discovery = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .map_err(|source| Error::Api {
            what: "discovering the API".into(),
            source,
        })?;
    let wanted = kind.to_ascii_lowercase();
    let mut namespaced = discovery.groups().flat_map(|group| {
        group
            .recommended_resources()
            .into_iter()
            .filter(|(_, caps)| caps.scope == Scope::Namespaced)
            .map(|(resource, _)| resource)
    });
    if let Some(found) = namespaced
        .find(|r| r.kind.eq_ignore_ascii_case(&wanted) || r.plural.eq_ignore_ascii_case(&wanted))
    {
        return Ok(found);
    }
    // A short name: the CRDs name them (a person who can narrate can usually read them;
    // without that right, the kind or plural still works).
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if let Ok(list) = crds.list(&ListParams::default()).await
        && let Some((group, plural)) = short_name_of(&list.items, &wanted)
    {
        let mut all = discovery.groups().flat_map(|g| g.recommended_resources());
        if let Some((resource, _)) = all.find(|(r, caps)| {
            caps.scope == Scope::Namespaced && r.group == group && r.plural == plural
        }) {
            return Ok(resource);
        }
    }
    Err(Error::Resolve(format!(
        "no namespaced kind {kind:?} is served (are the CRDs installed?)"
    )))
}

/// The group and plural of the custom resource whose short name is `wanted` (lower case).
fn short_name_of(crds: &[CustomResourceDefinition], wanted: &str) -> Option<(String, String)> {
    crds.iter()
        .find(|crd| {
            crd.spec
                .names
                .short_names
                .iter()
                .flatten()
                .any(|s| s.eq_ignore_ascii_case(wanted))
        })
        .map(|crd| (crd.spec.group.clone(), crd.spec.names.plural.clone()))
}

/// Watch `target` and write one line per transition to `out` until the object is
/// deleted (after having been seen).
///
/// # Errors
/// [`Error::Api`] if the watch fails for good, [`Error::Resolve`] if the kind is unknown.
pub async fn narrate(client: Client, target: &Target, out: &mut impl Write) -> Result<(), Error> {
    let resource = resolve(&client, &target.kind).await?;
    let api: Api<DynamicObject> = Api::namespaced_with(client, &target.namespace, &resource);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", target.name));
    let mut stream = std::pin::pin!(watcher(api, config).backoff(WatchBackoff::default()));
    let mut story = Story::new(&target.name);
    let mut present = false;
    let mut seen_once = false;
    let _ = writeln!(
        out,
        "narrating {} {}/{} (one line per transition)",
        resource.kind, target.namespace, target.name
    );
    let _ = out.flush();
    loop {
        let event = match stream.try_next().await {
            Ok(Some(event)) => event,
            Ok(None) => return Ok(()),
            Err(error) => {
                // The watcher backs off and resumes by itself.
                tracing::warn!(%error, "watch interrupted; resuming");
                continue;
            }
        };
        let lines = match event {
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                present = true;
                seen_once = true;
                story.update(&object)
            }
            watcher::Event::Delete(_) => {
                present = false;
                vec![story.deleted()]
            }
            watcher::Event::Init => {
                present = false;
                Vec::new()
            }
            watcher::Event::InitDone => {
                if !present && seen_once {
                    vec![story.deleted()]
                } else {
                    Vec::new()
                }
            }
        };
        for line in &lines {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
        if seen_once && !present {
            return Ok(());
        }
    }
}

/// The narration of one object: what has been printed so far.
#[derive(Debug)]
pub struct Story {
    name: String,
    seen: HashSet<(String, String, String, String)>,
    last_to: Option<String>,
    last_error: Option<String>,
}

impl Story {
    /// A story about the object `name`, nothing printed yet.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            seen: HashSet::new(),
            last_to: None,
            last_error: None,
        }
    }

    /// The lines to print for a new version of the object.
    pub fn update(&mut self, object: &DynamicObject) -> Vec<String> {
        let empty = Value::Null;
        let machine = object
            .data
            .get("status")
            .and_then(|s| s.get("machine"))
            .unwrap_or(&empty);
        let mut lines = Vec::new();
        let history = machine
            .get("history")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for entry in &history {
            let field = |k: &str| {
                entry
                    .get(k)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned()
            };
            let (from, to, reason, message, at) = (
                field("from"),
                field("to"),
                field("reason"),
                field("message"),
                field("at"),
            );
            let key = (at.clone(), from.clone(), to.clone(), reason.clone());
            if !self.seen.insert(key) {
                continue;
            }
            if let Some(last) = &self.last_to
                && !from.is_empty()
                && last != &from
            {
                lines.push(format!(
                    "{:8}  {}  … transitions between {last} and {from} scrolled out of the history",
                    "", self.name
                ));
            }
            let from_shown = if from.is_empty() {
                "·".to_owned()
            } else {
                from
            };
            let arrow = format!("{from_shown} → {to}");
            let message = if message.is_empty() {
                String::new()
            } else {
                format!(": {message}")
            };
            lines.push(format!(
                "{}  {}  {arrow:<42} {reason}{message}",
                clock(&at),
                self.name
            ));
            self.last_to = Some(to);
        }
        let error = machine
            .get("lastError")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if error != self.last_error {
            if let Some(error) = &error {
                lines.push(format!("{:8}  {}  ! error: {error}", "", self.name));
            }
            self.last_error = error;
        }
        lines
    }

    /// The line for the object's deletion.
    pub fn deleted(&self) -> String {
        format!(
            "{}  {}  deleted (finalizer released)",
            chrono::Utc::now().format("%H:%M:%S"),
            self.name
        )
    }
}

/// `HH:MM:SS` of an RFC 3339 time (or the input if it is not one).
fn clock(at: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(at)
        .map(|t| t.format("%H:%M:%S").to_string())
        .unwrap_or_else(|_| at.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(history: Value, last_error: Option<&str>) -> DynamicObject {
        let mut machine = json!({ "history": history });
        if let Some(e) = last_error {
            machine["lastError"] = json!(e);
        }
        let mut object = DynamicObject::new(
            "demo",
            &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        );
        object.data = json!({ "status": { "machine": machine } });
        object
    }

    fn entry(from: &str, to: &str, reason: &str, at: &str) -> Value {
        json!({ "from": from, "to": to, "reason": reason, "message": "m", "at": at })
    }

    #[test]
    fn prints_each_entry_once_in_order() {
        let mut story = Story::new("demo");
        let first = entry("", "Creating", "Initialized", "2026-01-01T10:00:00Z");
        let second = entry("Creating", "Ready", "AllReady", "2026-01-01T10:00:09Z");
        let lines = story.update(&object(json!([first.clone()]), None));
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].starts_with("10:00:00  demo  · → Creating"),
            "{lines:?}"
        );
        let lines = story.update(&object(json!([first.clone(), second.clone()]), None));
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("Creating → Ready"), "{lines:?}");
        assert!(lines[0].contains("AllReady: m"), "{lines:?}");
        assert!(
            story
                .update(&object(json!([first, second]), None))
                .is_empty()
        );
    }

    #[test]
    fn reports_gaps_and_errors() {
        let mut story = Story::new("demo");
        story.update(&object(
            json!([entry("", "Creating", "Initialized", "2026-01-01T10:00:00Z")]),
            None,
        ));
        let lines = story.update(&object(
            json!([entry(
                "Upgrading 2/3",
                "Ready",
                "Upgraded",
                "2026-01-01T10:05:00Z"
            )]),
            Some("boom"),
        ));
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].contains("scrolled out"), "{lines:?}");
        assert!(lines[2].contains("! error: boom"), "{lines:?}");
        // The same error is not repeated.
        assert!(story.update(&object(json!([]), Some("boom"))).is_empty());
    }

    #[test]
    fn a_short_name_is_found_in_the_crds_of_lockstep_and_others() {
        let crds = [
            crate::driver::crd::<crate::machines::distributeddb::DistributedDB>(),
            crate::driver::crd::<crate::machines::postgres::PostgresCluster>(),
        ];
        assert_eq!(
            short_name_of(&crds, "pgc"),
            Some(("lockstep.dev".to_owned(), "postgresclusters".to_owned()))
        );
        assert_eq!(
            short_name_of(&crds, "ddb").map(|(_, plural)| plural),
            Some("distributeddbs".to_owned())
        );
        assert_eq!(short_name_of(&crds, "po"), None);
    }

    #[test]
    fn parses_targets() {
        let t = Target::parse("ddb/demo", "default").expect("parses");
        assert_eq!((t.kind.as_str(), t.name.as_str()), ("ddb", "demo"));
        assert!(Target::parse("demo", "default").is_err());
        assert!(Target::parse("a/b/c", "default").is_err());
    }
}
