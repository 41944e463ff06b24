//! The fence's clock: monotonic time that also counts while the machine is suspended.
//!
//! `std::time::Instant` is `CLOCK_MONOTONIC` on Linux, which stops while the machine
//! sleeps; the Lease's holder must count that time too (the API server's wall clock
//! did), so every deadline of the instance manager is read from `CLOCK_BOOTTIME`,
//! which is never set back and keeps counting through a suspend (the bash agent read
//! the same clock from `/proc/uptime`).

use std::ops::{Add, Sub};
use std::time::Duration;

/// A point on `CLOCK_BOOTTIME`: the time since the machine booted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Moment(Duration);

impl Moment {
    /// Now.
    #[must_use]
    pub fn now() -> Self {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; CLOCK_BOOTTIME exists on every
        // Linux since 2.6.39, so the call cannot fail (its result is checked anyway).
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &raw mut ts) };
        assert_eq!(rc, 0, "clock_gettime(CLOCK_BOOTTIME) failed");
        let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
        let nanos = u32::try_from(ts.tv_nsec).unwrap_or(0);
        Self(Duration::new(secs, nanos))
    }

    /// The clock's origin (the boot).
    #[must_use]
    pub fn zero() -> Self {
        Self(Duration::ZERO)
    }

    /// The time from `earlier` to this moment (zero if `earlier` is later).
    #[must_use]
    pub fn since(self, earlier: Self) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// The time elapsed since this moment.
    #[must_use]
    pub fn elapsed(self) -> Duration {
        Self::now().since(self)
    }
}

impl Add<Duration> for Moment {
    type Output = Self;

    fn add(self, rhs: Duration) -> Self {
        Self(self.0.saturating_add(rhs))
    }
}

impl Sub<Duration> for Moment {
    type Output = Self;

    fn sub(self, rhs: Duration) -> Self {
        Self(self.0.saturating_sub(rhs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_never_goes_back_and_counts_a_sleep() {
        let before = Moment::now();
        std::thread::sleep(Duration::from_millis(20));
        let after = Moment::now();
        assert!(after > before);
        assert!(after.since(before) >= Duration::from_millis(20));
        assert_eq!(before.since(after), Duration::ZERO);
    }
}
