//! Cron schedules, validated by the API server before a CronJob is ever built.
//!
//! Both kinds take a backup schedule; the rule lives here once so their CRDs accept and
//! reject exactly the same strings.

macro_rules! cron_item {
    ($v:literal) => {
        concat!("([*?]|(", $v, ")(-(", $v, "))?)(/[0-9]+)?")
    };
}
macro_rules! cron_field {
    ($v:literal) => {
        concat!(cron_item!($v), "(,", cron_item!($v), ")*")
    };
}

macro_rules! cron_regex {
    () => {
        concat!(
            "^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|",
            cron_field!("[0-5]?[0-9]"),
            " +",
            cron_field!("[01]?[0-9]|2[0-3]"),
            " +",
            cron_field!("0?[1-9]|[12][0-9]|3[01]"),
            " +",
            cron_field!("0?[1-9]|1[0-2]|[A-Za-z]{3}"),
            " +",
            cron_field!("[0-7]|[A-Za-z]{3}"),
            ")$"
        )
    };
}

/// The regular expression (RE2, without backslashes so that it embeds in a CEL string)
/// a backup schedule must match: a cron macro, or five fields (minute, hour, day of
/// month, month, day of week) of values, ranges, lists and steps within each field's
/// bounds.
pub const CRON_PATTERN: &str = cron_regex!();

/// The CEL rule a backup schedule field carries (the schema rule on a string).
pub const CRON_RULE: &str = concat!("self.matches('", cron_regex!(), "')");
