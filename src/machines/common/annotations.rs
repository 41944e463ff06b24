//! The escape hatches: annotations a user sets on a custom resource to un-stick a wait
//! that only a human can resolve.
//!
//! Token annotations (`backup-now`, `retry-hook`, `skip-hook`, `retry-promote`) act once per distinct
//! value: the machine records the token it has acted on, so leaving the annotation in
//! place does nothing more, and setting a new value (a timestamp, a counter, anything)
//! asks again.
//!
//! | annotation | value | effect |
//! |---|---|---|
//! | [`BACKUP_NOW`] | any token | run one on-demand backup for this token |
//! | [`SKIP_FINAL_BACKUP`] | `"true"` | on delete, release the finalizer without a final backup (or stop retrying a failing one) |
//! | [`RETRY_HOOK`] | any token | a hook that failed more often than its `retryLimit` runs again, with a fresh retry budget |
//! | [`SKIP_HOOK`] | any token | a hook that failed more often than its `retryLimit` is treated as done, and the upgrade goes on |
//! | [`RETRY_PROMOTE`] | any token | (PostgresCluster) a promotion whose Job failed more often than its retry limit is tried again, with a fresh budget |

use std::collections::BTreeMap;

/// Request one on-demand backup; the value is a token (a new value requests another).
pub const BACKUP_NOW: &str = "lockstep.dev/backup-now";
/// `"true"`: delete without a final backup, even while one is failing.
pub const SKIP_FINAL_BACKUP: &str = "lockstep.dev/skip-final-backup";
/// Run a hook that exhausted its retries again; the value is a token.
pub const RETRY_HOOK: &str = "lockstep.dev/retry-hook";
/// Treat a hook that exhausted its retries as done; the value is a token.
pub const SKIP_HOOK: &str = "lockstep.dev/skip-hook";
/// Try a promotion that exhausted its retries again; the value is a token.
pub const RETRY_PROMOTE: &str = "lockstep.dev/retry-promote";

/// The non-empty, trimmed value of a token annotation.
pub fn token(annotations: &BTreeMap<String, String>, key: &str) -> Option<String> {
    annotations
        .get(key)
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// Whether a flag annotation is set to `"true"` (case-insensitive).
pub fn flag(annotations: &BTreeMap<String, String>, key: &str) -> bool {
    annotations
        .get(key)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Whether `requested` is a token not yet acted on (`acked` is the last one acted on).
pub fn is_new_token(requested: Option<&str>, acked: Option<&str>) -> bool {
    requested.is_some_and(|r| Some(r) != acked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_blank_token_is_no_request() {
        assert_eq!(token(&annotations(&[(BACKUP_NOW, "  ")]), BACKUP_NOW), None);
        assert_eq!(
            token(&annotations(&[(BACKUP_NOW, " t1 ")]), BACKUP_NOW).as_deref(),
            Some("t1")
        );
    }

    #[test]
    fn only_true_sets_a_flag() {
        assert!(flag(
            &annotations(&[(SKIP_FINAL_BACKUP, "True")]),
            SKIP_FINAL_BACKUP
        ));
        assert!(!flag(
            &annotations(&[(SKIP_FINAL_BACKUP, "yes")]),
            SKIP_FINAL_BACKUP
        ));
        assert!(!flag(&annotations(&[]), SKIP_FINAL_BACKUP));
    }

    #[test]
    fn a_token_acts_once() {
        assert!(is_new_token(Some("a"), None));
        assert!(!is_new_token(Some("a"), Some("a")));
        assert!(is_new_token(Some("b"), Some("a")));
        assert!(!is_new_token(None, Some("a")));
    }
}
