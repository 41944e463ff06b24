//! Editing a watch response body line by line: the API server streams one JSON watch
//! event per line (`{"type":"MODIFIED","object":{...}}\n`), cut into chunks anywhere.
//!
//! # Guarantees
//! - [`LineFilter`] hands the editor every complete line exactly once, in order, however
//!   the chunks cut it, and emits exactly what the editor returns for it; bytes after the
//!   last newline are handed over by [`LineFilter::finish`].
//! - Pure: no I/O, no clock.
//!
//! # Assumptions
//! - Events are newline-delimited (the API server's JSON watch encoding).

use bytes::Bytes;

/// Splits a byte stream into lines (each with its trailing `\n`).
#[derive(Debug, Default)]
pub struct LineSplitter {
    partial: Vec<u8>,
}

impl LineSplitter {
    /// Feed one chunk; returns the lines it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Vec<u8>> {
        let mut lines = Vec::new();
        let mut rest = chunk;
        while let Some(at) = rest.iter().position(|b| *b == b'\n') {
            let (head, tail) = rest.split_at(at + 1);
            let mut line = std::mem::take(&mut self.partial);
            line.extend_from_slice(head);
            lines.push(line);
            rest = tail;
        }
        self.partial.extend_from_slice(rest);
        lines
    }

    /// The bytes after the last newline, if any (at the end of the stream).
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        (!self.partial.is_empty()).then(|| std::mem::take(&mut self.partial))
    }
}

/// One watch event, parsed from a line.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchEvent {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`.
    pub event_type: String,
    /// The object (a `Status` for `ERROR`).
    pub object: serde_json::Value,
}

impl WatchEvent {
    /// Parse one line; `None` if it is not a watch event.
    pub fn parse(line: &[u8]) -> Option<Self> {
        let value: serde_json::Value = serde_json::from_slice(line).ok()?;
        let event_type = value.get("type")?.as_str()?.to_owned();
        let object = value.get("object")?.clone();
        Some(Self { event_type, object })
    }

    /// The event as one line, newline-terminated.
    pub fn to_line(&self) -> Vec<u8> {
        let mut line = serde_json::json!({"type": self.event_type, "object": self.object})
            .to_string()
            .into_bytes();
        line.push(b'\n');
        line
    }

    /// The object's `metadata.name`.
    pub fn name(&self) -> Option<&str> {
        self.object.pointer("/metadata/name")?.as_str()
    }

    /// The object's `metadata.namespace`.
    pub fn namespace(&self) -> Option<&str> {
        self.object.pointer("/metadata/namespace")?.as_str()
    }

    /// The object's `metadata.resourceVersion`.
    pub fn resource_version(&self) -> Option<&str> {
        self.object.pointer("/metadata/resourceVersion")?.as_str()
    }
}

/// Rewrites a chunked body line by line: `edit` maps each complete line to the lines to
/// emit instead (none to drop it, itself to keep it, more to inject).
pub struct LineFilter<F> {
    splitter: LineSplitter,
    edit: F,
}

impl<F: FnMut(Vec<u8>) -> Vec<Vec<u8>>> LineFilter<F> {
    /// A filter that applies `edit` to every line.
    pub fn new(edit: F) -> Self {
        Self {
            splitter: LineSplitter::default(),
            edit,
        }
    }

    /// Feed one chunk; returns what to emit for the lines it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Bytes> {
        let lines = self.splitter.push(chunk);
        self.emit(lines)
    }

    /// At the end of the stream: what to emit for an unterminated last line.
    pub fn finish(&mut self) -> Vec<Bytes> {
        let rest: Vec<Vec<u8>> = self.splitter.finish().into_iter().collect();
        self.emit(rest)
    }

    fn emit(&mut self, lines: Vec<Vec<u8>>) -> Vec<Bytes> {
        lines
            .into_iter()
            .flat_map(|line| (self.edit)(line))
            .map(Bytes::from)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str, name: &str, rv: u32) -> Vec<u8> {
        WatchEvent {
            event_type: kind.to_owned(),
            object: serde_json::json!({"metadata": {"name": name, "resourceVersion": rv.to_string()}}),
        }
        .to_line()
    }

    fn stream() -> Vec<u8> {
        [
            event("ADDED", "a", 1),
            event("MODIFIED", "b", 2),
            event("MODIFIED", "a", 3),
            event("DELETED", "b", 4),
        ]
        .concat()
    }

    /// Feed `input` cut every `size` bytes; return what came out.
    fn run<F: FnMut(Vec<u8>) -> Vec<Vec<u8>>>(
        filter: &mut LineFilter<F>,
        input: &[u8],
        size: usize,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in input.chunks(size) {
            for bytes in filter.push(chunk) {
                out.extend_from_slice(&bytes);
            }
        }
        for bytes in filter.finish() {
            out.extend_from_slice(&bytes);
        }
        out
    }

    #[test]
    fn lines_survive_any_chunking() {
        let input = stream();
        for size in [1, 2, 7, 64, input.len()] {
            let mut splitter = LineSplitter::default();
            let mut lines = Vec::new();
            for chunk in input.chunks(size) {
                lines.extend(splitter.push(chunk));
            }
            assert_eq!(splitter.finish(), None);
            assert_eq!(lines.concat(), input, "chunks of {size}");
            assert_eq!(lines.len(), 4);
        }
    }

    #[test]
    fn an_unterminated_tail_is_handed_over_at_the_end() {
        let mut splitter = LineSplitter::default();
        assert_eq!(splitter.push(b"one\ntw"), vec![b"one\n".to_vec()]);
        assert_eq!(splitter.push(b"o"), Vec::<Vec<u8>>::new());
        assert_eq!(splitter.finish(), Some(b"two".to_vec()));
        assert_eq!(splitter.finish(), None);
    }

    #[test]
    fn a_predicate_drops_exactly_the_events_it_names() {
        for size in [1, 5, 1000] {
            let mut dropped = Vec::new();
            let mut filter = LineFilter::new(|line: Vec<u8>| {
                let e = WatchEvent::parse(&line).expect("an event");
                if e.name() == Some("b") {
                    dropped.push(e.event_type);
                    Vec::new()
                } else {
                    vec![line]
                }
            });
            let out = run(&mut filter, &stream(), size);
            assert_eq!(
                out,
                [event("ADDED", "a", 1), event("MODIFIED", "a", 3)].concat()
            );
            drop(filter);
            assert_eq!(dropped, ["MODIFIED", "DELETED"]);
        }
    }

    #[test]
    fn an_edit_can_inject_an_older_version_after_an_event() {
        let mut filter = LineFilter::new(|line: Vec<u8>| {
            let e = WatchEvent::parse(&line).expect("an event");
            if e.resource_version() == Some("3") {
                vec![line, event("MODIFIED", "a", 1)]
            } else {
                vec![line]
            }
        });
        let out = run(&mut filter, &stream(), 3);
        let rvs: Vec<String> = LineSplitter::default()
            .push(&out)
            .iter()
            .filter_map(|l| WatchEvent::parse(l))
            .filter_map(|e| e.resource_version().map(str::to_owned))
            .collect();
        assert_eq!(rvs, ["1", "2", "3", "1", "4"]);
    }

    #[test]
    fn non_events_pass_through_to_the_edit_unparsed() {
        assert_eq!(WatchEvent::parse(b"not json\n"), None);
        assert_eq!(WatchEvent::parse(b"{\"kind\":\"Status\"}\n"), None);
        let mut filter = LineFilter::new(|line: Vec<u8>| vec![line]);
        assert_eq!(run(&mut filter, b"garbage\n{}", 4), b"garbage\n{}".to_vec());
    }
}
