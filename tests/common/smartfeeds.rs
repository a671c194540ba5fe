//! The real `smartfeeds` binary for end-to-end tests: a config file and a database in a
//! temporary directory of their own, the process connected to a server's component port as
//! `feeds.localhost`, its log (`RUST_LOG=info`, stdout and stderr) in `smartfeeds.log`. The
//! server is any [`Server`]: usually the [`Host`] that `SMARTFEEDS_TEST_SERVER` selects, or a
//! [`Prosody`](super::prosody::Prosody) or [`Ejabberd`](super::ejabberd::Ejabberd) by name.
//!
//! ```ignore
//! let host = Host::start();
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
//! A watchdog `sh` SIGKILLs the process when this test process ends without dropping the
//! handle (a `static`, a SIGKILL, an abort), so no component outlives its test binary.
//! `SMARTFEEDS_KEEP_PROSODY=1` or `SMARTFEEDS_KEEP_EJABBERD=1` keeps the temporary
//! directories (as for the servers').

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::client::Client;
use super::host::Host;
use super::prosody::{COMPONENT_DOMAIN, DEMO_PASSWORD, VHOST};
use super::server::Server;
use super::xml::{stanza_type, to_xml, xml};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_smartfeeds");
/// The default top-level keys of the generated config.
pub const DEFAULT_TOP: &str = "admins = [\"admin@localhost\"]\nautocreate = true\n";
const READY_TIMEOUT: Duration = Duration::from_secs(15);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// A running (or stopped) smartfeeds process; killed on drop. See the module docs.
pub struct Smartfeeds {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    c2s_port: u16,
    process: Option<Running>,
    last_exit: Option<ExitStatus>,
}

struct Running {
    child: Child,
    watchdog: Option<Child>,
}

impl Running {
    fn stop_watchdog(&mut self) {
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

impl Smartfeeds {
    /// Starts smartfeeds against `server` with the default top-level keys and `tables`
    /// (TOML tables only: `[limits]`, `[[feeds]]`, …) appended to the generated config.
    pub fn start(server: &impl Server, tables: &str) -> Smartfeeds {
        Self::start_with(server, DEFAULT_TOP, tables)
    }

    /// Like [`start`](Self::start) with `top` instead of [`DEFAULT_TOP`] as the top-level keys.
    pub fn start_with(server: &impl Server, top: &str, tables: &str) -> Smartfeeds {
        Self::start_config(server, |db| {
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
    pub fn start_config(server: &impl Server, make_config: impl FnOnce(&Path) -> String) -> Smartfeeds {
        let dir = tempfile::Builder::new()
            .prefix("smartfeeds-e2e-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let path = dir.path().to_path_buf();
        let config = make_config(&path.join("feeds.db"));
        fs::write(path.join("smartfeeds.toml"), config).unwrap_or_else(|e| panic!("cannot write the config: {e}"));
        let mut sf = Smartfeeds { dir: Some(dir), path, c2s_port: server.c2s_port(), process: None, last_exit: None };
        sf.spawn_and_wait();
        sf
    }

    /// The temporary directory (config, database, log).
    pub fn dir(&self) -> &Path {
        &self.path
    }

    /// The config file.
    pub fn config_path(&self) -> PathBuf {
        self.path.join("smartfeeds.toml")
    }

    /// The SQLite database.
    pub fn db_path(&self) -> PathBuf {
        self.path.join("feeds.db")
    }

    /// The log file (stdout and stderr of every run).
    pub fn log_path(&self) -> PathBuf {
        self.path.join("smartfeeds.log")
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(self.log_path()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        let tail = &all[all.len().saturating_sub(lines)..];
        if tail.is_empty() {
            "(smartfeeds wrote nothing)".to_string()
        } else {
            format!("--- smartfeeds.log (last {} lines) ---\n{}", tail.len(), tail.join("\n"))
        }
    }

    /// The pid of the running process.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(|p| p.child.id())
    }

    /// Whether the process runs (it may have exited on its own).
    pub fn is_running(&mut self) -> bool {
        match &mut self.process {
            Some(p) => matches!(p.child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// How the last run ended, once [`stop`](Self::stop) or [`kill`](Self::kill) reaped it.
    pub fn last_exit(&self) -> Option<ExitStatus> {
        self.last_exit
    }

    /// SIGTERM, then waits for the exit (SIGKILL after 10 s, reported on stderr); returns
    /// the exit status. `None` when not running.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        let mut running = self.process.take()?;
        running.stop_watchdog();
        let pid = running.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + STOP_TIMEOUT;
        let status = loop {
            match running.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => {
                    eprintln!("smartfeeds (pid {pid}) ignored SIGTERM for {STOP_TIMEOUT:?}; killing it");
                    let _ = running.child.kill();
                    break running.child.wait().expect("wait for a killed child");
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => panic!("cannot wait for smartfeeds: {e}"),
            }
        };
        self.last_exit = Some(status);
        Some(status)
    }

    /// SIGKILL (a crash). No-op when not running.
    pub fn kill(&mut self) {
        if let Some(mut running) = self.process.take() {
            running.stop_watchdog();
            let _ = running.child.kill();
            self.last_exit = running.child.wait().ok();
        }
    }

    /// Stops the process if it runs, then starts it again on the same config and database.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn_and_wait();
    }

    fn spawn_and_wait(&mut self) {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap_or_else(|e| panic!("cannot open the smartfeeds log: {e}"));
        let err = log.try_clone().expect("clone a file handle");
        let child = Command::new(BIN)
            .arg("--config")
            .arg(self.config_path())
            .current_dir(&self.path)
            .env("RUST_LOG", "info")
            .env_remove("SMARTFEEDS_SECRET")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"));
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(format!("while read -r _line; do :; done; kill -9 {} 2>/dev/null", child.id()))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok();
        self.process = Some(Running { child, watchdog });
        if let Err(e) = self.wait_ready() {
            self.kill();
            panic!("smartfeeds did not come up: {e}\n{}", self.log_tail(40));
        }
    }

    /// Polls disco#info on the component until it answers with a result.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let port = self.c2s_port;
        let process = self.process.as_mut().expect("just spawned");
        let child = &mut process.child;
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
            if let Ok(Some(status)) = child.try_wait() {
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

impl Drop for Smartfeeds {
    fn drop(&mut self) {
        self.kill();
        if keep_dirs()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("keeping the smartfeeds directory {}", dir.keep().display());
        }
    }
}

/// One server (the [`Host`] `SMARTFEEDS_TEST_SERVER` selects) and one smartfeeds for all the
/// tests of a test binary, kept in a `static`
/// (`static F: OnceLock<Fixture> = OnceLock::new();`). Neither is ever dropped: their
/// watchdogs kill both processes when the test binary ends, and [`remove_on_exit`] removes
/// their directories. Each test logs in its own clients on its own runtime.
pub struct Fixture {
    /// The server, Prosody or ejabberd (leaked: it lives as long as the test process).
    pub host: &'static Host,
    /// The same server as [`host`](Self::host), under the name it had when every test ran
    /// on Prosody, so tests written against that name keep compiling (and now run on the
    /// selected server too). New code uses `host`.
    pub prosody: &'static Host,
    pub feeds: Smartfeeds,
    _cleanup: Option<Child>,
}

impl Fixture {
    /// A fresh server and smartfeeds with `tables` (see [`Smartfeeds::start`]).
    pub fn start(tables: &str) -> Fixture {
        let host: &'static Host = Box::leak(Box::new(Host::start()));
        let feeds = Smartfeeds::start(host, tables);
        let cleanup = remove_on_exit(&[host.data_dir(), feeds.dir()]);
        Fixture { host, prosody: host, feeds, _cleanup: cleanup }
    }
}

/// A `static` fixture's cleanup: a `sh` that waits for this test process to end (its stdin
/// pipe closes) and then removes `dirs` (the temporary directories a never-dropped `static`
/// would leave behind). Keep the returned child alive as long as the fixture.
pub fn remove_on_exit(dirs: &[&Path]) -> Option<Child> {
    if keep_dirs() {
        eprintln!("SMARTFEEDS_KEEP_PROSODY/SMARTFEEDS_KEEP_EJABBERD: keeping {dirs:?}");
        return None;
    }
    let quoted: Vec<String> = dirs.iter().map(|d| shell_quote(&d.to_string_lossy())).collect();
    Command::new("sh")
        .arg("-c")
        .arg(format!("while read -r _line; do :; done; sleep 1; rm -rf {}", quoted.join(" ")))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

/// Whether the temporary directories are to be kept (`SMARTFEEDS_KEEP_PROSODY` or
/// `SMARTFEEDS_KEEP_EJABBERD` set).
fn keep_dirs() -> bool {
    std::env::var_os("SMARTFEEDS_KEEP_PROSODY").is_some() || std::env::var_os("SMARTFEEDS_KEEP_EJABBERD").is_some()
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A TOML basic string for a path.
fn toml_string(path: &Path) -> String {
    let s = path.to_str().expect("temporary paths are UTF-8");
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}
