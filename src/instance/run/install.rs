//! `lockstep install-instance`: the init container of every PostgreSQL pod copies this
//! very binary into a shared `emptyDir`, so that the PostgreSQL container (any image
//! with the server binaries, the official `postgres:<major>` included) runs
//! `lockstep instance` as PID 1 without a file of Lockstep's own in its image.
//!
//! # Guarantees
//! - The destination is either absent or a complete, executable copy: the copy is
//!   written beside it and renamed into place.
//! - Re-running (a restarted init container) replaces the copy with the same bytes.
//!
//! # Errors
//! [`InstallError`]: this binary cannot be read, or the directory cannot be written.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The file name the copy gets in the destination directory.
pub const BINARY: &str = "lockstep";

/// Why the binary could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The running binary's own path is unknown (`/proc/self/exe` unreadable).
    #[error("cannot find this binary: {0}")]
    Myself(#[source] io::Error),
    /// Writing, or renaming into place, the copy failed.
    #[error("cannot install {path}: {source}")]
    Write {
        /// The file being written.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// Copies the running binary into `dir` as [`BINARY`] (mode 0755) and returns its
/// path.
///
/// # Errors
/// [`InstallError`] as documented on the module.
pub fn install(dir: &Path) -> Result<PathBuf, InstallError> {
    let me = std::env::current_exe().map_err(InstallError::Myself)?;
    copy_executable(&me, dir)
}

/// Copies `source` into `dir` as [`BINARY`], mode 0755, through a temporary name.
///
/// # Errors
/// [`InstallError::Write`] naming the file that could not be written.
pub fn copy_executable(source: &Path, dir: &Path) -> Result<PathBuf, InstallError> {
    let target = dir.join(BINARY);
    let partial = dir.join(format!(".{BINARY}.partial"));
    fn write(path: &Path) -> impl FnOnce(io::Error) -> InstallError + '_ {
        move |source| InstallError::Write {
            path: path.to_owned(),
            source,
        }
    }
    fs::copy(source, &partial).map_err(write(&partial))?;
    fs::set_permissions(&partial, fs::Permissions::from_mode(0o755)).map_err(write(&partial))?;
    fs::rename(&partial, &target).map_err(write(&target))?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory of this test's own.
    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("lockstep-install-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    #[test]
    fn the_copy_is_complete_and_executable_and_a_second_run_replaces_it() {
        let dir = scratch("copy");
        let source = dir.join("source");
        fs::write(&source, b"#!/bin/true\n").expect("source");
        let into = dir.join("bin");
        fs::create_dir(&into).expect("bin");

        let first = copy_executable(&source, &into).expect("installs");
        let second = copy_executable(&source, &into).expect("installs again");

        assert_eq!(first, second);
        assert_eq!(fs::read(&second).expect("copy"), b"#!/bin/true\n");
        let mode = fs::metadata(&second).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        assert!(
            !into.join(".lockstep.partial").exists(),
            "no partial file is left"
        );
    }

    #[test]
    fn an_unwritable_directory_is_an_error_naming_the_file() {
        let missing = scratch("absent").join("absent");
        let err = copy_executable(&std::env::current_exe().expect("exe"), &missing)
            .expect_err("no such directory");
        assert!(err.to_string().contains("absent"), "{err}");
    }
}
