//! The schema of a persisted state, derived from the state enum itself.
//!
//! A machine's state is an internally tagged enum (`#[serde(tag = "name")]`), whose
//! derived schema is a `oneOf` of one object per variant. Kubernetes wants structural
//! schemas, which a `oneOf` of differing objects is not, so [`hoisted`] folds the
//! variants into one object: `name` is the enum of the variants' names, and every
//! field of any variant is an optional property whose description names the variants
//! that carry it (`Ready, Scaling: the image every pod runs.`). Nothing is written twice:
//! adding a field to a variant adds it to the CRD.
//!
//! # Guarantees
//! - Every variant's name appears in `name`'s enum, in declaration order.
//! - Every field of every variant appears once, with its type as derived; fields that
//!   two variants share with different documentation list both.
//!
//! # Assumptions
//! - The state's derived schema is a `oneOf` (or `anyOf`) of objects, each with a
//!   `name` property fixed to one value (`const` or a one-element `enum`), possibly
//!   combined through `allOf` with the schema of a struct (a newtype variant).
//! - Fields of the same name have the same type in every variant that has them: a
//!   machine's tests check it with [`mismatched_fields`] (a `step` of one enum in one
//!   variant and of another in the next would hoist as the first, and the API server
//!   would refuse every status written in the second).

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{Map, Value, json};

/// The structural schema of the state type `S` (see the module docs).
pub fn hoisted<S: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    let mut settings = generator.settings().clone();
    // The caller's transforms (kube's structural rewrites) cannot take a `oneOf` of
    // differing objects: they run on the hoisted object instead.
    let mut transforms = std::mem::take(&mut settings.transforms);
    settings.inline_subschemas = true;
    let derived = settings.into_generator().into_root_schema_for::<S>();
    let value = hoist(derived.as_value());
    let mut schema = Schema::try_from(value).unwrap_or_default();
    for transform in &mut transforms {
        transform.transform(&mut schema);
    }
    schema
}

/// The fields that two variants of the state type `S` declare with different schemas
/// (their descriptions aside), each as `field: Variant {schema}, Other {schema}`: empty
/// when the state hoists faithfully.
pub fn mismatched_fields<S: JsonSchema>() -> Vec<String> {
    let mut settings = schemars::generate::SchemaSettings::openapi3();
    settings.inline_subschemas = true;
    let derived = settings.into_generator().into_root_schema_for::<S>();
    let variants: Vec<&Value> = ["oneOf", "anyOf"]
        .iter()
        .filter_map(|k| derived.as_value().get(*k).and_then(Value::as_array))
        .flatten()
        .collect();
    let mut seen: Vec<(String, Vec<(String, Value)>)> = Vec::new();
    for variant in variants {
        let properties = properties_of(variant);
        let Some(name) = properties.get("name").and_then(tag) else {
            continue;
        };
        for (field, schema) in properties.iter().filter(|(k, _)| *k != "name") {
            // What the hoisting rewrites anyway: each variant's text, and optionality.
            let mut bare = schema.clone();
            if let Some(map) = bare.as_object_mut() {
                map.remove("description");
                map.remove("nullable");
                map.remove("default");
            }
            match seen.iter_mut().find(|(f, _)| f == field) {
                Some((_, schemas)) => schemas.push((name.clone(), bare)),
                None => seen.push((field.clone(), vec![(name.clone(), bare)])),
            }
        }
    }
    seen.into_iter()
        .filter(|(_, schemas)| schemas.iter().any(|(_, s)| *s != schemas[0].1))
        .map(|(field, schemas)| {
            let each: Vec<String> = schemas.iter().map(|(v, s)| format!("{v} {s}")).collect();
            format!("{field}: {}", each.join(", "))
        })
        .collect()
}

/// One hoisted field: its name, its schema, and each variant that has it with the
/// variant's description of it.
type Field = (String, Value, Vec<(String, String)>);

/// Fold the variants of `derived` (a `oneOf` of objects tagged by `name`) into one
/// object. A schema that is no such `oneOf` (a state of unit variants only is a string
/// enum) is already structural and is returned as it is.
fn hoist(derived: &Value) -> Value {
    let variants: Vec<&Value> = ["oneOf", "anyOf"]
        .iter()
        .filter_map(|k| derived.get(*k).and_then(Value::as_array))
        .flatten()
        .collect();
    // Unit variants only: a string enum (documented variants derive as a `oneOf` of
    // constants, which is not structural either).
    let constants: Vec<Value> = variants
        .iter()
        .filter_map(|v| tag(v).map(Value::String))
        .collect();
    if !variants.is_empty() && constants.len() == variants.len() {
        return json!({"type": "string", "enum": constants});
    }
    if variants.is_empty() {
        let mut plain = derived.clone();
        if let Some(map) = plain.as_object_mut() {
            map.remove("$schema");
            map.remove("title");
        }
        return plain;
    }
    let mut names: Vec<Value> = Vec::new();
    let mut fields: Vec<Field> = Vec::new();
    for variant in variants {
        let properties = properties_of(variant);
        let Some(name) = properties.get("name").and_then(tag) else {
            continue;
        };
        names.push(Value::String(name.clone()));
        for (field, schema) in properties.iter().filter(|(k, _)| *k != "name") {
            let description = schema
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            match fields.iter_mut().find(|(f, _, _)| f == field) {
                Some((_, _, seen)) => seen.push((name.clone(), description)),
                None => {
                    let mut schema = schema.clone();
                    nullable(&mut schema);
                    fields.push((field.clone(), schema, vec![(name.clone(), description)]));
                }
            }
        }
    }
    let mut properties = Map::new();
    properties.insert(
        "name".to_owned(),
        json!({"description": "The state's kind.", "type": "string", "enum": names}),
    );
    fields.sort_by(|a, b| a.0.cmp(&b.0));
    for (field, mut schema, seen) in fields {
        if let Some(map) = schema.as_object_mut() {
            map.insert("description".to_owned(), describe(&seen).into());
        }
        properties.insert(field, schema);
    }
    json!({
        "description": derived.get("description").cloned().unwrap_or(Value::Null),
        "type": "object",
        "properties": properties,
        "required": ["name"],
    })
    .as_object()
    .map(|m| {
        Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
    })
    .unwrap_or(Value::Null)
}

/// The properties of a variant's object, through `allOf` (a newtype variant's struct).
fn properties_of(variant: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(p) = variant.get("properties").and_then(Value::as_object) {
        out.extend(p.clone());
    }
    for part in variant
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.extend(properties_of(part));
    }
    out
}

/// The one value a `name` property is fixed to.
fn tag(schema: &Value) -> Option<String> {
    schema
        .get("const")
        .or_else(|| {
            schema
                .get("enum")
                .and_then(Value::as_array)
                .filter(|e| e.len() == 1)
                .and_then(|e| e.first())
        })
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// A property of some variants only: absent (or null) in the others, and never
/// defaulted by the API server (a variant's serde default would otherwise be written
/// into every other variant, and the status would not round-trip).
fn nullable(schema: &mut Value) {
    if let Some(map) = schema.as_object_mut() {
        map.insert("nullable".to_owned(), Value::Bool(true));
        map.remove("default");
    }
}

/// `A, B: shared text.` when the variants agree, `A: one. B: other.` when they do not.
fn describe(seen: &[(String, String)]) -> String {
    let mut groups: Vec<(Vec<&str>, &str)> = Vec::new();
    for (variant, text) in seen {
        match groups.iter_mut().find(|(_, t)| *t == text.as_str()) {
            Some((variants, _)) => variants.push(variant),
            None => groups.push((vec![variant], text)),
        }
    }
    groups
        .iter()
        .map(|(variants, text)| {
            let text = text.trim_end_matches('.');
            let mut chars = text.chars();
            let lower = chars
                .next()
                .map(|c| c.to_lowercase().chain(chars).collect::<String>())
                .unwrap_or_default();
            format!("{}: {lower}.", variants.join(", "))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    /// A state.
    #[derive(Serialize, Deserialize, JsonSchema)]
    #[serde(tag = "name", rename_all_fields = "camelCase")]
    #[allow(dead_code)] // only its schema is read
    enum State {
        /// Nothing yet.
        Empty,
        /// Running.
        Running {
            /// The image every pod runs.
            version: String,
        },
        /// Moving.
        Moving(Moving),
        /// Backing up.
        BackingUp {
            /// The image every pod runs.
            version: String,
            /// The try.
            attempt: u32,
        },
    }

    /// Progress of a move.
    #[derive(Serialize, Deserialize, JsonSchema)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)] // only its schema is read
    struct Moving {
        /// The hook try.
        #[serde(default = "one")]
        attempt: u32,
        /// The pod being moved.
        pod_uid: String,
    }

    /// A state of unit variants only.
    #[derive(Serialize, Deserialize, JsonSchema)]
    #[allow(dead_code)] // only its schema is read
    enum Plain {
        /// First.
        One,
        /// Second.
        Two,
    }

    /// Two variants whose `step` fields are of different enums.
    #[derive(Serialize, Deserialize, JsonSchema)]
    #[serde(tag = "name")]
    #[allow(dead_code)] // only its schema is read
    enum Clashing {
        /// Moving.
        Moving {
            /// Its step.
            step: Plain,
        },
        /// Copying.
        Copying {
            /// Its step.
            step: u32,
            /// The same type everywhere.
            #[serde(default)]
            attempt: Option<u32>,
        },
        /// Again.
        Again {
            /// The same type everywhere.
            attempt: u32,
        },
    }

    #[test]
    fn a_field_of_two_types_in_two_variants_is_reported_and_one_of_one_type_is_not() {
        let found = mismatched_fields::<Clashing>();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("step: Moving"), "{found:?}");
        assert!(mismatched_fields::<State>().is_empty());
    }

    #[test]
    fn a_state_of_unit_variants_is_a_string_enum() {
        let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
        let schema = hoisted::<Plain>(&mut generator);
        assert_eq!(
            schema.as_value(),
            &json!({"type": "string", "enum": ["One", "Two"]})
        );
    }

    fn one() -> u32 {
        1
    }

    #[test]
    fn variants_fold_into_one_object_whose_fields_name_their_variants() {
        let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
        let schema = hoisted::<State>(&mut generator);
        let value = schema.as_value();
        assert!(value.get("oneOf").is_none(), "{value:#}");
        let p = &value["properties"];
        assert_eq!(
            p["name"]["enum"],
            json!(["Empty", "Running", "Moving", "BackingUp"])
        );
        assert_eq!(
            p["version"]["description"],
            "Running, BackingUp: the image every pod runs."
        );
        assert_eq!(
            p["attempt"]["description"],
            "Moving: the hook try. BackingUp: the try."
        );
        assert_eq!(p["podUid"]["type"], "string");
        assert_eq!(p["podUid"]["nullable"], true);
        assert!(
            p["attempt"].get("default").is_none(),
            "a variant's default would be written into every state: {value:#}"
        );
        assert_eq!(value["required"], json!(["name"]));
    }
}
