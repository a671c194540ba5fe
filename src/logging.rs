//! Logging setup: `tracing` with a human format by default and JSON lines on request;
//! `RUST_LOG` sets the filter (default `info`).

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. Calling it twice is harmless (the second does nothing).
pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only on a terminal: not in files, journald or `docker logs`.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    let _ = if json { builder.json().try_init() } else { builder.try_init() };
}
