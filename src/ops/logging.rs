//! Structured logs through `tracing-subscriber`.
//!
//! - The format is text (human) or JSON (one object per line: the event's fields at the
//!   top level, the innermost span's fields under `span` and every enclosing span under
//!   `spans`, so a reconcile's `namespace`, `name` and `state` appear on each of its
//!   lines).
//! - The filter comes from `RUST_LOG` (default `info`, with kube's own chatter at `warn`).
//!
//! # Guarantees
//! - No secret value is logged by Lockstep: tokens, kubeconfigs and Secret data are never
//!   passed to a log macro, and objects are logged by namespace/name, never by content.

use std::str::FromStr;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable text.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!("unknown log format {other:?} (text or json)")),
        }
    }
}

/// The filter used when `RUST_LOG` is unset.
pub const DEFAULT_FILTER: &str = "info,kube_runtime=warn,kube_client=warn,kube_lease_manager=warn";

/// Install the global subscriber, writing to stderr. A second call is a no-op.
pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_span_events(FmtSpan::NONE)
        .with_target(true);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
    // Already installed (tests call this more than once): keep the first.
    drop(result);
}
