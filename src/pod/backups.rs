//! A base backup's summary, as the primary's instance manager writes it after the
//! backup and its retention ran (`instance::run::basebackup::summary`, ended by the
//! first recoverable point) and the operator reads it from the Job's termination log.
//!
//! # Assumptions
//! - The manager's summary and [`first_recoverable_point`] share
//!   [`FIRST_RECOVERABLE_POINT`] and RFC 3339 times.

use chrono::{DateTime, Utc};

/// What precedes the point in a base backup's summary.
pub const FIRST_RECOVERABLE_POINT: &str = "the first recoverable point ";

/// The first recoverable point a base backup's summary names, if it names one.
#[must_use]
pub fn first_recoverable_point(summary: &str) -> Option<DateTime<Utc>> {
    let (_, rest) = summary.rsplit_once(FIRST_RECOVERABLE_POINT)?;
    let at = rest.split([')', ' ', '\n']).next()?;
    DateTime::parse_from_rfc3339(at)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}
