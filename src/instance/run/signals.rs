//! The signals PID 1 forwards that the manager does not act on: `SIGHUP`, `SIGUSR1`
//! and `SIGUSR2`, caught and ignored.
//!
//! PID 1 passes every signal sent to the container on to the manager ([`super::init`]).
//! The default action of these three ends a process, so before they were caught a
//! person's `kill -HUP 1` (what reloads many images' servers) ended the primary's
//! manager, and with it the renewals and the fence.
//!
//! Ignored rather than acted on:
//! - `SIGHUP` is not passed on to the postmaster as a reload. The server's settings are
//!   the manager's to apply: it writes them from the pod's annotation (the person's
//!   `spec.postgresql`, through the operator) and reloads the server itself, and it
//!   reports on the pod what it applied. A reload behind its back would apply whatever
//!   else was edited on disk, unreported. To change a setting, edit `spec.postgresql`.
//! - `SIGUSR1` and `SIGUSR2` mean nothing to the manager.
//!
//! # Guarantees
//! - Once [`Ignored::install`] returned, none of the three ends the manager's process;
//!   each one that arrives is seen by [`Ignored::recv`] (which the manager logs).
//! - They are caught with a handler, not `SIG_IGN`: a handler is reset at `exec`, so
//!   the postmaster and every tool the manager starts keep the default dispositions
//!   (PostgreSQL installs its own for all three), while an ignored disposition would be
//!   inherited.
//!
//! # Errors
//! [`Ignored::install`]: the handlers could not be installed.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// The signals the manager catches and ignores, by name.
pub const IGNORED: [&str; 3] = ["SIGHUP", "SIGUSR1", "SIGUSR2"];

/// The handlers of the signals the manager ignores.
#[derive(Debug)]
pub struct Ignored {
    hangup: Signal,
    user1: Signal,
    user2: Signal,
}

impl Ignored {
    /// Install the handlers of `SIGHUP`, `SIGUSR1` and `SIGUSR2` (in a Tokio runtime).
    ///
    /// # Errors
    /// The handlers could not be installed.
    pub fn install() -> std::io::Result<Self> {
        Ok(Self {
            hangup: signal(SignalKind::hangup())?,
            user1: signal(SignalKind::user_defined1())?,
            user2: signal(SignalKind::user_defined2())?,
        })
    }

    /// The next of them to arrive, by name (one of [`IGNORED`]).
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            Some(()) = self.hangup.recv() => IGNORED[0],
            Some(()) = self.user1.recv() => IGNORED[1],
            Some(()) = self.user2.recv() => IGNORED[2],
            else => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::Duration;

    /// Set in the child process the test starts: the child raises the signals.
    const CHILD: &str = "LOCKSTEP_TEST_IGNORED_SIGNALS_CHILD";
    const NAME: &str = "instance::run::signals::tests::the_manager_survives_sighup_sigusr1_and_sigusr2_and_sees_each";

    /// In the child: install the handlers, raise each signal at this process and wait
    /// for it. Without a handler the first one ends the child.
    fn raise_each() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let mut ignored = Ignored::install().expect("the handlers install");
            for (signal, name) in [libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2]
                .into_iter()
                .zip(IGNORED)
            {
                // SAFETY: raise with a valid signal, whose handler is installed above.
                assert_eq!(unsafe { libc::raise(signal) }, 0);
                let seen = tokio::time::timeout(Duration::from_secs(30), ignored.recv())
                    .await
                    .expect("the signal is seen");
                assert_eq!(seen, name);
            }
        });
    }

    #[test]
    fn the_manager_survives_sighup_sigusr1_and_sigusr2_and_sees_each() {
        if std::env::var_os(CHILD).is_some() {
            raise_each();
            return;
        }
        // In a child process of its own: a signal that ends it must not end the tests.
        let out = Command::new(std::env::current_exe().expect("the test binary"))
            .args([NAME, "--exact", "--test-threads=1", "--nocapture"])
            .env(CHILD, "1")
            .output()
            .expect("the child runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "the child ran this test and survived: {:?}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
