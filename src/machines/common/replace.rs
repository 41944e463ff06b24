//! Replacing one pod: it is deleted with its recorded UID as a precondition, and the
//! StatefulSet controller recreates it from the template at the target image. Both
//! machines walk the same steps; [`replacement`] says which one the observation shows,
//! and the machine decides what each means for it.

use super::observe::{PodView, StatefulSetView, pod_name, pod_names};

/// Where the replacement of the pod recorded with a UID stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replacement<'a> {
    /// The recorded pod still runs: it is to be deleted (when that is allowed).
    Present {
        /// Whether it is Ready.
        ready: bool,
        /// Its image.
        image: Option<&'a str>,
    },
    /// The recorded pod is terminating.
    Terminating,
    /// No pod runs at the ordinal: the controller has yet to recreate it.
    Missing,
    /// A new pod runs an image other than the target.
    Stale {
        /// Its UID.
        uid: &'a str,
        /// Its image, as messages print it.
        image: &'a str,
    },
    /// A new pod runs the target and is not Ready yet.
    Starting,
    /// A new pod runs the target and is Ready.
    Replaced {
        /// Its UID.
        uid: &'a str,
    },
}

/// Classify what is observed at the ordinal of the pod recorded with `uid`, replaced to
/// run `target` (the pod's role label plays no part).
pub fn replacement<'a, R>(pod: Option<&'a PodView<R>>, uid: &str, target: &str) -> Replacement<'a> {
    match pod {
        Some(p) if p.uid == uid && p.terminating => Replacement::Terminating,
        Some(p) if p.uid == uid => Replacement::Present {
            ready: p.ready,
            image: p.image.as_deref(),
        },
        Some(p) if p.terminating => Replacement::Missing,
        Some(p) if p.image.as_deref() != Some(target) => Replacement::Stale {
            uid: &p.uid,
            image: p.image.as_deref().unwrap_or("no image"),
        },
        Some(p) if !p.ready => Replacement::Starting,
        Some(p) => Replacement::Replaced { uid: &p.uid },
        None => Replacement::Missing,
    }
}

/// What the whole wait after a pod's deletion says, while `name` terminates, is not yet
/// recreated, or starts at `target`: one message for the wait, so that `Progressing` is
/// written once for it (its readiness changes are shown by the counts), not at each
/// phase of the pod.
fn replacing(name: &str, target: &str) -> String {
    format!("waiting for {name} to be recreated at {target} and become Ready")
}

/// The message of a stay while the recorded pod `name` terminates (to come back at
/// `target`).
pub fn terminating(name: &str, target: &str) -> String {
    replacing(name, target)
}

/// The message of the stay that deletes pod `name` (with `uid`) to recreate it at
/// `target`.
pub fn deleting(name: &str, uid: &str, target: &str) -> String {
    format!("deleting {name} (uid {uid}) to recreate it at {target}")
}

/// The message of a stay while the recreated pod `name` starts at `target`.
pub fn starting(name: &str, target: &str) -> String {
    replacing(name, target)
}

/// The message of a stay while pod `name` is not recreated yet (at `target`).
pub fn missing(name: &str, target: &str) -> String {
    replacing(name, target)
}

/// Why pod `k` of the StatefulSet `name` (of `replicas` pods) may not be taken down now
/// to be recreated at `target`, if it may not: another pod is not `serving`, or the
/// StatefulSet (`sts`) does not yet act on a template holding `target` (the pod would
/// come back at the old image).
pub fn hold_before_delete(
    name: &str,
    k: i32,
    replicas: i32,
    serving: impl Fn(i32) -> bool,
    sts: Option<&StatefulSetView>,
    target: &str,
) -> Option<String> {
    let others_down: Vec<i32> = (0..replicas).filter(|j| *j != k && !serving(*j)).collect();
    if !others_down.is_empty() {
        return Some(format!(
            "waiting for {} to be Ready before taking {} down",
            pod_names(name, &others_down),
            pod_name(name, k)
        ));
    }
    match sts {
        Some(s) if s.serves(target) => None,
        _ => Some(format!(
            "waiting for the StatefulSet template to hold {target} before taking {} down",
            pod_name(name, k)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, image: &str, ready: bool, terminating: bool) -> PodView {
        PodView {
            uid: uid.to_owned(),
            image: Some(image.to_owned()),
            ready,
            terminating,
            created: None,
            version: String::new(),
            role: (),
        }
    }

    #[test]
    fn each_step_of_a_replacement_is_told_apart() {
        fn at(pod: Option<&PodView>) -> Replacement<'_> {
            replacement(pod, "u1", "v2")
        }
        assert_eq!(
            at(Some(&pod("u1", "v1", true, false))),
            Replacement::Present {
                ready: true,
                image: Some("v1")
            }
        );
        assert_eq!(
            at(Some(&pod("u1", "v1", true, true))),
            Replacement::Terminating
        );
        assert_eq!(at(None), Replacement::Missing);
        assert_eq!(
            at(Some(&pod("u2", "v2", false, true))),
            Replacement::Missing
        );
        assert_eq!(
            at(Some(&pod("u2", "v0", true, false))),
            Replacement::Stale {
                uid: "u2",
                image: "v0"
            }
        );
        assert_eq!(
            at(Some(&pod("u2", "v2", false, false))),
            Replacement::Starting
        );
        assert_eq!(
            at(Some(&pod("u2", "v2", true, false))),
            Replacement::Replaced { uid: "u2" }
        );
    }
}
