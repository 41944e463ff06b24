//! Supervision of `postgres` as a child of the manager: start, signals, a clean stop
//! with a bound, the exit code.
//!
//! # Guarantees
//! - [`Postmaster::stop`] returns within `bound` + [`IMMEDIATE_BOUND`] + the time to
//!   kill: a fast shutdown (`SIGINT`), then an immediate one (`SIGQUIT`) after `bound`,
//!   then [`kill_tree`] after [`IMMEDIATE_BOUND`] more.
//! - Every signal goes through the postmaster's pidfd ([`Pidfd`]): none can reach
//!   another process that got its pid after it exited.
//! - [`Exit::code`] is what the manager exits with: postgres's own code, or 128 + the
//!   signal that killed it (as a shell reports it).
//!
//! # Errors
//! [`SuperviseError`].

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::process::{Pidfd, Signal, kill_tree};

/// How long an immediate shutdown may take before the postmaster and its children are
/// killed.
pub const IMMEDIATE_BOUND: Duration = Duration::from_secs(5);

/// What went wrong supervising the postmaster.
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    /// The `postgres` binary could not be started.
    #[error("starting {binary}: {source}")]
    Spawn {
        /// The binary.
        binary: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The started process could not be held by a pidfd (it exited at once, or the
    /// kernel has no pidfds).
    #[error("holding the postmaster (pid {pid}) by pidfd: {source}")]
    Pidfd {
        /// The postmaster's pid.
        pid: i32,
        /// The OS error.
        source: std::io::Error,
    },
    /// Waiting for the postmaster failed.
    #[error("waiting for the postmaster: {0}")]
    Wait(#[source] std::io::Error),
    /// A signal could not be sent (other than to a process that has exited).
    #[error("sending {signal:?} to the postmaster: {source}")]
    Signal {
        /// The signal.
        signal: Signal,
        /// The OS error.
        source: std::io::Error,
    },
}

/// How the postmaster ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal.
    Signal(i32),
}

impl Exit {
    fn from_status(status: ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => Self::Code(code),
            (None, Some(signal)) => Self::Signal(signal),
            (None, None) => Self::Code(1),
        }
    }

    /// The code the manager exits with: postgres's, or 128 + the signal.
    #[must_use]
    pub fn code(self) -> i32 {
        match self {
            Self::Code(code) => code,
            Self::Signal(signal) => 128 + signal,
        }
    }

    /// Whether it stopped cleanly (code 0).
    #[must_use]
    pub fn is_clean(self) -> bool {
        self == Self::Code(0)
    }
}

/// The running postmaster, a child of the manager.
#[derive(Debug)]
pub struct Postmaster {
    child: Child,
    pidfd: Arc<Pidfd>,
    exit: Option<Exit>,
}

impl Postmaster {
    /// Starts `postgres -D pgdata args…` (its output goes to the manager's).
    ///
    /// # Errors
    /// [`SuperviseError::Spawn`], [`SuperviseError::Pidfd`].
    pub fn start(postgres: &Path, pgdata: &Path, args: &[String]) -> Result<Self, SuperviseError> {
        let mut command = Command::new(postgres);
        command
            .arg("-D")
            .arg(pgdata)
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(false);
        // The shutdown signals reach the server with their default dispositions, whatever
        // the manager inherited: a process started in the background by a
        // non-interactive shell (`nohup lockstep instance &`) has SIGINT and SIGQUIT
        // ignored, and a shell script in front of the server could not trap them.
        // SAFETY: between fork and exec only `signal(2)`, which is async-signal-safe, is
        // called; nothing is allocated or locked.
        unsafe {
            command.pre_exec(|| {
                for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP] {
                    if libc::signal(sig, libc::SIG_DFL) == libc::SIG_ERR {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = command.spawn().map_err(|source| SuperviseError::Spawn {
            binary: postgres.to_owned(),
            source,
        })?;
        let pid = child.id().map_or(0, u32::cast_signed);
        // Not reaped before we wait for it, so the pid is still the child's here.
        let pidfd = Pidfd::open(pid).map_err(|source| SuperviseError::Pidfd { pid, source })?;
        tracing::info!(pid, "postgres started");
        Ok(Self {
            child,
            pidfd: Arc::new(pidfd),
            exit: None,
        })
    }

    /// Its pid.
    #[must_use]
    pub fn pid(&self) -> i32 {
        self.pidfd.pid()
    }

    /// Its pidfd (for the fence).
    #[must_use]
    pub fn pidfd(&self) -> Arc<Pidfd> {
        Arc::clone(&self.pidfd)
    }

    /// Sends `signal` (forwarded `SIGTERM`/`SIGINT`/`SIGQUIT`, or a stop); one that has
    /// already exited is no error.
    ///
    /// # Errors
    /// [`SuperviseError::Signal`].
    pub fn signal(&self, signal: Signal) -> Result<(), SuperviseError> {
        match self.pidfd.signal(signal) {
            Err(e) if e.raw_os_error() != Some(libc::ESRCH) => {
                Err(SuperviseError::Signal { signal, source: e })
            }
            _ => Ok(()),
        }
    }

    /// How it ended, if it has (without waiting).
    ///
    /// # Errors
    /// [`SuperviseError::Wait`].
    pub fn try_exit(&mut self) -> Result<Option<Exit>, SuperviseError> {
        if self.exit.is_none()
            && let Some(status) = self.child.try_wait().map_err(SuperviseError::Wait)?
        {
            self.exit = Some(Exit::from_status(status));
        }
        Ok(self.exit)
    }

    /// Waits until it ends. Cancel-safe.
    ///
    /// # Errors
    /// [`SuperviseError::Wait`].
    pub async fn exited(&mut self) -> Result<Exit, SuperviseError> {
        if let Some(exit) = self.exit {
            return Ok(exit);
        }
        let status = self.child.wait().await.map_err(SuperviseError::Wait)?;
        let exit = Exit::from_status(status);
        self.exit = Some(exit);
        Ok(exit)
    }

    /// Stops it cleanly within `bound` (fast shutdown), else immediately, else kills it
    /// and its children (see the module's guarantees).
    ///
    /// # Errors
    /// [`SuperviseError`] if a signal cannot be sent or the wait fails.
    pub async fn stop(&mut self, bound: Duration) -> Result<Exit, SuperviseError> {
        self.signal(Signal::Int)?;
        if let Ok(exit) = tokio::time::timeout(bound, self.exited()).await {
            return exit;
        }
        tracing::warn!(
            pid = self.pid(),
            ?bound,
            "fast shutdown did not finish: immediate shutdown"
        );
        self.immediate().await
    }

    /// Stops it at once (immediate shutdown), killing it and its children if that takes
    /// longer than [`IMMEDIATE_BOUND`].
    ///
    /// # Errors
    /// [`SuperviseError`] if a signal cannot be sent or the wait fails.
    pub async fn immediate(&mut self) -> Result<Exit, SuperviseError> {
        self.signal(Signal::Quit)?;
        if let Ok(exit) = tokio::time::timeout(IMMEDIATE_BOUND, self.exited()).await {
            return exit;
        }
        tracing::warn!(
            pid = self.pid(),
            "immediate shutdown did not finish: killing the postmaster and its children"
        );
        let _ = kill_tree(&self.pidfd);
        self.exited().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for `postgres` whose signal handling is set by `traps`; it is ready
    /// once [`started`] returns (its traps are installed).
    fn fake_postgres(name: &str, traps: &str) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("lockstep-pm-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("postgres");
        let ready = dir.join("ready");
        let _ = std::fs::remove_file(&ready);
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\n{traps}\ntouch '{}'\nwhile :; do sleep 0.05; done\n",
                ready.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        (path, ready)
    }

    /// Starts the stand-in and waits (with a deadline) until its traps are installed.
    async fn started(name: &str, traps: &str) -> Postmaster {
        let (bin, ready) = fake_postgres(name, traps);
        let pm = Postmaster::start(&bin, Path::new("/nonexistent"), &[]).unwrap();
        tokio::time::timeout(Duration::from_secs(10), async {
            while !ready.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the stand-in installed its traps");
        pm
    }

    #[tokio::test]
    async fn a_clean_stop_forwards_sigint_and_returns_the_exit_code() {
        // Exits 0 on SIGINT, like a fast shutdown.
        let mut pm = started("clean", "trap 'exit 0' INT").await;
        assert_eq!(pm.try_exit().unwrap(), None);
        let exit = pm.stop(Duration::from_secs(10)).await.unwrap();
        assert_eq!(exit, Exit::Code(0));
        assert!(exit.is_clean());
    }

    #[tokio::test]
    async fn a_stop_that_outlasts_its_bound_ends_in_an_immediate_shutdown() {
        // Ignores SIGINT (a fast shutdown that does not finish); exits 3 on SIGQUIT.
        let mut pm = started("slow", "trap '' INT\ntrap 'exit 3' QUIT").await;
        let exit = pm.stop(Duration::from_millis(300)).await.unwrap();
        assert_eq!(exit, Exit::Code(3));
        assert_eq!(exit.code(), 3);
    }

    #[tokio::test]
    async fn a_server_deaf_to_every_shutdown_is_killed() {
        let mut pm = started("deaf", "trap '' INT QUIT TERM").await;
        let exit = pm.stop(Duration::from_millis(100)).await.unwrap();
        assert_eq!(exit, Exit::Signal(libc::SIGKILL));
        assert_eq!(exit.code(), 128 + 9);
    }

    #[tokio::test]
    async fn a_forwarded_sigterm_reaches_postgres() {
        let mut pm = started("term", "trap 'exit 7' TERM").await;
        pm.signal(Signal::Term).unwrap();
        let exit = tokio::time::timeout(Duration::from_secs(10), pm.exited())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(exit, Exit::Code(7));
        // It has exited: further signals are no error.
        pm.signal(Signal::Term).unwrap();
    }
}
