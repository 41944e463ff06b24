//! The invariants the DistributedDB world checks as each action takes effect (listed
//! in the model's module docs), and tests that they have teeth.

use super::*;
use crate::machines::distributeddb::actions::Shape;

impl Cluster {
    /// The checks of a delete that takes effect on pod `k` (`unstarted`: Creating's
    /// replacement of a pod that was not Ready as read, preconditioned on that read).
    pub(super) fn check_delete(&mut self, k: i32, pod: &Pod, unstarted: bool) {
        let Some(template) = self.sts.as_ref().map(|s| s.image.clone()) else {
            return;
        };
        if pod.image == template && !unstarted {
            self.violations.push(format!(
                "deleted db-{k} ({}) although it already runs the target image {template}",
                pod.uid
            ));
        }
        self.check_drained(k, "deleted");
        self.drained.remove(&k);
        if !pod.ready || !self.served {
            return; // replacing a pod that is down (or never served) takes nothing down
        }
        let replicas = self.sts.as_ref().map_or(0, |s| s.replicas);
        for j in (0..replicas).filter(|j| *j != k) {
            if !self.pods.get(&j).is_some_and(|p| p.ready && !p.terminating) {
                self.violations
                    .push(format!("took db-{k} down while db-{j} was not Ready"));
            }
        }
        if let Some(other) = self.down.iter().find(|d| **d != k) {
            self.violations.push(format!(
                "took db-{k} down while db-{other}, also taken down, was not back"
            ));
        }
        // A pre-hook prepares the pod, whatever image it prepared it for: the template
        // may have been changed by someone else since the hook ran (a reconcile on a
        // stale cache cannot see that), and a drained pod is drained.
        let prepared = IMAGES
            .iter()
            .copied()
            .chain([template.as_str()])
            .any(|image| self.hook_done(&format!("pre-{k}-{}-", short_hash(&[image, &pod.uid]))));
        if HookPhase::Pre.of(&self.spec).is_some() && !prepared {
            self.violations.push(format!(
                "deleted db-{k} ({}) before its pre-hook succeeded",
                pod.uid
            ));
        }
        // A pod seen down within the staleness window may have been chosen (down pods go
        // first) on a view that did not yet show it Ready again: no cache-based controller
        // can tell. Such a take-down is exempt from the ordering rule.
        let recently_down = self
            .last_down
            .get(&pod.uid)
            .is_some_and(|t| self.tick.saturating_sub(*t) <= STALE_TICKS);
        if recently_down {
            self.down.insert(k);
            return;
        }
        match &self.pass {
            Some(pass) if pass.image == template => {
                if k > pass.last {
                    self.violations.push(format!(
                        "took db-{k} down after db-{} in the same pass to {template}: ordinals went up",
                        pass.last
                    ));
                }
                let previous = pass.last;
                if previous != k && HookPhase::Post.of(&self.spec).is_some() {
                    let uid = self
                        .pods
                        .get(&previous)
                        .map(|p| p.uid.clone())
                        .unwrap_or_default();
                    let prefix = format!("post-{previous}-{}-", short_hash(&[&template, &uid]));
                    if !self.hook_done(&prefix) {
                        self.violations.push(format!(
                            "took db-{k} down before the post-hook of db-{previous} succeeded"
                        ));
                    }
                }
            }
            _ => {}
        }
        self.pass = Some(Pass {
            image: template,
            last: k,
        });
        self.down.insert(k);
    }

    /// At most one member deliberately out of service: nothing is done to pod `k` while
    /// another pod, drained by its pre-hook, waits to be replaced.
    pub(super) fn check_drained(&mut self, k: i32, what: &str) {
        if let Some(d) = self.drained.keys().find(|d| **d != k) {
            self.violations.push(format!(
                "{what} db-{k} while db-{d}, drained by its pre-hook, waits: two members out of service"
            ));
        }
    }

    /// The StatefulSet controller removes pod `k` (beyond its replicas): a take-down if it
    /// is Ready, so at most one at a time.
    pub(super) fn check_removal(&mut self, k: i32) {
        self.check_drained(k, "removed");
        let ready = self.pods.get(&k).is_some_and(|p| p.ready && !p.terminating);
        if !ready || !self.served {
            return;
        }
        if let Some(other) = self.down.iter().find(|d| **d != k) {
            self.violations.push(format!(
                "removed db-{k} while db-{other}, also taken down, was not back"
            ));
        }
        self.down.insert(k);
    }

    /// The StatefulSet goes from `from` to `to` replicas: with scaling hooks, once the
    /// cluster is bootstrapped, no pod it drops may still be a member (the pre-scale-down
    /// hook removes the member first) and every pod it adds must be one already (the
    /// pre-scale-up hook adds it first); before, the membership is the StatefulSet's.
    /// (The StatefulSet controller may still recreate a pod whose member was just
    /// removed, before the shrink: that pod cannot join and goes with the shrink.)
    pub(super) fn check_resize(&mut self, from: i32, to: i32) {
        if self.spec.scaling.is_none() {
            return;
        }
        if !self.bootstrapped.get() {
            self.members = (0..to).collect();
            return;
        }
        let excused = |k: &i32| self.scale_hook_failed.contains(k);
        for k in (to..from).filter(|k| self.members.contains(k) && !excused(k)) {
            self.violations.push(format!(
                "shrank the StatefulSet to {to} while db-{k} is still a member: the quorum counts a member that is gone"
            ));
        }
        for k in (from..to).filter(|k| !self.members.contains(k) && !excused(k)) {
            self.violations.push(format!(
                "grew the StatefulSet to {to} before db-{k}'s member was added: it cannot join"
            ));
        }
    }

    /// A scaling hook Job with `key` finished: a pre-hook that succeeded changes the
    /// membership; one that failed may be skipped.
    pub(super) fn scale_hook_finished(&mut self, key: &str, ok: bool) {
        for (prefix, add) in [("pre-scale-up-", true), ("pre-scale-down-", false)] {
            let ordinal = key
                .strip_prefix(prefix)
                .and_then(|rest| rest.split('-').next())
                .and_then(|k| k.parse::<i32>().ok());
            if let Some(k) = ordinal {
                match (ok, add) {
                    (true, true) => drop(self.members.insert(k)),
                    (true, false) => drop(self.members.remove(&k)),
                    (false, _) => drop(self.scale_hook_failed.insert(k)),
                }
            }
        }
    }

    /// A hook Job succeeded: a pre-hook drains its pod; a pre-scale hook changes the
    /// membership.
    pub(super) fn hook_succeeded(&mut self, key: &str) {
        self.scale_hook_finished(key, true);
        let drained = self.pods.iter().find_map(|(k, p)| {
            self.asked.iter().find_map(|image| {
                let prefix = format!("pre-{k}-{}-", short_hash(&[image, &p.uid]));
                key.starts_with(&prefix).then(|| (*k, p.uid.clone()))
            })
        });
        if let Some((k, uid)) = drained {
            self.drained.insert(k, uid);
        }
    }
}

/// The machine asks for the StatefulSet at `image` with `replicas`.
fn ask_statefulset(world: &mut Cluster, image: &str, replicas: i32) {
    WorldModel::<DistributedDb>::apply(
        world,
        &DdbAction::EnsureStatefulSet(Shape {
            image: image.to_owned(),
            replicas,
            claim_size: "1Gi".to_owned(),
        }),
    );
}

/// The UID of the world's pod `k` (empty without one).
fn pod_uid(world: &Cluster, k: i32) -> String {
    world
        .pods
        .get(&k)
        .map(|p| p.uid.clone())
        .unwrap_or_default()
}

#[test]
fn the_model_catches_a_statefulset_created_before_its_certificates() {
    let mut world = Cluster::new(3, Some(0), false);
    ask_statefulset(&mut world, "db:1", 3);
    let why = violation(&world);
    assert!(why.contains("before its certificates"), "{why}");
}

/// Why the world breaks an invariant (empty if it does not).
fn violation(world: &Cluster) -> String {
    WorldModel::<DistributedDb>::invariants(world, &DdbState::Creating)
        .err()
        .unwrap_or_default()
}

#[test]
fn the_model_catches_a_delete_of_an_upgraded_pod() {
    // The invariants are only as good as their teeth: deleting the replacement of a
    // pod that was just upgraded is reported.
    let mut world = Cluster::new(1, None, false);
    ask_statefulset(&mut world, "db:1", 1);
    WorldModel::<DistributedDb>::settle(&mut world);
    let uid = pod_uid(&world, 0);
    WorldModel::<DistributedDb>::apply(&mut world, &DdbAction::EvictPod { ordinal: 0, uid });
    assert!(WorldModel::<DistributedDb>::invariants(&world, &DdbState::Creating).is_err());
}

#[test]
fn the_model_catches_a_delete_before_the_pre_hook() {
    let mut world = Cluster::new(2, Some(0), false);
    WorldModel::<DistributedDb>::apply(&mut world, &DdbAction::CreateCertificates);
    ask_statefulset(&mut world, "db:1", 2);
    WorldModel::<DistributedDb>::settle(&mut world);
    WorldModel::<DistributedDb>::edit_spec(&mut world, &Edit::Image(1));
    ask_statefulset(&mut world, "db:2", 2);
    let uid = pod_uid(&world, 1);
    WorldModel::<DistributedDb>::apply(&mut world, &DdbAction::EvictPod { ordinal: 1, uid });
    let why = violation(&world);
    assert!(why.contains("before its pre-hook succeeded"), "{why}");
}

#[test]
fn hook_keys_in_the_model_match_the_machine() {
    let key = hook_key(HookPhase::Pre, 2, "db:2", "p7", 1);
    assert!(key.starts_with(&format!("pre-2-{}-", short_hash(&["db:2", "p7"]))));
}

#[test]
fn the_model_catches_two_members_removed_at_once() {
    let mut world = Cluster::existing(3, None, false);
    ask_statefulset(&mut world, "db:1", 1);
    world.sts_observes();
    world.sts_creates_pods();
    let why = violation(&world);
    assert!(why.contains("also taken down"), "{why}");
}

#[test]
fn the_model_catches_a_delete_while_another_pod_is_drained() {
    let mut world = Cluster::existing(3, Some(0), false);
    WorldModel::<DistributedDb>::edit_spec(&mut world, &Edit::Image(1));
    ask_statefulset(&mut world, "db:2", 3);
    let key = hook_key(HookPhase::Pre, 2, "db:2", &pod_uid(&world, 2), 1);
    WorldModel::<DistributedDb>::apply(
        &mut world,
        &DdbAction::RunHook {
            phase: HookPhase::Pre,
            ordinal: 2,
            key,
            from: "db:1".to_owned(),
            to: "db:2".to_owned(),
        },
    );
    WorldModel::<DistributedDb>::step_environment(&mut world, &Move::JobFinishes(0, true));
    WorldModel::<DistributedDb>::step_environment(&mut world, &Move::PodFails(0));
    let uid = pod_uid(&world, 0);
    WorldModel::<DistributedDb>::apply(&mut world, &DdbAction::EvictPod { ordinal: 0, uid });
    let why = violation(&world);
    assert!(why.contains("drained by its pre-hook"), "{why}");
}
