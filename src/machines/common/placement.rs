//! Where a machine's pods are scheduled: `spec.placement` of every kind (the core/v1
//! fields of the same names), and the spread of a kind's own instances over nodes.
//!
//! [`Placement`] goes into every pod template a machine renders (its StatefulSet's and
//! its Jobs'), so the pods that reach the data run where it does (nodes with a taint of
//! their own, say). [`spread_terms`] adds the pod anti-affinity that keeps the
//! instances of one object apart; only the StatefulSet's pods get it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, PodAffinityTerm, PodAntiAffinity, PodSpec, Toleration, TopologySpreadConstraint,
    WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

/// Where pods are scheduled: the core/v1 fields of the same names, copied into the pod
/// template of the instances and of every Job the machine runs.
#[skip_serializing_none]
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// Labels a node must have (pod `nodeSelector`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Taints the pods tolerate (pod `tolerations`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[x_kube(
        validation = Rule::new("self.all(t, !has(t.operator) || t.operator in ['Exists', 'Equal'])")
            .message("placement.tolerations[].operator must be Exists or Equal"),
        validation = Rule::new("self.all(t, !has(t.operator) || t.operator != 'Exists' || !has(t.value) || t.value == '')")
            .message("placement.tolerations[].value must be empty when operator is Exists"),
        validation = Rule::new("self.all(t, !has(t.effect) || t.effect in ['', 'NoSchedule', 'PreferNoSchedule', 'NoExecute'])")
            .message("placement.tolerations[].effect must be NoSchedule, PreferNoSchedule or NoExecute (or empty: all)")
    )]
    pub tolerations: Vec<Toleration>,
    /// Node and pod (anti-)affinity (pod `affinity`).
    pub affinity: Option<Affinity>,
    /// How the pods spread over topology domains (pod `topologySpreadConstraints`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[x_kube(
        validation = Rule::new("self.all(c, c.whenUnsatisfiable in ['DoNotSchedule', 'ScheduleAnyway'])")
            .message("placement.topologySpreadConstraints[].whenUnsatisfiable must be DoNotSchedule or ScheduleAnyway"),
        validation = Rule::new("self.all(c, c.maxSkew >= 1)")
            .message("placement.topologySpreadConstraints[].maxSkew must be at least 1")
    )]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
}

impl Placement {
    /// `pod` with these fields set (an empty list or map leaves the field unset).
    #[must_use]
    pub fn apply(&self, mut pod: PodSpec) -> PodSpec {
        pod.node_selector = (!self.node_selector.is_empty()).then(|| self.node_selector.clone());
        pod.tolerations = (!self.tolerations.is_empty()).then(|| self.tolerations.clone());
        pod.affinity = self.affinity.clone();
        pod.topology_spread_constraints = (!self.topology_spread_constraints.is_empty())
            .then(|| self.topology_spread_constraints.clone());
        pod
    }
}

/// How strongly the instances of one object keep off each other's topology domain.
#[derive(
    JsonSchema, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default, strum::Display,
)]
pub enum Spread {
    /// The scheduler prefers a domain without another instance, and uses a shared one
    /// when none is left (pod anti-affinity `preferredDuringScheduling…`, weight 100).
    #[default]
    Preferred,
    /// An instance never shares a domain with another: with fewer domains than
    /// instances, the extra ones stay Pending (`requiredDuringScheduling…`).
    Required,
    /// No anti-affinity of Lockstep's own (`spec.placement.affinity` still applies).
    None,
}

/// The topology key [`spread_terms`] spreads over by default: one node each.
pub const HOSTNAME_TOPOLOGY_KEY: &str = "kubernetes.io/hostname";

/// `affinity` with the pod anti-affinity term that keeps the pods matching `selector`
/// apart over `topology_key`, as `spread` says, added to the terms it already has
/// (a person's own terms are kept).
#[must_use]
pub fn spread_terms(
    affinity: Option<Affinity>,
    spread: Spread,
    topology_key: &str,
    selector: &BTreeMap<String, String>,
) -> Option<Affinity> {
    let term = || PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_labels: Some(selector.clone()),
            match_expressions: None,
        }),
        topology_key: topology_key.to_owned(),
        ..PodAffinityTerm::default()
    };
    if spread == Spread::None {
        return affinity;
    }
    let mut affinity = affinity.unwrap_or_default();
    let anti = affinity
        .pod_anti_affinity
        .get_or_insert_with(PodAntiAffinity::default);
    match spread {
        Spread::Preferred => anti
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(WeightedPodAffinityTerm {
                pod_affinity_term: term(),
                weight: 100,
            }),
        Spread::Required => anti
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(term()),
        Spread::None => {}
    }
    Some(affinity)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeAffinity, NodeSelector, NodeSelectorTerm};

    use super::*;

    fn selector() -> BTreeMap<String, String> {
        [("app".to_owned(), "pg".to_owned())].into()
    }

    fn anti(affinity: &Option<Affinity>) -> PodAntiAffinity {
        affinity
            .as_ref()
            .and_then(|a| a.pod_anti_affinity.clone())
            .unwrap_or_default()
    }

    #[test]
    fn preferred_spread_adds_one_weighted_term_on_the_topology_key() {
        let a = spread_terms(None, Spread::Preferred, HOSTNAME_TOPOLOGY_KEY, &selector());
        let terms = anti(&a)
            .preferred_during_scheduling_ignored_during_execution
            .unwrap_or_default();
        assert_eq!(terms.len(), 1);
        assert_eq!(terms[0].weight, 100);
        assert_eq!(
            terms[0].pod_affinity_term.topology_key,
            HOSTNAME_TOPOLOGY_KEY
        );
        assert_eq!(
            terms[0]
                .pod_affinity_term
                .label_selector
                .as_ref()
                .and_then(|s| s.match_labels.clone()),
            Some(selector())
        );
        assert!(
            anti(&a)
                .required_during_scheduling_ignored_during_execution
                .is_none()
        );
    }

    #[test]
    fn required_spread_adds_a_required_term() {
        let a = spread_terms(
            None,
            Spread::Required,
            "topology.kubernetes.io/zone",
            &selector(),
        );
        let terms = anti(&a)
            .required_during_scheduling_ignored_during_execution
            .unwrap_or_default();
        assert_eq!(terms.len(), 1);
        assert_eq!(terms[0].topology_key, "topology.kubernetes.io/zone");
    }

    #[test]
    fn a_persons_own_affinity_is_kept_beside_the_spread() {
        let own = Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm::default()],
                }),
                ..NodeAffinity::default()
            }),
            pod_anti_affinity: Some(PodAntiAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    WeightedPodAffinityTerm {
                        pod_affinity_term: PodAffinityTerm {
                            topology_key: "rack".to_owned(),
                            ..PodAffinityTerm::default()
                        },
                        weight: 10,
                    },
                ]),
                ..PodAntiAffinity::default()
            }),
            ..Affinity::default()
        };
        let a = spread_terms(
            Some(own.clone()),
            Spread::Preferred,
            HOSTNAME_TOPOLOGY_KEY,
            &selector(),
        );
        assert_eq!(
            a.as_ref().and_then(|a| a.node_affinity.clone()),
            own.node_affinity
        );
        let keys: Vec<String> = anti(&a)
            .preferred_during_scheduling_ignored_during_execution
            .unwrap_or_default()
            .into_iter()
            .map(|t| t.pod_affinity_term.topology_key)
            .collect();
        assert_eq!(keys, ["rack", HOSTNAME_TOPOLOGY_KEY]);
    }

    #[test]
    fn no_spread_leaves_the_affinity_as_given() {
        assert_eq!(
            spread_terms(None, Spread::None, HOSTNAME_TOPOLOGY_KEY, &selector()),
            None
        );
    }

    #[test]
    fn an_empty_placement_sets_nothing_on_the_pod() {
        let pod = Placement::default().apply(PodSpec::default());
        assert_eq!(pod, PodSpec::default());
    }
}
