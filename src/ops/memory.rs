//! How the process holds memory: what the allocator is told at start, and when freed
//! memory goes back to the system.
//!
//! glibc's malloc gives every thread that allocates an arena of its own (up to eight
//! per core) and returns freed pages only from the top of the main one. An operator's
//! work comes in bursts (a list of thousands of objects, a wave of reconciles) spread
//! over the runtime's threads: each arena then keeps its share of the burst's freed
//! memory for good, and the resident size ends well above the live heap (heaptrack at
//! 200 clusters: 5.7 MiB live, several times that resident).
//!
//! # Guarantees
//! - [`tune_allocator`]: one arena (the main heap) for every thread, so memory freed
//!   by one thread is reused by the others and no second heap keeps its own free pages
//!   and partly used pages; unless `MALLOC_ARENA_MAX` is set in the environment, which
//!   glibc then applies as given (for comparisons).
//! - [`give_back_periodically`]: every [`TRIM_PERIOD`], whole free pages of every arena
//!   are returned (`malloc_trim`, milliseconds; nothing live moves).
//!
//! Both do nothing where the C library is not glibc.
//!
//! # Assumptions
//! - The operator's threads (the main thread by default, `--worker-threads` workers
//!   otherwise, and the runtime's blocking pool) spend most of their time parked; one
//!   arena's lock is not contended enough to matter (its CPU per reconcile is measured
//!   by `make bench`).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How often freed memory is returned to the system.
pub const TRIM_PERIOD: Duration = Duration::from_secs(30);

/// The environment variable through which glibc takes the arena limit itself.
pub const ARENA_MAX_ENV: &str = "MALLOC_ARENA_MAX";

/// Limit glibc to one malloc arena, unless [`ARENA_MAX_ENV`] says otherwise. Call it
/// before the runtime starts threads (arenas are created on a thread's first
/// allocation).
pub fn tune_allocator() {
    if std::env::var_os(ARENA_MAX_ENV).is_some() {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` takes plain integers and only changes the allocator's tunables;
    // called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Return freed memory to the system every [`TRIM_PERIOD`] until `stop`.
pub async fn give_back_periodically(stop: CancellationToken) {
    let mut tick = tokio::time::interval(TRIM_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => crate::driver::watch::release_freed_memory(),
        }
    }
}
