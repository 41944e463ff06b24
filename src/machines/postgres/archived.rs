//! `status.lastArchived`: the newest WAL file the archive took, from what the primaries
//! report ([`crate::pod::archived`]); it never goes back.

use super::api::LastArchived;
use super::observe::Observed;

/// `status.lastArchived`: the newest, by archive time, of what the live pods report and
/// `before` (what the status said).
#[must_use]
pub fn project(observed: &Observed, before: Option<&LastArchived>) -> Option<LastArchived> {
    observed
        .own
        .archived
        .values()
        .chain(before)
        .max_by_key(|a| a.time)
        .cloned()
}
