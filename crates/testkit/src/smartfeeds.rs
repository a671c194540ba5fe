//! The real `smartfeeds` binary for end-to-end tests: a config file and a database in a
//! temporary directory of their own, the process connected to a server's component port as
//! `feeds.localhost`, its log (`RUST_LOG=info`, stdout and stderr) in `smartfeeds.log`. The
//! server is any [`TestServer`]: usually the one `SMARTFEEDS_TEST_SERVER` selects
//! ([`start_selected`](super::server::start_selected)), or a Prosody or an ejabberd by name.
//!
//! ```ignore
//! let host = start_selected();
//! let feeds = Smartfeeds::start(&host, r#"
//! [[feeds]]
//! name = "comments"
//! publishers = ["bot@localhost"]
//! "#);
//! ```
//!
//! The generated config is SPEC §8's: `admins = ["admin@localhost"]`, `autocreate = true`
//! (top-level keys, replaceable with [`Smartfeeds::start_with`]), `[component]` with the
//! server's secret and port, `[store] path` in the temporary directory, then the caller's
//! tables (`[limits]`, `[[feeds]]`, …). [`Smartfeeds::start_config`] takes a whole file.
//!
//! Readiness: a throwaway client asks `feeds.localhost` for disco#info until the answer is a
//! result (both servers answer for an absent component with an error), 15 s at most, then panics
//! with the log tail. The process methods block the calling thread (they run their own small
//! runtime on another thread), so they work from a test body and from a `static` fixture.
//!
//! Beside the process: [`bot_feeds`], [`titled_feed`], [`closed_feed`] and [`feeds`] write
//! `[[feeds]]` tables, [`run_bin`]
//! and [`check_config`] run the binary to its exit (`check-config`), [`assert_accepted`]
//! and [`assert_refused`] check how, and [`scrape_metrics`], [`metric`] and
//! [`metric_total`] read its metrics.
//!
//! The process has the watchdog of every [`Process`], so no component outlives its test
//! binary. `SMARTFEEDS_KEEP_PROSODY=1` or `SMARTFEEDS_KEEP_EJABBERD=1` keeps the temporary
//! directory (as for the servers').

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output};
use std::time::{Duration, Instant};

use super::client::Client;
use super::logs::{self, WorkDir};
use super::process::Process;
use super::server::{COMPONENT_DOMAIN, DEMO_PASSWORD, Server, TestServer, VHOST};
use super::xml::{stanza_type, to_xml, xml};

/// The binary under test, found at run time the way Cargo's integration tests see it: the
/// environment variable `CARGO_BIN_EXE_smartfeeds` if set, else `smartfeeds` in the
/// directory Cargo puts binaries in, one up from the test executable's own
/// (`target/debug/deps/..`). Panics naming the path when there is no binary there.
pub fn bin() -> PathBuf {
    const VAR: &str = "CARGO_BIN_EXE_smartfeeds";
    let (path, from) = match std::env::var_os(VAR) {
        Some(path) => (PathBuf::from(path), format!("as {VAR} says")),
        None => {
            let exe = std::env::current_exe().unwrap_or_else(|e| panic!("cannot find the test executable: {e}"));
            let mut dir = exe.parent().expect("an executable is in a directory").to_path_buf();
            if dir.ends_with("deps") {
                dir.pop();
            }
            (dir.join(format!("smartfeeds{}", std::env::consts::EXE_SUFFIX)), format!("{VAR} is not set"))
        }
    };
    assert!(
        path.is_file(),
        "the smartfeeds binary is not at {} ({from}): build it with `cargo build --bin smartfeeds`, \
         or run the tests through Cargo",
        path.display()
    );
    path
}

/// The default top-level keys of the generated config.
pub const DEFAULT_TOP: &str = "admins = [\"admin@localhost\"]\nautocreate = true\n";
const READY_TIMEOUT: Duration = Duration::from_secs(15);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// A running (or stopped) smartfeeds process; killed on drop. See the module docs.
pub struct Smartfeeds {
    c2s_port: u16,
    /// Declared before `dir`: the process is killed (on drop) before its directory goes.
    process: Option<Process>,
    last_exit: Option<ExitStatus>,
    dir: WorkDir,
}

impl Smartfeeds {
    /// Starts smartfeeds against `server` with the default top-level keys and `tables`
    /// (TOML tables only: `[limits]`, `[[feeds]]`, …) appended to the generated config.
    pub fn start<S: Server + ?Sized>(server: &TestServer<S>, tables: &str) -> Smartfeeds {
        Self::start_with(server, DEFAULT_TOP, tables)
    }

    /// Like [`start`](Self::start) with `top` instead of [`DEFAULT_TOP`] as the top-level keys.
    pub fn start_with<S: Server + ?Sized>(server: &TestServer<S>, top: &str, tables: &str) -> Smartfeeds {
        Self::try_start_with(server, top, tables).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`start_with`](Self::start_with), but a start that fails is an error that says
    /// why, with the end of the log, rather than a panic.
    pub fn try_start_with<S: Server + ?Sized>(
        server: &TestServer<S>,
        top: &str,
        tables: &str,
    ) -> Result<Smartfeeds, String> {
        Self::try_start_config(server, |db| {
            format!(
                "{top}\n[component]\njid = \"{COMPONENT_DOMAIN}\"\nsecret = \"{}\"\nserver = \"{}\"\n\n\
                 [store]\npath = {}\n\n{tables}\n",
                server.secret(),
                server.component_addr(),
                toml_string(db),
            )
        })
    }

    /// Starts smartfeeds with the config `make_config(db_path)` returns, whole.
    pub fn start_config<S: Server + ?Sized>(
        server: &TestServer<S>,
        make_config: impl FnOnce(&Path) -> String,
    ) -> Smartfeeds {
        Self::try_start_config(server, make_config).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`start_config`](Self::start_config), a failed start an error rather than a panic.
    pub fn try_start_config<S: Server + ?Sized>(
        server: &TestServer<S>,
        make_config: impl FnOnce(&Path) -> String,
    ) -> Result<Smartfeeds, String> {
        let dir = WorkDir::new("smartfeeds-e2e-").map_err(|e| e.to_string())?;
        let config = make_config(&dir.path().join("feeds.db"));
        fs::write(dir.path().join("smartfeeds.toml"), config).map_err(|e| format!("cannot write the config: {e}"))?;
        let mut sf = Smartfeeds { dir, c2s_port: server.c2s_port(), process: None, last_exit: None };
        sf.try_spawn_and_wait()?;
        Ok(sf)
    }

    /// The temporary directory (config, database, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The config file.
    pub fn config_path(&self) -> PathBuf {
        self.dir().join("smartfeeds.toml")
    }

    /// The SQLite database.
    pub fn db_path(&self) -> PathBuf {
        self.dir().join("feeds.db")
    }

    /// The log file (stdout and stderr of every run).
    pub fn log_path(&self) -> PathBuf {
        self.dir().join("smartfeeds.log")
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        logs::tail("smartfeeds", &[("smartfeeds.log", self.log_path())], lines)
    }

    /// The pid of the running process.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Process::id)
    }

    /// Whether the process runs (it may have exited on its own).
    pub fn is_running(&mut self) -> bool {
        self.process.as_mut().is_some_and(Process::is_running)
    }

    /// How the last run ended, once [`stop`](Self::stop) or [`kill`](Self::kill) reaped it.
    pub fn last_exit(&self) -> Option<ExitStatus> {
        self.last_exit
    }

    /// SIGTERM, then waits for the exit (SIGKILL after 10 s, reported on stderr); returns
    /// the exit status. `None` when not running.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        let status = self.process.take()?.terminate(STOP_TIMEOUT, "smartfeeds");
        self.last_exit = Some(status.expect("cannot wait for smartfeeds"));
        self.last_exit
    }

    /// SIGKILL (a crash). No-op when not running.
    pub fn kill(&mut self) {
        if let Some(process) = self.process.take() {
            self.last_exit = process.kill();
        }
    }

    /// Stops the process if it runs, then starts it again on the same config and database.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn_and_wait();
    }

    fn spawn_and_wait(&mut self) {
        self.try_spawn_and_wait().unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_spawn_and_wait(&mut self) -> Result<(), String> {
        let mut command = Command::new(bin());
        command.arg("--config").arg(self.config_path()).current_dir(self.dir());
        command.env("RUST_LOG", "info").env_remove("SMARTFEEDS_SECRET");
        self.process = Some(Process::spawn(command, &self.log_path()).map_err(|e| e.to_string())?);
        if let Err(e) = self.wait_ready() {
            self.kill();
            return Err(format!("smartfeeds did not come up: {e}\n{}", self.log_tail(40)));
        }
        Ok(())
    }

    /// Polls disco#info on the component until it answers with a result.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let port = self.c2s_port;
        let process = self.process.as_mut().expect("just spawned");
        let mut last = String::from("(no answer yet)");
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        // A client of our own on a thread of its own: works inside and outside a runtime.
        let prober = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
            rt.block_on(async move {
                let mut client: Option<Client> = None;
                let mut last = String::new();
                loop {
                    if rx.try_recv().is_ok() {
                        return Err(last);
                    }
                    if client.is_none() {
                        match Client::try_connect(port, &format!("admin@{VHOST}"), DEMO_PASSWORD).await {
                            Ok(c) => client = Some(c),
                            Err(e) => last = format!("cannot log in to probe: {e}"),
                        }
                    }
                    if let Some(c) = client.as_mut() {
                        let probe = xml(&format!(
                            r#"<iq type="get" to="{COMPONENT_DOMAIN}"><query xmlns="http://jabber.org/protocol/disco#info"/></iq>"#
                        ));
                        match c.try_iq(probe, Duration::from_secs(2)).await {
                            Ok(reply) if stanza_type(&reply) == "result" => {
                                if let Some(c) = client.take() {
                                    c.close().await;
                                }
                                return Ok(());
                            }
                            Ok(reply) => last = to_xml(&reply),
                            Err(e) => {
                                last = e;
                                client = None;
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
            })
        });
        loop {
            if prober.is_finished() {
                return match prober.join() {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err("the readiness probe panicked".into()),
                };
            }
            if let Some(status) = process.exited() {
                let _ = tx.send(());
                let _ = prober.join();
                return Err(format!("the process exited with {status} before serving"));
            }
            if Instant::now() >= deadline {
                let _ = tx.send(());
                if let Ok(Err(e)) = prober.join() {
                    last = e;
                }
                return Err(format!(
                    "no disco#info result from {COMPONENT_DOMAIN} within {READY_TIMEOUT:?}; last answer: {last}"
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A TOML basic string for a path.
fn toml_string(path: &Path) -> String {
    let s = path.to_str().expect("temporary paths are UTF-8");
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The line that makes `bot@localhost` a feed's publisher (see [`bot_feeds`]).
pub const BOT_PUBLISHES: &str = "publishers = [\"bot@localhost\"]\n";

/// `[[feeds]]` tables, one for each of `names`, each with the same `keys` (TOML lines, such
/// as [`BOT_PUBLISHES`], or none).
pub fn feeds(names: &[&str], keys: &str) -> String {
    names.iter().map(|name| format!("[[feeds]]\nname = \"{name}\"\n{keys}")).collect()
}

/// `[[feeds]]` tables, one for each of `names`, each published by `bot@localhost`.
pub fn bot_feeds(names: &[&str]) -> String {
    feeds(names, BOT_PUBLISHES)
}

/// A `[[feeds]]` table published by `bot@localhost`, with a title.
pub fn titled_feed(name: &str, title: &str) -> String {
    feeds(&[name], &format!("title = \"{title}\"\n{BOT_PUBLISHES}"))
}

/// A `[[feeds]]` table published by `bot@localhost` that only `allowed` (JIDs or patterns
/// such as `*@example.net`) may read.
pub fn closed_feed(name: &str, allowed: &[&str]) -> String {
    let allowed: Vec<String> = allowed.iter().map(|jid| format!("\"{jid}\"")).collect();
    feeds(&[name], &format!("{BOT_PUBLISHES}access = \"whitelist\"\nallowed = [{}]\n", allowed.join(", ")))
}

/// Runs the binary with `args` in `dir` and the environment `env` (besides `RUST_LOG=info`,
/// and no `SMARTFEEDS_SECRET` unless `env` sets it), to its exit.
pub fn run_bin(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args).current_dir(dir).env_remove("SMARTFEEDS_SECRET").env("RUST_LOG", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap_or_else(|e| panic!("cannot run {}: {e}", bin().display()))
}

/// Writes `text` as `smartfeeds.toml` in a fresh directory and runs `check-config` on it
/// (see [`run_bin`]); the directory goes when the returned one is dropped.
pub fn check_config(text: &str, env: &[(&str, &str)]) -> (Output, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    fs::write(dir.path().join("smartfeeds.toml"), text).expect("write the config");
    let out = run_bin(dir.path(), &["check-config", "--config", "smartfeeds.toml"], env);
    (out, dir)
}

/// A run's exit code, stdout and stderr, for failure messages.
pub fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Checks that a run accepted its configuration: exit 0, no panic.
#[track_caller]
pub fn assert_accepted(out: &Output) {
    assert_eq!(out.status.code(), Some(0), "a usable config exits 0: {}", describe(out));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"), "no panic: {}", describe(out));
}

/// Checks that a run refused its configuration: exit 2, no panic, and each of `needles` in
/// stderr; returns stderr.
#[track_caller]
pub fn assert_refused(out: &Output, needles: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "an unusable config exits 2: {}", describe(out));
    assert!(!stderr.contains("panicked"), "no panic: {}", describe(out));
    for needle in needles {
        assert!(stderr.contains(needle), "stderr says {needle:?}: {}", describe(out));
    }
    stderr
}

/// The Prometheus text of a smartfeeds whose `[metrics] listen` is `127.0.0.1:port`, with
/// the HTTP status line and headers.
pub fn scrape_metrics(port: u16) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics port");
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The value of the sample `name` (with its labels, if it has any: `name{label="…"}`) in a
/// [`scrape_metrics`] text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The value of the counter or gauge `name` summed over all its labels, from the metrics of
/// the smartfeeds whose `[metrics] listen` is `127.0.0.1:port` (0 when it has none).
pub fn metric_total(port: u16, name: &str) -> f64 {
    scrape_metrics(port)
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}
