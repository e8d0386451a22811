//! distlock's warnings on stderr. While a lock is held, the runtime reports what goes wrong as
//! `tracing` events — a renewal that failed and is retried until the lease ends, a lock lost
//! and why — and a program that installs no subscriber never sees them. The command line
//! prints those of level WARN and above, one line each (`distlock: lock lost key=… why=…`), so
//! an operator reads why `run`, `hold` or `elect` lost its lock. Nothing else is recorded: no
//! spans, nothing below WARN.

use std::fmt::Write;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};

/// Gives every WARN and ERROR event, as one line, to its sink: stderr (see the module's docs).
pub(crate) struct Warnings {
    sink: Box<dyn Fn(&str) + Send + Sync>,
}

impl Warnings {
    /// Installs it for the whole process, printing to stderr: the first call wins, later ones
    /// do nothing.
    pub(crate) fn install() {
        let _ = tracing::subscriber::set_global_default(Warnings::to(|line| eprintln!("{line}")));
    }

    /// Gives each line to `sink`.
    fn to(sink: impl Fn(&str) + Send + Sync + 'static) -> Warnings {
        Warnings {
            sink: Box::new(sink),
        }
    }
}

impl Subscriber for Warnings {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        match self.enabled(metadata) {
            true => Interest::always(),
            false => Interest::never(),
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.is_event() && *metadata.level() <= Level::WARN
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::WARN)
    }

    // No span is ever enabled (`enabled` takes events alone): these are never called.
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut line = Line::default();
        event.record(&mut line);
        (self.sink)(&format!("{}{}", line.message, line.fields));
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// One event as a line: its message, then ` name=value` per field.
#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message.push_str(value),
            name => {
                let _ = write!(self.fields, " {name}={value}");
            }
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => {
                let _ = write!(self.message, "{value:?}");
            }
            name => {
                let _ = write!(self.fields, " {name}={value:?}");
            }
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let _ = write!(self.fields, " {}={value}", field.name());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A warning is one line — its message, then each field, strings and errors as they read
    /// (no quotes), numbers as they are — and nothing below WARN is printed.
    #[test]
    fn a_warning_is_one_line_and_nothing_below_warn_is() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let error = std::io::Error::other("0 of 1 replicas within 1.5s");
        let recorded = Arc::clone(&lines);
        let warnings = Warnings::to(move |line| recorded.lock().unwrap().push(line.to_owned()));
        tracing::subscriber::with_default(warnings, || {
            tracing::info!(key = "s:b", "distlock: renewed");
            tracing::warn!(
                key = %"s:b",
                attempt = 3,
                error = &error as &dyn std::error::Error,
                "distlock: renewal failed, retrying until the lease ends"
            );
            tracing::warn!(key = %"s:b", why = "no renewal confirmed before the lease ended", "distlock: lock lost");
        });
        assert_eq!(
            *lines.lock().unwrap(),
            [
                "distlock: renewal failed, retrying until the lease ends key=s:b attempt=3 \
                 error=0 of 1 replicas within 1.5s",
                "distlock: lock lost key=s:b why=no renewal confirmed before the lease ended",
            ]
        );
    }
}
