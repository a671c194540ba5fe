//! A real Prosody (Debian package `prosody`, 0.12) per test, on free loopback ports in its
//! own temporary directory, so test processes running in parallel never collide.
//!
//! The configuration is `prosody/prosody.cfg.lua` (compiled in with `include_str!`) with its
//! `@PLACEHOLDERS@` filled in — the same file `prosody/start.sh` uses for the demo. Accounts
//! use `internal_plain`, so a user is one small Lua file written here; no `prosodyctl`.
//!
//! Readiness is read from Prosody's own log ("Activated service 'c2s' on [127.0.0.1]:PORT")
//! and confirmed by connecting to both ports. Ports come from the OS (bind to port 0, then
//! release); if another process grabs one in between, Prosody logs "Failed to open server
//! port" and keeps running without it, so we see that line, kill it and try fresh ports.
//!
//! Environment: `SMARTFEEDS_PROSODY_BIN` (default `/usr/bin/prosody`),
//! `SMARTFEEDS_PROSODY_LOG_LEVEL` (`debug` or `info`; default `info`),
//! `SMARTFEEDS_KEEP_PROSODY=1` keeps the temporary directory and prints where it is.
//!
//! The process methods (`start`, `stop`, `restart`, `kill`) block the calling thread for
//! the time Prosody takes (a few hundred milliseconds); call them from the test body.

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::client::Client;
use super::component::Component;

/// The configuration template, `prosody/prosody.cfg.lua`.
pub const CONFIG_TEMPLATE: &str = include_str!("../../prosody/prosody.cfg.lua");
/// The virtual host users live on.
pub const VHOST: &str = "localhost";
/// The external component domain smartfeeds connects as.
pub const COMPONENT_DOMAIN: &str = "feeds.localhost";
/// Prosody's own pubsub service (mod_pubsub), for comparisons.
pub const PUBSUB_DOMAIN: &str = "pubsub.localhost";
/// Users every instance starts with (as in `prosody/start.sh`), all with [`DEMO_PASSWORD`].
pub const DEMO_USERS: [&str; 4] = ["admin", "bot", "alice", "bob"];
/// The password of the demo users.
pub const DEMO_PASSWORD: &str = "password";

const DEFAULT_BIN: &str = "/usr/bin/prosody";
const READY_TIMEOUT: Duration = Duration::from_secs(15);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const PORT_ATTEMPTS: usize = 8;

/// A running (or stopped) Prosody instance; killed on drop. See the module docs.
pub struct Prosody {
    dir: Option<tempfile::TempDir>,
    data: PathBuf,
    bin: PathBuf,
    c2s_port: u16,
    component_port: u16,
    secret: String,
    passwords: Mutex<HashMap<String, String>>,
    process: Option<Running>,
}

struct Running {
    child: Child,
    /// `sh` that SIGKILLs Prosody when our end of its stdin pipe closes, i.e. when this test
    /// process dies without running destructors (SIGKILL, abort). Killed first on an
    /// orderly stop, while Prosody is still our unreaped child (no pid reuse).
    watchdog: Option<Child>,
}

enum StartError {
    /// One of the ports was taken before Prosody could bind it.
    PortInUse(String),
    Other(String),
}

impl Prosody {
    /// Starts a fresh instance: free ports, new temporary directory, the demo users.
    /// Panics with Prosody's log tail if it does not come up within 15 s.
    pub fn start() -> Prosody {
        Self::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`start`](Self::start), returning the reason instead of panicking.
    pub fn try_start() -> Result<Prosody, String> {
        let bin =
            std::env::var_os("SMARTFEEDS_PROSODY_BIN").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(DEFAULT_BIN));
        if !bin.exists() {
            return Err(format!(
                "Prosody is not installed ({} is missing): install the Debian package with \
                 `apt-get install prosody` (or set SMARTFEEDS_PROSODY_BIN)",
                bin.display()
            ));
        }
        let dir = tempfile::Builder::new()
            .prefix("smartfeeds-prosody-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        let data = dir.path().to_path_buf();
        let data_str = data.to_str().ok_or("temporary directory path is not UTF-8")?;
        if data_str.contains(['"', '\\', '\n']) {
            return Err(format!("temporary directory path {data_str:?} cannot go in a Lua string"));
        }
        fs::create_dir_all(data.join("certs")).map_err(|e| e.to_string())?;
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let mut prosody = Prosody {
            dir: Some(dir),
            data,
            bin,
            c2s_port: 0,
            component_port: 0,
            secret: format!("secret-{}-{nanos:x}", std::process::id()),
            passwords: Mutex::new(HashMap::new()),
            process: None,
        };
        for user in DEMO_USERS {
            prosody.create_user(user, DEMO_PASSWORD);
        }

        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let (c2s, component) = free_port_pair().map_err(|e| format!("cannot pick free ports: {e}"))?;
            prosody.c2s_port = c2s;
            prosody.component_port = component;
            prosody.write_config()?;
            match prosody.spawn_and_wait() {
                Ok(()) => return Ok(prosody),
                Err(StartError::PortInUse(e)) => last_error = e,
                Err(StartError::Other(e)) => return Err(e),
            }
        }
        Err(format!("Prosody could not get free ports in {PORT_ATTEMPTS} attempts; last: {last_error}"))
    }

    /// The client-to-server port on 127.0.0.1.
    pub fn c2s_port(&self) -> u16 {
        self.c2s_port
    }

    /// The XEP-0114 component port on 127.0.0.1.
    pub fn component_port(&self) -> u16 {
        self.component_port
    }

    /// `127.0.0.1:PORT` of the component port, as smartfeeds' `[component] server` wants it.
    pub fn component_addr(&self) -> String {
        format!("127.0.0.1:{}", self.component_port)
    }

    /// The component domain, `feeds.localhost`.
    pub fn component_domain(&self) -> &'static str {
        COMPONENT_DOMAIN
    }

    /// The virtual host, `localhost`.
    pub fn vhost(&self) -> &'static str {
        VHOST
    }

    /// The component secret (unique per instance).
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The data directory (also holds the generated config, the pid file and the logs);
    /// a good place for a test's other files (e.g. a smartfeeds database).
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// The generated configuration file.
    pub fn config_path(&self) -> PathBuf {
        self.data.join("prosody.cfg.lua")
    }

    /// Prosody's log file.
    pub fn log_path(&self) -> PathBuf {
        self.data.join("prosody.log")
    }

    /// The last `lines` lines of Prosody's log and of its stdout/stderr.
    pub fn log_tail(&self, lines: usize) -> String {
        let mut out = String::new();
        for (name, path) in [("prosody.log", self.log_path()), ("stdout/stderr", self.data.join("prosody.out"))] {
            let text = fs::read_to_string(&path).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            let tail = &all[all.len().saturating_sub(lines)..];
            if !tail.is_empty() {
                out.push_str(&format!("--- {name} (last {} lines) ---\n{}\n", tail.len(), tail.join("\n")));
            }
        }
        if out.is_empty() {
            out.push_str("(Prosody wrote nothing)\n");
        }
        out
    }

    /// The pid of the running Prosody.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(|p| p.child.id())
    }

    /// Whether the process is running (it may have exited on its own).
    pub fn is_running(&mut self) -> bool {
        match &mut self.process {
            Some(p) => matches!(p.child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Creates (or resets the password of) `name@localhost`. Works while Prosody runs.
    pub fn create_user(&self, name: &str, password: &str) {
        let dir = self.data.join(encode_path(VHOST)).join("accounts");
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let file = dir.join(format!("{}.dat", encode_path(name)));
        let tmp = dir.join(format!(".{}.tmp", encode_path(name)));
        let body = format!("return {{\n\t[\"password\"] = {};\n}};\n", lua_string(password));
        fs::write(&tmp, body)
            .and_then(|()| fs::rename(&tmp, &file))
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", file.display()));
        self.passwords.lock().unwrap().insert(name.to_string(), password.to_string());
    }

    /// Deletes the account `name@localhost` (its file), as `prosodyctl deluser` would; a
    /// session it has stays up. Works while Prosody runs.
    pub fn delete_user(&self, name: &str) {
        let file = self.data.join(encode_path(VHOST)).join("accounts").join(format!("{}.dat", encode_path(name)));
        match fs::remove_file(&file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("cannot remove {}: {e}", file.display()),
        }
        self.passwords.lock().unwrap().remove(name);
    }

    /// The password of a user made by [`create_user`](Self::create_user) (or a demo user).
    pub fn password(&self, name: &str) -> String {
        self.passwords
            .lock()
            .unwrap()
            .get(name)
            .cloned()
            .unwrap_or_else(|| panic!("no user {name:?} was created on this Prosody"))
    }

    /// Logs a known user in: `prosody.login("alice").await`.
    pub async fn login(&self, name: &str) -> Client {
        Client::connect(self.c2s_port, &format!("{name}@{VHOST}"), &self.password(name)).await
    }

    /// [`login`](Self::login) returning a future that does not borrow the name (for
    /// `join_all` over many logins).
    pub fn login_owned(&self, name: String) -> impl std::future::Future<Output = Client> + 'static {
        let (port, password) = (self.c2s_port, self.password(&name));
        async move { Client::connect(port, &format!("{name}@{VHOST}"), &password).await }
    }

    /// Connects a raw component as `feeds.localhost` with this instance's secret.
    pub async fn component(&self) -> Component {
        Component::connect(self.component_port, COMPONENT_DOMAIN, &self.secret).await
    }

    /// Stops Prosody gracefully: SIGTERM, clients get a `<system-shutdown/>` stream error,
    /// components see their connection closed. No-op when not running.
    ///
    /// Prosody 0.12's event loop lingers 1–2 s after its shutdown work is done (it retries
    /// closing on a 1 s timer); once the log says "Shutdown complete" (sessions closed,
    /// storage flushed, pid file removed) the process is SIGKILLed to save that time.
    /// SIGKILL also after 10 s without that line.
    pub fn stop(&mut self) {
        let Some(mut running) = self.process.take() else { return };
        running.stop_watchdog();
        let log = self.log_path();
        let log_offset = fs::metadata(&log).map_or(0, |m| m.len());
        let pid = running.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match running.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if read_from(&log, log_offset).contains("Shutdown complete") => {
                    let _ = running.child.kill();
                    let _ = running.child.wait();
                    return;
                }
                Ok(None) if Instant::now() >= deadline => {
                    eprintln!("Prosody (pid {pid}) ignored SIGTERM for {STOP_TIMEOUT:?}; killing it");
                    let _ = running.child.kill();
                    let _ = running.child.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    /// Kills Prosody with SIGKILL (a crash: no stream is closed). No-op when not running.
    pub fn kill(&mut self) {
        if let Some(mut running) = self.process.take() {
            running.stop_watchdog();
            let _ = running.child.kill();
            let _ = running.child.wait();
        }
    }

    /// Stops Prosody if it runs, then starts it again on the SAME ports with the same data
    /// directory (users and Prosody's own pubsub data survive). Panics with the log tail if
    /// it does not come back.
    pub fn restart(&mut self) {
        self.stop();
        self.write_config().unwrap_or_else(|e| panic!("{e}"));
        // The ports were ours a moment ago; a brief retry covers sockets still being torn down.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.spawn_and_wait() {
                Ok(()) => return,
                Err(StartError::PortInUse(_)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(StartError::PortInUse(e) | StartError::Other(e)) => {
                    panic!("Prosody restart on the same ports failed: {e}")
                }
            }
        }
    }

    fn write_config(&self) -> Result<(), String> {
        let level = match std::env::var("SMARTFEEDS_PROSODY_LOG_LEVEL").as_deref() {
            Ok("debug") => "debug",
            _ => "info", // readiness detection needs the info lines
        };
        let config = render_config(
            self.c2s_port,
            self.component_port,
            self.data.to_str().expect("checked UTF-8"),
            &self.secret,
            level,
        )?;
        fs::write(self.config_path(), config).map_err(|e| format!("cannot write the Prosody config: {e}"))
    }

    fn spawn_and_wait(&mut self) -> Result<(), StartError> {
        let log = self.log_path();
        let log_offset = fs::metadata(&log).map_or(0, |m| m.len());
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data.join("prosody.out"))
            .map_err(|e| StartError::Other(format!("cannot open prosody.out: {e}")))?;
        let err = out.try_clone().map_err(|e| StartError::Other(e.to_string()))?;
        let child = Command::new(&self.bin)
            .arg("-F")
            .arg("--config")
            .arg(self.config_path())
            .current_dir(&self.data)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| StartError::Other(format!("cannot run {}: {e}", self.bin.display())))?;
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(format!("while read -r _line; do :; done; kill -9 {} 2>/dev/null", child.id()))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok();
        self.process = Some(Running { child, watchdog });

        match self.wait_ready(&log, log_offset) {
            Ok(()) => Ok(()),
            Err(e) => {
                let tail = self.log_tail(40);
                self.kill();
                Err(match e {
                    StartError::PortInUse(e) => StartError::PortInUse(e),
                    StartError::Other(e) => StartError::Other(format!(
                        "Prosody did not start (c2s port {}, component port {}, dir {}): {e}\n{tail}",
                        self.c2s_port,
                        self.component_port,
                        self.data.display()
                    )),
                })
            }
        }
    }

    fn wait_ready(&mut self, log: &Path, log_offset: u64) -> Result<(), StartError> {
        let c2s_line = format!("Activated service 'c2s' on [127.0.0.1]:{}", self.c2s_port);
        let component_line = format!("Activated service 'component' on [127.0.0.1]:{}", self.component_port);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let running = self.process.as_mut().expect("spawned");
            if let Ok(Some(status)) = running.child.try_wait() {
                return Err(StartError::Other(format!("prosody exited during startup with {status}")));
            }
            let text = read_from(log, log_offset);
            if let Some(line) = text.lines().find(|l| l.contains("Failed to open server port")) {
                return Err(StartError::PortInUse(line.to_string()));
            }
            if text.contains(&c2s_line)
                && text.contains(&component_line)
                && port_open(self.c2s_port)
                && port_open(self.component_port)
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(StartError::Other(format!("c2s and component ports not ready after {READY_TIMEOUT:?}")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Running {
    fn stop_watchdog(&mut self) {
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

impl Drop for Prosody {
    fn drop(&mut self) {
        self.kill();
        if std::env::var_os("SMARTFEEDS_KEEP_PROSODY").is_some()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("keeping the Prosody directory {}", dir.keep().display());
        }
    }
}

/// Fills in the placeholders of [`CONFIG_TEMPLATE`]; fails if one is left over, so the
/// template and this code cannot drift apart silently.
pub fn render_config(
    c2s_port: u16,
    component_port: u16,
    data: &str,
    secret: &str,
    log_level: &str,
) -> Result<String, String> {
    let config = CONFIG_TEMPLATE
        .replace("@C2S_PORT@", &c2s_port.to_string())
        .replace("@COMPONENT_PORT@", &component_port.to_string())
        .replace("@DATA@", data)
        .replace("@SECRET@", secret)
        .replace("@LOG_LEVEL@", log_level)
        .replace("@PLUGIN_DIR@", concat!(env!("CARGO_MANIFEST_DIR"), "/prosody"));
    match leftover_placeholder(&config) {
        Some(p) => Err(format!("prosody/prosody.cfg.lua has a placeholder the harness does not fill: {p}")),
        None => Ok(config),
    }
}

fn leftover_placeholder(config: &str) -> Option<&str> {
    config.lines().filter(|l| !l.trim_start().starts_with("--")).find_map(|line| {
        let start = line.find('@')?;
        let rest = &line[start + 1..];
        let end = rest.find('@')?;
        let name = &rest[..end];
        (!name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
            .then(|| &line[start..start + end + 2])
    })
}

/// Two distinct free ports: both listeners are held at once, then released for Prosody.
fn free_port_pair() -> std::io::Result<(u16, u16)> {
    let a = TcpListener::bind("127.0.0.1:0")?;
    let b = TcpListener::bind("127.0.0.1:0")?;
    Ok((a.local_addr()?.port(), b.local_addr()?.port()))
}

fn port_open(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).is_ok()
}

fn read_from(path: &Path, offset: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = fs::File::open(path)
        && file.seek(SeekFrom::Start(offset)).is_ok()
    {
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    text
}

/// Prosody's datamanager file-name encoding: every non-alphanumeric byte as `%xx`.
fn encode_path(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02x}") }).collect()
}

/// A Lua string literal.
fn lua_string(s: &str) -> String {
    let mut out = String::from("\"");
    for b in s.bytes() {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(b as char);
            }
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\{b:03}")),
        }
    }
    out.push('"');
    out
}
