//! The instance manager in the pod: an init container copies `lockstep` from the
//! operator's image into an `emptyDir`, and the PostgreSQL container runs it as PID 1
//! (`lockstep instance`, `src/instance/`). The PostgreSQL image needs the server
//! binaries and nothing of Lockstep's: the project's `ghcr.io/lockstep-dev/postgres:<major>`
//! images and the official `postgres:<major>` ones work.
//!
//! The image is the operator's own: `lockstep run --instance-image` (env
//! `LOCKSTEP_INSTANCE_IMAGE`) sets it once at start, before any object is rendered;
//! it is configuration of the process, like its namespace, not of a cluster.

use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{Container, EmptyDirVolumeSource, Volume};

use super::mount;

/// The image the init container copies `lockstep` from, unless the operator was told
/// otherwise: the reference `tools/images/build.sh lockstep` builds.
pub const DEFAULT_INSTANCE_IMAGE: &str =
    concat!("ghcr.io/lockstep-dev/operator:", env!("CARGO_PKG_VERSION"));
/// The shared volume holding the copy.
pub const BIN_VOLUME: &str = "lockstep-bin";
/// Where that volume is mounted in the server's container.
pub const BIN_PATH: &str = "/lockstep/bin";
/// Where the init container mounts it: not under `/lockstep`, which is the binary itself
/// in the operator's image.
pub const INSTALL_PATH: &str = "/install";
/// The copy the PostgreSQL container runs.
pub const INSTANCE_BINARY: &str = "/lockstep/bin/lockstep";
/// The init container's name.
pub const INSTALL_CONTAINER: &str = "install-instance";
/// The PostgreSQL container's command: the instance manager as PID 1.
pub const INSTANCE_COMMAND: [&str; 2] = [INSTANCE_BINARY, "instance"];
/// The liveness (and startup) check, `lockstep instance --liveness`: alive while the
/// manager prepares on purpose (bootstrap, clone, rewind, waiting for the Lease);
/// once the server has answered, dead only when it does not answer at all
/// (`pg_isready` exit 2): accepting or rejecting connections both pass.
pub const LIVENESS_COMMAND: [&str; 3] = [INSTANCE_BINARY, "instance", "--liveness"];

static INSTANCE_IMAGE: OnceLock<String> = OnceLock::new();

/// Sets the image of the init container, once per process; a later call is ignored
/// (the first one, at start, wins), so every render of a process agrees.
pub fn set_instance_image(image: String) {
    let _ = INSTANCE_IMAGE.set(image);
}

/// The image of the init container: the one set at start, else
/// [`DEFAULT_INSTANCE_IMAGE`].
pub fn instance_image() -> &'static str {
    INSTANCE_IMAGE
        .get()
        .map_or(DEFAULT_INSTANCE_IMAGE, String::as_str)
}

/// The init container: `/lockstep install-instance --to <INSTALL_PATH>` in the operator's
/// image (it runs as the pod's user, `postgres`; the `emptyDir` is writable by it).
#[must_use]
pub fn install_container() -> Container {
    Container {
        name: INSTALL_CONTAINER.to_owned(),
        image: Some(instance_image().to_owned()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(
            ["/lockstep", "install-instance", "--to", INSTALL_PATH]
                .map(str::to_owned)
                .to_vec(),
        ),
        volume_mounts: Some(vec![mount(BIN_VOLUME, INSTALL_PATH, false)]),
        ..Container::default()
    }
}

/// The `emptyDir` the copy lives in (a restarted pod copies again).
#[must_use]
pub fn bin_volume() -> Volume {
    Volume {
        name: BIN_VOLUME.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}
