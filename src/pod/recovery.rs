//! A bootstrap from backups (`spec.bootstrap.recovery`) that failed, as the operator
//! learns of it: before it exits, the first primary's instance manager writes the pod
//! condition [`RECOVERY`] (`False`, [`REASON`]) with its error, which begins with
//! [`RECOVERY_FAILED`] in its log. The operator keeps the cluster `Creating`, `Degraded`
//! with `RecoveryFailed`, naming the pod and the error; the pod never turns Ready, so
//! nothing serves a half-restored cluster.

/// How the manager's error begins (in its log).
pub const RECOVERY_FAILED: &str = "recovery from backups failed: ";
/// The pod condition's type.
pub const RECOVERY: &str = "lockstep.dev/Recovery";
/// Its reason when the recovery failed.
pub const REASON: &str = "RecoveryFailed";

/// The condition a failed recovery's manager writes: status, reason and its error.
#[must_use]
pub fn condition(error: &str) -> (&'static str, &'static str, String) {
    (
        "False",
        REASON,
        error
            .strip_prefix(RECOVERY_FAILED)
            .unwrap_or(error)
            .to_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_condition_names_the_error_without_the_logs_prefix() {
        assert_eq!(
            condition("recovery from backups failed: pgbackrest restore: ERROR: [075]"),
            (
                "False",
                REASON,
                "pgbackrest restore: ERROR: [075]".to_owned()
            )
        );
    }
}
