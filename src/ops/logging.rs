//! Structured logs through `tracing-subscriber`.
//!
//! - The format is text (human) or JSON ([`FlatJson`]: one object per line, with the
//!   fields of every enclosing span at the top level, so each line of a reconcile
//!   carries its `machine`, `namespace`, `name` and `state`).
//! - The filter comes from `RUST_LOG` (default `info`, with kube's own chatter at `warn`).
//!
//! # Guarantees
//! - No secret value is logged by Lockstep: tokens, kubeconfigs and Secret data are never
//!   passed to a log macro, and objects are logged by namespace/name, never by content.

use std::str::FromStr;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{FmtSpan, JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

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
        // Colours only on a terminal: a container's log or a test's file gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_span_events(FmtSpan::NONE)
        .with_target(true);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .fmt_fields(JsonFields::new())
            .event_format(FlatJson)
            .try_init(),
    };
    // Already installed (tests call this more than once): keep the first.
    drop(result);
}

/// One JSON object per line: `timestamp`, `level`, `target`, the fields of every
/// enclosing span (outermost first), then the event's own fields (`message` among them),
/// all at the top level. Later keys win, so an event's field overrides a span's.
///
/// (tracing-subscriber's own JSON format nests span fields under `span`/`spans` next to
/// the span's name, also called `name`, which hides a `name` field.)
#[derive(Debug, Clone, Copy, Default)]
pub struct FlatJson;

impl<S, N> FormatEvent<S, N> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let meta = event.metadata();
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            chrono::Utc::now()
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
                .into(),
        );
        line.insert("level".into(), meta.level().as_str().into());
        line.insert("target".into(), meta.target().into());
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                let Some(fields) = extensions.get::<FormattedFields<N>>() else {
                    continue;
                };
                if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(fields) {
                    line.extend(fields);
                }
            }
        }
        event.record(&mut Fields(&mut line));
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// Records an event's fields into a JSON map.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_owned(), format!("{value:?}").into());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0
            .insert(field.name().to_owned(), value.to_string().into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::fmt::MakeWriter;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buffer {
        type Writer = Buffer;

        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    #[test]
    fn json_lines_carry_the_span_fields_at_the_top_level() {
        let buffer = Buffer::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(buffer.clone())
            .fmt_fields(JsonFields::new())
            .event_format(FlatJson)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(
                "reconcile",
                machine = "distributeddb",
                namespace = "prod",
                name = "orders",
                state = tracing::field::Empty,
            );
            let _entered = span.enter();
            span.record("state", "Upgrading 2/PreHook");
            tracing::info!(from = "Ready", attempt = 2_u64, "transition");
        });
        let text = String::from_utf8(buffer.0.lock().map(|b| b.clone()).unwrap_or_default())
            .unwrap_or_default();
        let line: Value = serde_json::from_str(text.trim()).unwrap_or(Value::Null);
        assert_eq!(line["name"], "orders", "{text}");
        assert_eq!(line["namespace"], "prod", "{text}");
        assert_eq!(line["state"], "Upgrading 2/PreHook", "{text}");
        assert_eq!(line["machine"], "distributeddb", "{text}");
        assert_eq!(line["message"], "transition", "{text}");
        assert_eq!(line["from"], "Ready", "{text}");
        assert_eq!(line["attempt"], 2, "{text}");
        assert_eq!(line["level"], "INFO", "{text}");
        assert!(line["timestamp"].is_string(), "{text}");
    }
}
