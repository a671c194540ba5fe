//! smartfeeds serving HTTP with no XMPP server beside it (its link keeps retrying; the HTTP
//! face and the WebSub hub work meanwhile): for the tests of the HTTP face alone.

use super::http::http_table;
use super::logs;
use super::process::{Process, on_free_ports};
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
        Standalone::start_with(&[], |_| http.to_string(), feeds, |_| tables.to_string(), 0).0
    }

    /// [`start`](Self::start) with a `[metrics]` table on a port picked with the HTTP port
    /// (and picked again with it when taken): smartfeeds and its metrics port.
    pub fn start_with_metrics(http: &str, feeds: &[&str], tables: &str) -> (Standalone, u16) {
        let metrics = |ports: &[u16]| format!("{tables}\n[metrics]\nlisten = \"127.0.0.1:{}\"\n", ports[0]);
        let (sf, ports) = Standalone::start_with(&[], |_| http.to_string(), feeds, metrics, 1);
        (sf, ports[0])
    }

    /// [`start`](Self::start) with `[http] base_url` set to its own address (what smartfeeds
    /// needs to give others callback URLs, e.g. to subscribe to its sources' hubs).
    pub fn start_public(http: &str, feeds: &[&str], tables: &str) -> Standalone {
        let http = |port| format!("base_url = \"http://127.0.0.1:{port}\"\n{http}");
        Standalone::start_with(&[], http, feeds, |_| tables.to_string(), 0).0
    }

    /// [`start`](Self::start) with the binary run by `wrapper` (a command and its first
    /// arguments, to which the binary and its arguments are appended).
    pub fn start_under(wrapper: &[&str], http: &str, feeds: &[&str], tables: &str) -> Standalone {
        Standalone::start_with(wrapper, |_| http.to_string(), feeds, |_| tables.to_string(), 0).0
    }

    /// Starts on a free port with the `[http]` keys `http(port)` and the tables
    /// `tables(more)`, `more` being `n` other free ports; on other ports if another test's
    /// process took one between its release and smartfeeds' bind. Returns the `more` ports.
    fn start_with(
        wrapper: &[&str],
        http: impl Fn(u16) -> String,
        feeds: &[&str],
        tables: impl Fn(&[u16]) -> String,
        n: usize,
    ) -> (Standalone, Vec<u16>) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let wrapper: Vec<String> = wrapper.iter().map(|w| w.to_string()).collect();
        let mut sf = Standalone { dir, base: String::new(), port: 0, process: None, wrapper };
        let (_, ports) = on_free_ports(1 + n, |ports| {
            let (port, more) = (ports[0], &ports[1..]);
            let tables = tables(more);
            let config = format!(
                "[component]\njid = \"feeds.localhost\"\nsecret = \"s\"\nserver = \"127.0.0.1:1\"\n\
                 [store]\npath = \"{}\"\n{}{tables}\n{}",
                sf.dir.path().join("feeds.db").display(),
                http_table(port, &http(port), &["bot", "alice"]),
                bot_feeds(feeds)
            );
            std::fs::write(sf.dir.path().join("c.toml"), config).expect("the configuration written");
            (sf.base, sf.port) = (format!("http://127.0.0.1:{port}"), port);
            sf.spawn()
        })
        .unwrap_or_else(|log| panic!("smartfeeds did not start:\n{log}"));
        (sf, ports[1..].to_vec())
    }

    /// Runs the binary on the configuration and waits until it listens on its port (the log
    /// is appended to); the log if it exits first.
    ///
    /// Its own log says so: a connection alone could reach another test's server, which took
    /// the port between its release and this process's bind.
    fn spawn(&mut self) -> Result<(), String> {
        let log = self.log_path();
        let from = logs::offset(&log);
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
        loop {
            let process = self.process.as_mut().expect("just spawned");
            if let Some(status) = process.exited() {
                self.process = None;
                return Err(format!("(exited: {status})\n{}", logs::read_from(&log, from)));
            }
            if logs::read_from(&log, from).contains("HTTP face listening") {
                return Ok(());
            }
            assert!(Instant::now() < deadline, "smartfeeds did not listen:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(10));
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
        self.spawn().unwrap_or_else(|log| panic!("smartfeeds did not start again:\n{log}"));
    }

    /// Stops it (SIGTERM, as an operator would) and starts it again on the same
    /// configuration and database.
    pub fn stop_and_start(&mut self) {
        if let Some(p) = self.process.take() {
            p.terminate(Duration::from_secs(10), "smartfeeds");
        }
        self.spawn().unwrap_or_else(|log| panic!("smartfeeds did not start again:\n{log}"));
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

impl Drop for Standalone {
    /// A failing test shows the end of what its smartfeeds logged, and whether it still ran.
    fn drop(&mut self) {
        if std::thread::panicking() {
            let state = match self.process.as_mut().map(|p| p.exited()) {
                Some(Some(status)) => format!("exited ({status})"),
                Some(None) => "running".to_string(),
                None => "stopped by the test".to_string(),
            };
            let tail = logs::tail("smartfeeds", &[("smartfeeds.log", self.log_path())], 60);
            eprintln!("smartfeeds on {} ({state}):\n{tail}", self.base);
        }
    }
}
