//! Whether an instance's volume holds a database, as its instance manager tells the
//! operator: the pod condition [`DATA`], written on its own pod (as
//! [`crate::pod::applied`]'s) when it changes.
//!
//! | status | reason | when |
//! |---|---|---|
//! | `True` | [`reason::DATA_PRESENT`] | `$PGDATA` holds a primary's or a standby's data |
//! | `False` | [`reason::NO_DATA`] | `$PGDATA` is empty, holds an interrupted bootstrap or clone, or files that are not a database |
//!
//! The operator reads it before it gives up a failover or a switchover and goes back to
//! the old primary: that is safe only while the old primary's volume still holds the
//! newest WAL. An old primary whose pod was recreated on an empty volume (its claim was
//! lost) can hold no commit, so the failover keeps waiting, `Degraded`, for a member
//! that can be promoted or for a person (found by the model check: two volumes lost in a
//! synchronous cluster, and the failover went back to the empty old primary, and round
//! again, for ever). A pod that reports nothing (its manager has not looked yet, or a
//! pod made before instances reported) is taken at its word as before: on its volume.

/// The pod condition's type.
pub const DATA: &str = "lockstep.dev/Data";

/// The condition's reasons.
pub mod reason {
    /// `$PGDATA` holds a database.
    pub const DATA_PRESENT: &str = "DataPresent";
    /// `$PGDATA` holds none.
    pub const NO_DATA: &str = "NoData";
}

/// The condition's status, reason and message for a volume that holds a database or
/// not.
#[must_use]
pub fn condition(has_data: bool) -> (&'static str, &'static str, String) {
    if has_data {
        (
            "True",
            reason::DATA_PRESENT,
            "its volume holds the data of a primary or a standby".to_owned(),
        )
    } else {
        (
            "False",
            reason::NO_DATA,
            "its volume holds no database (empty, or a bootstrap or clone was interrupted): it holds no commit until it clones one".to_owned(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_volume_without_a_database_says_false() {
        assert_eq!(condition(true).0, "True");
        assert_eq!(condition(false).0, "False");
        assert_eq!(condition(false).1, reason::NO_DATA);
    }
}
