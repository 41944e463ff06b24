//! A bootstrap from backups (`spec.bootstrap.recovery`) that failed, as the operator
//! learns of it: the first primary's instance manager exits with an error that begins
//! with [`RECOVERY_FAILED`], and its container's termination message (the log's tail,
//! `FallbackToLogsOnError`) carries that line. The operator reads it from the pod
//! ([`failure_in`]) and keeps the cluster `Creating`, `Degraded` with
//! `RecoveryFailed`, naming the pod and the error; the pod never turns Ready, so
//! nothing serves a half-restored cluster.

/// How the manager's error begins.
pub const RECOVERY_FAILED: &str = "recovery from backups failed: ";

/// The error a termination message names after [`RECOVERY_FAILED`], to the end of its
/// line; none when it names none.
#[must_use]
pub fn failure_in(message: &str) -> Option<String> {
    message.lines().rev().find_map(|line| {
        let at = line.find(RECOVERY_FAILED)?;
        let error = line[at + RECOVERY_FAILED.len()..].trim();
        (!error.is_empty()).then(|| error.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_managers_log_tail_gives_the_error_and_nothing_else_gives_one() {
        let tail = "2026-12-03T06:45:22Z  INFO restoring the source's backups\n\
                    2026-12-03T06:45:22Z ERROR lockstep::instance::run::manager: preparation failed task=Bootstrap error=recovery from backups failed: pgbackrest restore: ERROR: [075]: unable to find backup set\n\
                    2026-12-03T06:45:24Z  INFO exiting status=4\n";
        assert_eq!(
            failure_in(tail).as_deref(),
            Some("pgbackrest restore: ERROR: [075]: unable to find backup set")
        );
        assert_eq!(failure_in("fenced: no renewal for 7 s"), None);
    }
}
