//! Cron schedules, validated by the API server before a CronJob is ever built.
//!
//! Both kinds take a backup schedule; the rule lives here once so their CRDs accept and
//! reject exactly the same strings.

// A step is a positive number: Kubernetes refuses `*/0`.
macro_rules! cron_item {
    ($v:literal) => {
        concat!("([*?]|(", $v, ")(-(", $v, "))?)(/0*[1-9][0-9]*)?")
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
            cron_field!("0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)"),
            " +",
            cron_field!("[0-7]|(?i:sun|mon|tue|wed|thu|fri|sat)"),
            ")$"
        )
    };
}

/// The regular expression (RE2, without backslashes so that it embeds in a CEL string)
/// a backup schedule must match: a cron macro, or five fields (minute, hour, day of
/// month, month, day of week) of values, month and weekday names, ranges, lists and
/// positive steps within each field's bounds.
pub const CRON_PATTERN: &str = cron_regex!();

/// The CEL rule a backup schedule field carries (the schema rule on a string).
pub const CRON_RULE: &str = concat!("self.matches('", cron_regex!(), "')");

/// The CEL rule that every numeric range in a schedule runs upwards (`1-5`, not `5-1`),
/// as Kubernetes' cron parser requires. Macros have no ranges.
pub const CRON_RANGE_RULE: &str = "self.findAll('[0-9]+-[0-9]+').all(r, \
    int(r.split('-')[0]) <= int(r.split('-')[1]))";

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(schedule: &str) -> bool {
        regex::Regex::new(CRON_PATTERN)
            .expect("the pattern compiles")
            .is_match(schedule)
    }

    #[test]
    fn schedules_kubernetes_accepts_match() {
        for good in [
            "0 3 * * *",
            "*/15 * * * *",
            "0 0 1,15 * MON-FRI",
            "@daily",
            "5 4 * * sun",
            "0 0 * JAN,jul *",
            "0 0 1-5/2 * *",
        ] {
            assert!(matches(good), "{good}");
        }
    }

    #[test]
    fn schedules_kubernetes_refuses_do_not_match() {
        for bad in [
            "every day",
            "61 * * * *",
            "* * * *",
            "0 24 * * *",
            "@often",
            "",
            "*/0 * * * *",
            "0 0 * FOO *",
            "0 0 * * FUN",
            "0 0 1-5/0 * *",
        ] {
            assert!(!matches(bad), "{bad}");
        }
    }
}
