//! A real ejabberd (Debian package `ejabberd`, 23.01) per test, on free loopback ports in its
//! own temporary directory, so test processes running in parallel never collide. The same
//! API as [`Prosody`](super::prosody::Prosody), so a test can be written once for both (see
//! [`Server`](super::server::Server)).
//!
//! Two templates are compiled in with `include_str!` and filled in here, the same files
//! `ejabberd/start.sh` uses for the demo: `ejabberd/ejabberd.yml` (listeners, modules) and
//! `ejabberd/ejabberdctl.cfg` (the Erlang node). Each instance has its own node name
//! (`ejabberd_test_PID_N@localhost`), cookie and distribution port: with `ERL_DIST_PORT` set,
//! ejabberdctl starts no epmd and the node is reachable only on that port, so instances share
//! nothing. The node runs as `ejabberdctl --config-dir DIR foreground`; run as root,
//! ejabberdctl switches to the `ejabberd` user through `su`, so the directory is handed to
//! that user first. `su -c` starts the Erlang VM in a session of its own: the VM
//! (`beam.smp`) is found among the descendants of the ejabberdctl process and killed by pid.
//!
//! Readiness: the log line "ejabberd 23.01 is started in the node …" and the c2s, component
//! and API ports accepting connections. Ports come from the OS (bind to port 0, then
//! release); if one is taken in between, ejabberd logs "Failed to open socket" and halts
//! (the Erlang distribution: "eaddrinuse"), so we try fresh ports.
//!
//! Users live in ejabberd's Mnesia database; they are created through ejabberd's REST API
//! (`mod_http_api` on a fourth loopback port: one HTTP request, a few milliseconds, where
//! `ejabberdctl register` boots an Erlang VM and takes 1.4 s). [`Ejabberd::ctl`] runs any
//! ejabberdctl command, [`Ejabberd::api`] any REST API command.
//!
//! Like Prosody's harness, a watchdog `sh` SIGKILLs the VM when the test process dies
//! without dropping the handle (SIGKILL, abort, a nextest timeout).
//!
//! Environment: `SMARTFEEDS_EJABBERDCTL` (default `/usr/sbin/ejabberdctl`),
//! `SMARTFEEDS_EJABBERD_LOG_LEVEL` (`debug` or `info`; default `info`),
//! `SMARTFEEDS_KEEP_EJABBERD=1` keeps the temporary directory and prints where it is.
//!
//! The process methods (`start`, `stop`, `restart`, `kill`) block the calling thread for
//! the time ejabberd takes (start: 2.5–3.5 s, more when many instances start at once; stop:
//! about 2 s; kill: a few milliseconds); call them from the test body.

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::client::Client;
use super::component::Component;

/// The server configuration template, `ejabberd/ejabberd.yml`.
pub const CONFIG_TEMPLATE: &str = include_str!("../../ejabberd/ejabberd.yml");
/// The ejabberdctl configuration template, `ejabberd/ejabberdctl.cfg`.
pub const CTL_CONFIG_TEMPLATE: &str = include_str!("../../ejabberd/ejabberdctl.cfg");
/// Name resolution for the Erlang VM (`ERL_INETRC`): the hosts file first, `localhost` fixed.
pub const INETRC: &str = "{lookup,[\"file\",\"native\"]}.\n{host,{127,0,0,1},[\"localhost\"]}.\n";
/// The virtual host users live on.
pub const VHOST: &str = "localhost";
/// The external component domain smartfeeds connects as.
pub const COMPONENT_DOMAIN: &str = "feeds.localhost";
/// The external component domain of the load tool (same port and secret).
pub const BENCH_DOMAIN: &str = "bench.localhost";
/// ejabberd's own pubsub service (mod_pubsub), for comparisons.
pub const PUBSUB_DOMAIN: &str = "pubsub.localhost";
/// Users every instance starts with (as in `ejabberd/start.sh`), all with [`DEMO_PASSWORD`].
pub const DEMO_USERS: [&str; 4] = ["admin", "bot", "alice", "bob"];
/// The password of the demo users.
pub const DEMO_PASSWORD: &str = "password";

const DEFAULT_CTL: &str = "/usr/sbin/ejabberdctl";
/// Generous: a cold start takes about 2.5 s of CPU, and parallel test processes share CPUs.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
const PORT_ATTEMPTS: usize = 8;
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// Environment variables ejabberdctl would take over from the caller's environment.
const CTL_ENV: [&str; 12] = [
    "SCRIPT",
    "ERLANG_NODE_ARG",
    "EJABBERD_OPTS",
    "EJABBERD_LOG_PATH",
    "EJABBERDCTL_CONFIG_PATH",
    "VMARGS",
    "MNESIA_OPTIONS",
    "NO_TIMEOUT",
    "CONTRIB_MODULES_PATH",
    "ERL_AFLAGS",
    "ERL_FLAGS",
    "ERL_ZFLAGS",
];

static INSTANCE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A running (or stopped) ejabberd instance; its Erlang VM is killed on drop. See the
/// module docs.
pub struct Ejabberd {
    dir: Option<tempfile::TempDir>,
    data: PathBuf,
    ctl: PathBuf,
    node: String,
    cookie: String,
    c2s_port: u16,
    component_port: u16,
    api_port: u16,
    dist_port: u16,
    secret: String,
    passwords: Mutex<HashMap<String, String>>,
    process: Option<Running>,
}

struct Running {
    /// `bash /usr/sbin/ejabberdctl … foreground`; it exits when the VM does.
    child: Child,
    /// The Erlang VM (`beam.smp`, in a session of its own under `su`), once found.
    beam: Option<u32>,
    /// `sh` that SIGKILLs the pids written to its stdin when our end of the pipe closes,
    /// i.e. when this test process dies without running destructors (SIGKILL, abort, a
    /// nextest timeout). It has a process group of its own, so a signal to the test's
    /// group (ctrl-c) does not take it down before it has done its job.
    watchdog: Option<(Child, ChildStdin)>,
}

enum StartError {
    /// One of the ports was taken before ejabberd could bind it.
    PortInUse(String),
    Other(String),
}

impl Ejabberd {
    /// Starts a fresh instance: free ports, new temporary directory, the demo users.
    /// Panics with ejabberd's log tail if it does not come up within 60 s.
    pub fn start() -> Ejabberd {
        Self::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`start`](Self::start), returning the reason instead of panicking.
    pub fn try_start() -> Result<Ejabberd, String> {
        let ctl =
            std::env::var_os("SMARTFEEDS_EJABBERDCTL").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(DEFAULT_CTL));
        if !ctl.exists() {
            return Err(format!(
                "ejabberd is not installed ({} is missing): install the Debian package with \
                 `apt-get install ejabberd` (or set SMARTFEEDS_EJABBERDCTL)",
                ctl.display()
            ));
        }
        let dir = tempfile::Builder::new()
            .prefix("smartfeeds-ejabberd-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        let data = dir.path().to_path_buf();
        let data_str = data.to_str().ok_or("temporary directory path is not UTF-8")?;
        if !data_str.chars().all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c)) {
            return Err(format!("temporary directory path {data_str:?} cannot go unquoted in ejabberdctl.cfg"));
        }
        for sub in ["logs", "spool"] {
            fs::create_dir_all(data.join(sub)).map_err(|e| format!("cannot create {sub}/: {e}"))?;
        }
        fs::write(data.join("inetrc"), INETRC).map_err(|e| format!("cannot write inetrc: {e}"))?;
        let n = INSTANCE_COUNTER.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let mut ejabberd = Ejabberd {
            dir: Some(dir),
            data,
            ctl,
            node: format!("ejabberd_test_{pid}_{n}@localhost"),
            cookie: format!("cookie{pid:x}x{n}x{nanos:x}"),
            c2s_port: 0,
            component_port: 0,
            api_port: 0,
            dist_port: 0,
            secret: format!("secret-{pid}-{n}-{:x}", nanos & 0xffff_ffff),
            passwords: Mutex::new(HashMap::new()),
            process: None,
        };
        for user in DEMO_USERS {
            ejabberd.create_user(user, DEMO_PASSWORD); // recorded; registered once running
        }

        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let [c2s, component, api, dist] = free_ports().map_err(|e| format!("cannot pick free ports: {e}"))?;
            (ejabberd.c2s_port, ejabberd.component_port, ejabberd.api_port, ejabberd.dist_port) =
                (c2s, component, api, dist);
            ejabberd.write_config()?;
            match ejabberd.spawn_and_wait() {
                Ok(()) => return Ok(ejabberd),
                Err(StartError::PortInUse(e)) => last_error = e,
                Err(StartError::Other(e)) => return Err(e),
            }
        }
        Err(format!("ejabberd could not get free ports in {PORT_ATTEMPTS} attempts; last: {last_error}"))
    }

    /// The client-to-server port on 127.0.0.1.
    pub fn c2s_port(&self) -> u16 {
        self.c2s_port
    }

    /// The XEP-0114 component port on 127.0.0.1 (`feeds.localhost` and `bench.localhost`).
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

    /// The HTTP port of ejabberd's REST API (`mod_http_api`, loopback only).
    pub fn api_port(&self) -> u16 {
        self.api_port
    }

    /// The Erlang distribution port of the node (what ejabberdctl connects to).
    pub fn dist_port(&self) -> u16 {
        self.dist_port
    }

    /// The Erlang node name, `ejabberd_test_PID_N@localhost`.
    pub fn node_name(&self) -> &str {
        &self.node
    }

    /// The run directory: generated configs, `logs/`, `spool/` (Mnesia), pid file; a good
    /// place for a test's other files (e.g. a smartfeeds database). It belongs to the
    /// `ejabberd` user when the tests run as root.
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// The generated `ejabberd.yml`.
    pub fn config_path(&self) -> PathBuf {
        self.data.join("ejabberd.yml")
    }

    /// The generated `ejabberdctl.cfg`.
    pub fn ctl_config_path(&self) -> PathBuf {
        self.data.join("ejabberdctl.cfg")
    }

    /// ejabberd's log file.
    pub fn log_path(&self) -> PathBuf {
        self.data.join("logs").join("ejabberd.log")
    }

    /// The last `lines` lines of ejabberd's log and of ejabberdctl's stdout/stderr (the
    /// latter also holds what the VM prints before its logger runs).
    pub fn log_tail(&self, lines: usize) -> String {
        let mut out = String::new();
        for (name, path) in [("ejabberd.log", self.log_path()), ("stdout/stderr", self.data.join("ejabberd.out"))] {
            let text = fs::read_to_string(&path).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            let tail = &all[all.len().saturating_sub(lines)..];
            if !tail.is_empty() {
                out.push_str(&format!("--- {name} (last {} lines) ---\n{}\n", tail.len(), tail.join("\n")));
            }
        }
        if out.is_empty() {
            out.push_str("(ejabberd wrote nothing)\n");
        }
        out
    }

    /// The pid of the running Erlang VM (`beam.smp`).
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(|p| p.beam)
    }

    /// Whether the node is running (it may have exited on its own).
    pub fn is_running(&mut self) -> bool {
        match &mut self.process {
            Some(p) => matches!(p.child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Creates (or resets the password of) `name@localhost`. While ejabberd runs this is
    /// one REST call (panics with ejabberd's answer if it fails); while it is stopped the
    /// account is created at the next start.
    pub fn create_user(&self, name: &str, password: &str) {
        if self.process.is_some()
            && let Err(e) = self.register(name, password)
        {
            panic!("cannot create {name}@{VHOST} on ejabberd: {e}");
        }
        self.passwords.lock().unwrap().insert(name.to_string(), password.to_string());
    }

    /// Deletes the account `name@localhost` (one REST call, `unregister`; its sessions are
    /// closed). Panics with ejabberd's answer if that fails while ejabberd runs.
    pub fn delete_user(&self, name: &str) {
        if self.process.is_some() {
            let (user, host) = (json_string(name), json_string(VHOST));
            if let Err(e) = self.api("unregister", &format!(r#"{{"user":{user},"host":{host}}}"#)) {
                panic!("cannot delete {name}@{VHOST} on ejabberd: {e}");
            }
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
            .unwrap_or_else(|| panic!("no user {name:?} was created on this ejabberd"))
    }

    /// Logs a known user in: `ejabberd.login("alice").await`.
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

    /// Connects a raw component as `domain` (`feeds.localhost` or `bench.localhost`).
    pub async fn component_as(&self, domain: &str) -> Component {
        Component::connect(self.component_port, domain, &self.secret).await
    }

    /// Calls ejabberd's REST API: `POST /api/COMMAND` with a JSON body; returns the body of
    /// a 200 answer, or `Err` with the status and body (e.g. a 409 for an existing user).
    pub fn api(&self, command: &str, json: &str) -> Result<String, String> {
        let mut tcp = TcpStream::connect_timeout(&([127, 0, 0, 1], self.api_port).into(), HTTP_TIMEOUT)
            .map_err(|e| format!("cannot reach the REST API on port {}: {e}", self.api_port))?;
        tcp.set_read_timeout(Some(HTTP_TIMEOUT)).map_err(|e| e.to_string())?;
        tcp.set_write_timeout(Some(HTTP_TIMEOUT)).map_err(|e| e.to_string())?;
        let request = format!(
            "POST /api/{command} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{json}",
            self.api_port,
            json.len()
        );
        tcp.write_all(request.as_bytes()).map_err(|e| format!("REST API write failed: {e}"))?;
        let mut response = Vec::new();
        tcp.read_to_end(&mut response).map_err(|e| format!("REST API read failed: {e}"))?;
        let response = String::from_utf8_lossy(&response);
        let status = response.split(' ').nth(1).unwrap_or("");
        let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body).trim();
        if status == "200" { Ok(body.to_string()) } else { Err(format!("HTTP {status}: {body}")) }
    }

    /// Runs `ejabberdctl ARGS…` against this node (about a second: it boots an Erlang VM);
    /// returns its stdout, or `Err` with the exit status and output.
    pub fn ctl(&self, args: &[&str]) -> Result<String, String> {
        let output = self
            .ctl_command()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.ctl.display()))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() {
            Ok(stdout)
        } else {
            let stderr = String::from_utf8_lossy(&output.stderr);
            Err(format!("ejabberdctl {} failed ({}): {stdout}{stderr}", args.join(" "), output.status))
        }
    }

    /// Stops ejabberd gracefully, the way `ejabberdctl stop` (and Debian's systemd unit) does
    /// it, through the REST API's `stop` command: clients get a `<system-shutdown/>` stream
    /// error and the stream footer, then, a second later, the node stops; components see
    /// their TCP connection closed (no stream error, no footer). Takes about 2 s. If the
    /// API does not answer, SIGTERM to the VM (the same, except that clients may lose the
    /// race and see the connection closed without the stream error); SIGKILL after 15 s.
    /// No-op when not running.
    pub fn stop(&mut self) {
        if self.process.is_none() {
            return;
        }
        let api = self.api("stop", "{}");
        let Some(mut running) = self.process.take() else { return };
        running.stop_watchdog();
        if api.is_err() {
            match running.beam.or_else(|| find_beam(running.child.id())) {
                Some(beam) => signal("-TERM", &[beam]),
                None => {
                    // Not started far enough to have a VM: nothing to shut down gracefully.
                    running.kill_all();
                    return;
                }
            }
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match running.child.try_wait() {
                // ejabberdctl returns once su, and so the VM, has exited; the VM's helper
                // programs (erl_child_setup, eimp) end on their own.
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() >= deadline => {
                    eprintln!("ejabberd (node {}) did not stop within {STOP_TIMEOUT:?}; killing it", self.node);
                    running.kill_all();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    /// Kills the Erlang VM with SIGKILL (a crash: no stream is closed). No-op when not
    /// running.
    pub fn kill(&mut self) {
        if let Some(mut running) = self.process.take() {
            running.stop_watchdog();
            running.kill_all();
        }
    }

    /// Stops ejabberd if it runs, then starts it again on the SAME ports, node name and
    /// spool (users and ejabberd's own pubsub data survive). Panics with the log tail if it
    /// does not come back.
    pub fn restart(&mut self) {
        self.stop();
        self.write_config().unwrap_or_else(|e| panic!("{e}"));
        // The ports were ours a moment ago; a brief retry covers sockets still being torn down.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn_and_wait() {
                Ok(()) => return,
                Err(StartError::PortInUse(_)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(StartError::PortInUse(e) | StartError::Other(e)) => {
                    panic!("ejabberd restart on the same ports failed: {e}")
                }
            }
        }
    }

    fn ctl_command(&self) -> Command {
        let mut command = Command::new(&self.ctl);
        command.arg("--config-dir").arg(&self.data).current_dir(&self.data);
        for var in CTL_ENV {
            command.env_remove(var);
        }
        command
    }

    fn write_config(&self) -> Result<(), String> {
        let level = match std::env::var("SMARTFEEDS_EJABBERD_LOG_LEVEL").as_deref() {
            Ok("debug") => "debug",
            _ => "info", // readiness detection needs the info lines
        };
        let data = self.data.to_str().expect("checked UTF-8");
        let config = render_config(self.c2s_port, self.component_port, self.api_port, &self.secret, level)?;
        let ctl_config = render_ctl_config(&self.node, self.dist_port, &self.cookie, data)?;
        fs::write(self.config_path(), config).map_err(|e| format!("cannot write ejabberd.yml: {e}"))?;
        fs::write(self.ctl_config_path(), ctl_config).map_err(|e| format!("cannot write ejabberdctl.cfg: {e}"))?;
        give_to_ejabberd_user(&self.data)
    }

    fn spawn_and_wait(&mut self) -> Result<(), StartError> {
        let log = self.log_path();
        let log_offset = fs::metadata(&log).map_or(0, |m| m.len());
        let out_path = self.data.join("ejabberd.out");
        let out_offset = fs::metadata(&out_path).map_or(0, |m| m.len());
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&out_path)
            .map_err(|e| StartError::Other(format!("cannot open ejabberd.out: {e}")))?;
        let err = out.try_clone().map_err(|e| StartError::Other(e.to_string()))?;
        let child = self
            .ctl_command()
            .arg("foreground")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| StartError::Other(format!("cannot run {}: {e}", self.ctl.display())))?;
        let watchdog = spawn_watchdog(child.id());
        self.process = Some(Running { child, beam: None, watchdog });

        match self.wait_ready(&log, log_offset, &out_path, out_offset) {
            Ok(()) => {}
            Err(e) => {
                let tail = self.log_tail(40);
                self.kill();
                return Err(match e {
                    StartError::PortInUse(e) => StartError::PortInUse(e),
                    StartError::Other(e) => StartError::Other(format!(
                        "ejabberd did not start (node {}, c2s port {}, component port {}, API port {}, \
                         distribution port {}, dir {}): {e}\n{tail}",
                        self.node,
                        self.c2s_port,
                        self.component_port,
                        self.api_port,
                        self.dist_port,
                        self.data.display()
                    )),
                });
            }
        }
        let users: Vec<(String, String)> =
            self.passwords.lock().unwrap().iter().map(|(u, p)| (u.clone(), p.clone())).collect();
        for (user, password) in users {
            if let Err(e) = self.register(&user, &password) {
                let tail = self.log_tail(20);
                self.kill();
                return Err(StartError::Other(format!("cannot create {user}@{VHOST} on ejabberd: {e}\n{tail}")));
            }
        }
        Ok(())
    }

    fn wait_ready(&mut self, log: &Path, log_offset: u64, out: &Path, out_offset: u64) -> Result<(), StartError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let running = self.process.as_mut().expect("spawned");
            if running.beam.is_none()
                && let Some(beam) = find_beam(running.child.id())
            {
                running.beam = Some(beam);
                if let Some((_, stdin)) = &mut running.watchdog {
                    let _ = writeln!(stdin, "{beam}");
                }
            }
            let exited = match running.child.try_wait() {
                Ok(Some(status)) => Some(status),
                _ => None,
            };
            let text = read_from(log, log_offset) + &read_from(out, out_offset);
            if let Some(line) = text.lines().find(|l| l.contains("Failed to open socket") || l.contains("eaddrinuse")) {
                return Err(StartError::PortInUse(line.to_string()));
            }
            if let Some(status) = exited {
                return Err(StartError::Other(format!("ejabberdctl exited during startup with {status}")));
            }
            if text.contains("is started in the node")
                && port_open(self.c2s_port)
                && port_open(self.component_port)
                && port_open(self.api_port)
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(StartError::Other(format!("ejabberd not ready after {READY_TIMEOUT:?}")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Registers `name@localhost`, or changes the password of an existing account.
    fn register(&self, name: &str, password: &str) -> Result<(), String> {
        let (user, host, pass) = (json_string(name), json_string(VHOST), json_string(password));
        match self.api("register", &format!(r#"{{"user":{user},"host":{host},"password":{pass}}}"#)) {
            Ok(_) => Ok(()),
            Err(e) if e.contains("already registered") => {
                self.api("change_password", &format!(r#"{{"user":{user},"host":{host},"newpass":{pass}}}"#)).map(drop)
            }
            Err(e) => Err(e),
        }
    }
}

impl Running {
    fn stop_watchdog(&mut self) {
        if let Some((mut watchdog, stdin)) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
            drop(stdin);
        }
    }

    /// SIGKILLs the VM and its port programs (erl_child_setup, eimp); the `sh` and `su`
    /// above it then reap it and exit, and so does ejabberdctl, which we reap. Whatever is
    /// left after 5 s (or everything, if the VM was never found) is SIGKILLed too. Returns
    /// once the VM is gone, so its directory can be removed.
    fn kill_all(&mut self) {
        let beam = self.beam.or_else(|| find_beam(self.child.id()));
        if let Some(beam) = beam {
            let mut pids: Vec<u32> = descendants(beam).into_iter().map(|(pid, _)| pid).collect();
            pids.push(beam);
            signal("-KILL", &pids);
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let mut pids: Vec<u32> = descendants(self.child.id()).into_iter().map(|(pid, _)| pid).collect();
            pids.push(self.child.id());
            signal("-KILL", &pids);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(beam) = beam {
            let deadline = Instant::now() + Duration::from_secs(5);
            while is_alive(beam) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

impl Drop for Ejabberd {
    fn drop(&mut self) {
        self.kill();
        if std::env::var_os("SMARTFEEDS_KEEP_EJABBERD").is_some()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("keeping the ejabberd directory {}", dir.keep().display());
        }
    }
}

/// Fills in the placeholders of [`CONFIG_TEMPLATE`]; fails if one is left over, so the
/// template and this code cannot drift apart silently.
pub fn render_config(
    c2s_port: u16,
    component_port: u16,
    api_port: u16,
    secret: &str,
    log_level: &str,
) -> Result<String, String> {
    if secret.contains(['"', '\\', '\n']) {
        return Err(format!("secret {secret:?} cannot go in a YAML string"));
    }
    let config = CONFIG_TEMPLATE
        .replace("@C2S_PORT@", &c2s_port.to_string())
        .replace("@COMPONENT_PORT@", &component_port.to_string())
        .replace("@API_PORT@", &api_port.to_string())
        .replace("@SECRET@", secret)
        .replace("@LOG_LEVEL@", log_level);
    no_leftover(config, "ejabberd/ejabberd.yml")
}

/// Fills in the placeholders of [`CTL_CONFIG_TEMPLATE`] (a shell file: the values must not
/// need quoting).
pub fn render_ctl_config(node: &str, dist_port: u16, cookie: &str, data: &str) -> Result<String, String> {
    for value in [node, cookie, data] {
        if !value.chars().all(|c| c.is_ascii_alphanumeric() || "/._-@".contains(c)) {
            return Err(format!("{value:?} cannot go unquoted in ejabberdctl.cfg"));
        }
    }
    let config = CTL_CONFIG_TEMPLATE
        .replace("@NODE@", node)
        .replace("@DIST_PORT@", &dist_port.to_string())
        .replace("@COOKIE@", cookie)
        .replace("@DATA@", data);
    no_leftover(config, "ejabberd/ejabberdctl.cfg")
}

fn no_leftover(config: String, file: &str) -> Result<String, String> {
    let leftover = config.lines().filter(|l| !l.trim_start().starts_with('#')).find_map(|line| {
        let start = line.find('@')?;
        let rest = &line[start + 1..];
        let end = rest.find('@')?;
        let name = &rest[..end];
        (!name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
            .then(|| line[start..start + end + 2].to_string())
    });
    match leftover {
        Some(p) => Err(format!("{file} has a placeholder the harness does not fill: {p}")),
        None => Ok(config),
    }
}

/// Run as root, ejabberdctl runs the node as the `ejabberd` user, which must own the run
/// directory (logs, Mnesia spool, pid file). Run as another user, ejabberdctl refuses to
/// work unless that user is `ejabberd` itself; its message ends up in the log tail.
fn give_to_ejabberd_user(dir: &Path) -> Result<(), String> {
    if !running_as_root() {
        return Ok(());
    }
    let status = Command::new("chown")
        .arg("-R")
        .arg("ejabberd:ejabberd")
        .arg(dir)
        .status()
        .map_err(|e| format!("cannot run chown: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "cannot give {} to the ejabberd user (chown {status}); the Debian package creates that user",
            dir.display()
        ))
    }
}

fn running_as_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false)
}

/// Starts the watchdog of an ejabberdctl process (see [`Running::watchdog`]). Pids written
/// to its stdin, one per line, are killed along with ejabberdctl.
fn spawn_watchdog(ctl_pid: u32) -> Option<(Child, ChildStdin)> {
    use std::os::unix::process::CommandExt;
    let script = format!(
        "trap '' INT HUP TERM; pids={ctl_pid}; while read -r pid; do pids=\"$pids $pid\"; done; \
         kill -9 $pids 2>/dev/null"
    );
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .ok()?;
    let stdin = child.stdin.take()?;
    Some((child, stdin))
}

/// The Erlang VM among the descendants of `root`.
fn find_beam(root: u32) -> Option<u32> {
    descendants(root).into_iter().find(|(_, comm)| comm.starts_with("beam")).map(|(pid, _)| pid)
}

/// All descendants of `root` (pid, command name), from `/proc`.
fn descendants(root: u32) -> Vec<(u32, String)> {
    let mut procs: Vec<(u32, u32, String)> = Vec::new();
    if let Ok(entries) = fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else { continue };
            // "PID (COMM) STATE PPID …"; COMM may contain spaces and parentheses.
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
            let comm = stat[open + 1..close].to_string();
            let Some(ppid) = stat[close + 1..].split_whitespace().nth(1).and_then(|s| s.parse().ok()) else {
                continue;
            };
            procs.push((pid, ppid, comm));
        }
    }
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for (pid, ppid, comm) in &procs {
            if *ppid == parent {
                found.push((*pid, comm.clone()));
                frontier.push(*pid);
            }
        }
    }
    found
}

/// Whether `pid` exists and is not a zombie.
fn is_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()) != Some("Z"),
        Err(_) => false,
    }
}

fn signal(signal: &str, pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg(signal)
        .args(pids.iter().map(u32::to_string))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Four distinct free ports: all listeners are held at once, then released for ejabberd.
fn free_ports() -> std::io::Result<[u16; 4]> {
    let listeners = [
        TcpListener::bind("127.0.0.1:0")?,
        TcpListener::bind("127.0.0.1:0")?,
        TcpListener::bind("127.0.0.1:0")?,
        TcpListener::bind("127.0.0.1:0")?,
    ];
    let mut ports = [0; 4];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr()?.port();
    }
    Ok(ports)
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

/// A JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
