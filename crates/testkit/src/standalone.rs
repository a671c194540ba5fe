//! smartfeeds serving HTTP with no XMPP server beside it (its link keeps retrying; the HTTP
//! face and the WebSub hub work meanwhile): for the tests of the HTTP face alone.

use super::http::http_table;
use super::process::{Process, free_port};
use super::smartfeeds::{bin, bot_feeds};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub struct Standalone {
    dir: tempfile::TempDir,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// What it was started with, to start it again.
    config: (String, Vec<String>, String),
    process: Process,
}

impl Standalone {
    /// Starts smartfeeds with `[http]` and its keys `http` (TOML lines, or none; the demo
    /// users `bot` and `alice` have tokens), the feeds `feeds` (published by `bot`) and the
    /// extra tables `tables`; returns once HTTP answers.
    pub fn start(http: &str, feeds: &[&str], tables: &str) -> Standalone {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = (http.to_string(), feeds.iter().map(|f| f.to_string()).collect(), tables.to_string());
        let (base, process) = launch(dir.path(), &config);
        Standalone { dir, base, config, process }
    }

    /// Stops smartfeeds (SIGTERM) and starts it again on the same database, on a new port.
    pub fn restart(self) -> Standalone {
        let Standalone { dir, config, process, .. } = self;
        process.terminate(Duration::from_secs(10), "smartfeeds");
        let (base, process) = launch(dir.path(), &config);
        Standalone { dir, base, config, process }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("smartfeeds.log")
    }

    /// What smartfeeds logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }
}

/// Starts smartfeeds in `dir` (its configuration, database and log) on a free port; returns
/// its base URL once HTTP answers.
fn launch(dir: &Path, (http, feeds, tables): &(String, Vec<String>, String)) -> (String, Process) {
    let port = free_port();
    let feeds: Vec<&str> = feeds.iter().map(String::as_str).collect();
    let config = format!(
        "[component]\njid = \"feeds.localhost\"\nsecret = \"s\"\nserver = \"127.0.0.1:1\"\n\
         [store]\npath = \"{}\"\n{}{tables}\n{}",
        dir.join("feeds.db").display(),
        http_table(port, http, &["bot", "alice"]),
        bot_feeds(&feeds)
    );
    std::fs::write(dir.join("c.toml"), config).expect("the configuration written");
    let log = dir.join("smartfeeds.log");
    let mut cmd = std::process::Command::new(bin());
    cmd.arg("--config").arg(dir.join("c.toml")).env("RUST_LOG", "info,smartfeeds_http=debug,smartfeeds_outbound=debug");
    let process = Process::spawn(cmd, &log).expect("smartfeeds runs");
    let deadline = Instant::now() + Duration::from_secs(15);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(Instant::now() < deadline, "smartfeeds did not listen:\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    }
    (format!("http://127.0.0.1:{port}"), process)
}
