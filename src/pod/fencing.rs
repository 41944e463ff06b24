//! The fencing numbers both sides count with: the Lease's duration `L`, the holder's
//! tenure `T` (its fence: no accepted renewal for this long and its server is down) and
//! how often the holder renews, `R`. The operator renders them into each pod's
//! environment and waits `L + S` past a renewal before it hands the Lease over; the
//! instance manager fences by `T` and renews every `R` (`docs/fencing.md`).

use std::time::Duration;

/// `R`: how often a holder renews, in seconds.
pub const RENEW_SECONDS: u32 = 2;

/// `T` for a Lease of `lease_seconds` (`L`): half of it, rounded down, so that a holder
/// is down well before the operator's `L + S` has passed.
#[must_use]
pub const fn tenure_seconds(lease_seconds: u32) -> u32 {
    lease_seconds / 2
}

/// The three numbers, as one pod runs with them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FencingTerms {
    /// `L`.
    pub lease: Duration,
    /// `T`.
    pub tenure: Duration,
    /// `R`.
    pub renew: Duration,
}

impl FencingTerms {
    /// The terms of a Lease of `lease_seconds`: `T` = [`tenure_seconds`], `R` =
    /// [`RENEW_SECONDS`].
    #[must_use]
    pub fn of_lease(lease_seconds: u32) -> Self {
        FencingTerms {
            lease: Duration::from_secs(lease_seconds.into()),
            tenure: Duration::from_secs(tenure_seconds(lease_seconds).into()),
            renew: Duration::from_secs(RENEW_SECONDS.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_lease_gives_a_tenure_of_seven_seconds_renewed_every_two() {
        let terms = FencingTerms::of_lease(15);
        assert_eq!(terms.tenure, Duration::from_secs(7));
        assert_eq!(terms.renew, Duration::from_secs(2));
    }
}
