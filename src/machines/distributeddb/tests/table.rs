//! The table, the schema, the CRD.

use super::*;

#[test]
fn every_edge_reason_is_a_camel_case_constant() {
    for e in TABLE {
        assert!(
            e.reason.chars().next().is_some_and(char::is_uppercase) && !e.reason.contains(' '),
            "{}",
            e.reason
        );
    }
}

#[test]
fn every_state_round_trips_and_fits_the_schema() {
    let states = [
        DdbState::Creating,
        ready("db:1"),
        DdbState::Scaling {
            version: "v".to_owned(),
            from_replicas: 1,
            replicas: 2,
            hook: None,
        },
        DdbState::Scaling {
            version: "v".to_owned(),
            from_replicas: 3,
            replicas: 4,
            hook: Some(crate::machines::distributeddb::state::ScaleHook {
                phase: crate::machines::distributeddb::state::ScalePhase::PostScaleUp,
                ordinal: 3,
                token: "t".to_owned(),
                attempt: 2,
                budget: crate::machines::common::retry::RetryBudget::begin(Some("r".into())),
                skip_ack: Some("s".to_owned()),
            }),
        },
        upgrading("db:2", 1, UpgradeStep::Restart, "u"),
        DdbState::BackingUp {
            version: "v".to_owned(),
            replicas: 3,
            request: "t".to_owned(),
            job: Some("backup-1234567890".to_owned()),
        },
        DdbState::Finalizing { attempt: 2 },
        DdbState::Finalized,
    ];
    let schema = crate::engine::schema::hoisted::<DdbState>(
        &mut schemars::generate::SchemaSettings::openapi3().into_generator(),
    )
    .to_value();
    let properties = schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for state in states {
        let json = serde_json::to_value(&state).unwrap_or_default();
        let back: DdbState = serde_json::from_value(json.clone()).unwrap_or(DdbState::Finalized);
        assert_eq!(back, state);
        for key in json
            .as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
        {
            assert!(
                properties.contains_key(&key),
                "{key} of {json} is not in the schema"
            );
        }
    }
}

#[test]
fn the_crd_validates_fields_by_name() {
    let crd = serde_json::to_string(&crate::driver::crd::<DistributedDB>()).unwrap_or_default();
    for needle in [
        "\"fieldPath\":\".metadata.name\"",
        "storage.size cannot shrink",
        "storage.storageClassName is immutable",
        "backupPolicy.schedule must be a cron expression",
        "\"minimum\":1",
        "isQuantity(self)",
        "\"shortNames\":[\"ddb\"]",
    ] {
        assert!(crd.contains(needle), "the CRD lacks {needle}");
    }
}

#[test]
fn every_edge_is_taken_in_the_file_the_table_names() {
    let checked = crate::machines::common::table_sources::where_taken::<DistributedDb>(
        "src/machines/distributeddb/decide",
    );
    assert_eq!(checked, Ok(()));
}
