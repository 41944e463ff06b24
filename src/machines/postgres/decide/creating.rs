//! Creating: credentials first, then every instance Ready with its role; pod 0 is the
//! primary.

use super::{D, stay, upkeep};
use crate::engine::Decision;
use crate::machines::postgres::actions::{PgAction, spec_image};
use crate::machines::postgres::api::PostgresClusterSpec;
use crate::machines::postgres::observe::Observed;
use crate::machines::postgres::state::{PgState, Topology};
use crate::machines::postgres::table::reason::*;

pub(crate) fn creating(spec: &PostgresClusterSpec, credentials_created: bool, o: &Observed) -> D {
    if spec.credentials_secret.is_none() && !credentials_created {
        return Decision::go(
            PgState::Creating {
                credentials_created: true,
            },
            CREDENTIALS_GENERATED,
            "no spec.credentialsSecret: generated the superuser and replication passwords",
        )
        .with_actions([PgAction::CreateCredentials]);
    }
    let image = spec_image(spec);
    let replicas = spec.replicas;
    let actions = upkeep(spec, &image, replicas, Some(0), o);
    let ready: Vec<i32> = (0..replicas).filter(|k| o.serving(*k)).collect();
    let extra = o.pods.keys().any(|k| *k >= replicas);
    if ready.len() == usize::try_from(replicas).unwrap_or(0) && !extra && actions.is_empty() {
        let cluster = Topology {
            image: image.clone(),
            replicas,
            primary: 0,
        };
        let stale: Vec<i32> = (0..replicas)
            .filter(|k| o.pods.get(k).and_then(|p| p.image.as_deref()) != Some(&image))
            .collect();
        if !stale.is_empty() {
            return Decision::go(
                PgState::Upgrading { cluster, pod: None },
                MIXED_IMAGES,
                format!(
                    "all {replicas} instances Ready, but {} run an earlier image; upgrading to {image}",
                    o.pod_names(&stale)
                ),
            );
        }
        return Decision::go(
            PgState::Ready { cluster },
            CLUSTER_CREATED,
            format!(
                "all {replicas} instances Ready at {image}; {} is primary",
                o.pod_name(0)
            ),
        );
    }
    stay(
        WAITING_FOR_PODS,
        format!("{}/{replicas} instances Ready at {image}", ready.len()),
        actions,
    )
}
