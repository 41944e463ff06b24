//! Whether a standby keeps up, as its instance manager tells the operator: the pod
//! condition [`STREAMING`], written on its own pod (as [`crate::pod::applied`]'s) when it
//! changes.
//!
//! | status | reason | when |
//! |---|---|---|
//! | `True` | [`reason::STREAMING`] | its WAL receiver streams from the primary |
//! | `False` | [`reason::NOT_STREAMING`] | it has not streamed for [`NOT_STREAMING_SECONDS`] (disconnected, or catching up from far behind) |
//!
//! Only a standby writes it; a primary's pod keeps what it last wrote as a standby,
//! which nothing reads while it is the primary.
//!
//! The operator reads it before it takes on a switchover on demand: a target that does
//! not stream is refused up front (the switchover would wait, writes unavailable, until
//! it caught up), naming why. A target that reports nothing (a pod made before instances
//! reported) is taken on: the released-position gate still guarantees no loss.

/// The pod condition's type.
pub const STREAMING: &str = "lockstep.dev/Streaming";

/// How long a standby must not stream before it says so: a receiver restarting (a
/// reload of `primary_conninfo`, the primary's switchover) reconnects within it.
pub const NOT_STREAMING_SECONDS: u64 = 10;

/// The condition's reasons.
pub mod reason {
    /// Its WAL receiver streams.
    pub const STREAMING: &str = "Streaming";
    /// Its WAL receiver has not streamed for a while.
    pub const NOT_STREAMING: &str = "NotStreaming";
}

/// The condition's status, reason and message for a standby that streams or not.
#[must_use]
pub fn condition(streaming: bool) -> (&'static str, &'static str, String) {
    if streaming {
        (
            "True",
            reason::STREAMING,
            "its WAL receiver streams from the primary".to_owned(),
        )
    } else {
        (
            "False",
            reason::NOT_STREAMING,
            format!(
                "its WAL receiver has not streamed for {NOT_STREAMING_SECONDS} s or more: it is behind the primary"
            ),
        )
    }
}
