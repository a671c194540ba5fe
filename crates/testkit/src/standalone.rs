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
    port: u16,
    process: Option<Process>,
    /// A command the binary runs under (its arguments then the binary's), or none.
    wrapper: Vec<String>,
}

impl Standalone {
    /// Starts smartfeeds with `[http]` and its keys `http` (TOML lines, or none; the demo
    /// users `bot` and `alice` have tokens), the feeds `feeds` (published by `bot`) and the
    /// extra tables `tables`; returns once HTTP answers.
    pub fn start(http: &str, feeds: &[&str], tables: &str) -> Standalone {
        Standalone::start_on(free_port(), http, feeds, tables)
    }

    /// [`start`](Self::start) with `[http] base_url` set to its own address (what smartfeeds
    /// needs to give others callback URLs, e.g. to subscribe to its sources' hubs).
    pub fn start_public(http: &str, feeds: &[&str], tables: &str) -> Standalone {
        let port = free_port();
        Standalone::start_on(port, &format!("base_url = \"http://127.0.0.1:{port}\"\n{http}"), feeds, tables)
    }

    /// [`start`](Self::start) with the binary run by `wrapper` (a command and its first
    /// arguments, to which the binary and its arguments are appended).
    pub fn start_under(wrapper: &[&str], http: &str, feeds: &[&str], tables: &str) -> Standalone {
        Standalone::start_with(wrapper, free_port(), http, feeds, tables)
    }

    fn start_on(port: u16, http: &str, feeds: &[&str], tables: &str) -> Standalone {
        Standalone::start_with(&[], port, http, feeds, tables)
    }

    fn start_with(wrapper: &[&str], port: u16, http: &str, feeds: &[&str], tables: &str) -> Standalone {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = format!(
            "[component]\njid = \"feeds.localhost\"\nsecret = \"s\"\nserver = \"127.0.0.1:1\"\n\
             [store]\npath = \"{}\"\n{}{tables}\n{}",
            dir.path().join("feeds.db").display(),
            http_table(port, http, &["bot", "alice"]),
            bot_feeds(feeds)
        );
        std::fs::write(dir.path().join("c.toml"), config).expect("the configuration written");
        let wrapper = wrapper.iter().map(|w| w.to_string()).collect();
        let mut sf = Standalone { dir, base: format!("http://127.0.0.1:{port}"), port, process: None, wrapper };
        sf.spawn();
        sf
    }

    /// Runs the binary on the configuration and waits until HTTP answers (the log is
    /// appended to).
    fn spawn(&mut self) {
        let log = self.log_path();
        let mut cmd = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = std::process::Command::new(program);
                cmd.args(args).arg(bin());
                cmd
            }
            None => std::process::Command::new(bin()),
        };
        cmd.arg("--config")
            .arg(self.dir.path().join("c.toml"))
            .env("RUST_LOG", "info,smartfeeds_http=debug,smartfeeds_outbound=debug");
        self.process = Some(Process::spawn(cmd, &log).expect("smartfeeds runs"));
        let deadline = Instant::now() + Duration::from_secs(15);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(Instant::now() < deadline, "smartfeeds did not listen:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL (a crash).
    pub fn kill(&mut self) {
        if let Some(p) = self.process.take() {
            p.kill();
        }
    }

    /// Starts it again (after [`kill`](Self::kill)) on the same configuration and database.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Stops it (SIGTERM, as an operator would) and starts it again on the same
    /// configuration and database.
    pub fn stop_and_start(&mut self) {
        if let Some(p) = self.process.take() {
            p.terminate(Duration::from_secs(10), "smartfeeds");
        }
        self.spawn();
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
