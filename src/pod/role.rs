//! The role label the operator gives each instance pod, which its manager reads.

/// A role a pod is labelled with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString)]
#[strum(serialize_all = "lowercase")]
pub enum Role {
    /// Selected by `<name>-rw`; starts as (or becomes) the primary.
    Primary,
    /// Selected by `<name>-ro`; clones or follows the primary.
    Replica,
    /// Selected by neither Service: a pod that is (or may still be) a writable primary
    /// but must not serve, e.g. the old primary of a switchover until it restarts. Only a
    /// recreated pod (a new UID, so no label) is labelled `replica` in its place; if it
    /// restarts in place, its agent treats `demoted` like `replica` (rewinds).
    Demoted,
}
