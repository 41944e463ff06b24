//! The marks the pods' managers leave on the primary Lease, which the operator reads.

/// The Lease annotation a holder writes when it stopped its server on purpose and
/// cleared `holderIdentity`: `<pod-name>/<pod-uid>`.
pub const RELEASED_BY: &str = "lockstep.dev/released-by";
/// The Lease annotation a primary that stopped cleanly on demotion leaves: its last WAL
/// position, which the next primary's agent must have received before it promotes
/// (written and read by the pods; named here for messages).
pub const RELEASED_LSN: &str = "lockstep.dev/released-lsn";
/// The Lease annotation the pods' agents add at the first renewal made with data on
/// their volume: the cluster's database exists. A pod labelled primary whose volume is
/// empty then never bootstraps a new, empty database in its place (Patroni's
/// `initialize` key plays this part). Remove it only to start the cluster anew, empty.
pub const INITIALIZED: &str = "lockstep.dev/initialized";
