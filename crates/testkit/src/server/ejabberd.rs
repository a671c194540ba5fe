//! ejabberd (Debian package `ejabberd`, 23.01) as a [`Server`].
//!
//! Two templates are compiled in with `include_str!` and filled in here, the same files
//! `ejabberd/start.sh` uses for the demo: `ejabberd/ejabberd.yml` (listeners, modules) and
//! `ejabberd/ejabberdctl.cfg` (the Erlang node). Each instance has its own node name
//! (`ejabberd_test_PID_N@localhost`), cookie and distribution port: with `ERL_DIST_PORT` set,
//! ejabberdctl starts no epmd and the node is reachable only on that port, so instances share
//! nothing (the nodes of an [`EjabberdCluster`](super::EjabberdCluster) are the exception:
//! they find each other through an epmd of their own). The node runs as
//! `ejabberdctl --config-dir DIR foreground`; run as root, ejabberdctl switches to the
//! `ejabberd` user through `su`, so the directory is handed to that user first. `su -c`
//! starts the Erlang VM in a session of its own: the VM (`beam.smp`) is found among the
//! descendants of the ejabberdctl process, handed to the watchdog and killed by pid.
//!
//! Ready: the log line "ejabberd 23.01 is started in the node …" and the c2s, component
//! and API ports accepting connections. A port taken in between: ejabberd logs "Failed to
//! open socket" and halts (the Erlang distribution: "eaddrinuse").
//!
//! Users live in ejabberd's Mnesia database; they are created through ejabberd's REST API
//! (`mod_http_api` on a third loopback port: one HTTP request, a few milliseconds, where
//! `ejabberdctl register` boots an Erlang VM and takes 1.4 s). [`Ejabberd::ctl`] runs any
//! ejabberdctl command, [`Ejabberd::api`] any REST API command.
//!
//! Environment: `SMARTFEEDS_EJABBERDCTL` (default `/usr/sbin/ejabberdctl`),
//! `SMARTFEEDS_EJABBERD_LOG_LEVEL` (`debug` or `info`; default `info`),
//! `SMARTFEEDS_KEEP_EJABBERD=1` keeps the temporary directory and prints where it is.

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::ejabberd_cluster::render_cluster_ctl_config;
use super::prosody::no_leftover;
use super::{COMPONENT_DOMAIN, ComponentDown, Kind, Server, Setup, VHOST, installed};
use crate::process::{Process, descendants, send_signal};

/// The server configuration template, `ejabberd/ejabberd.yml`.
pub const CONFIG_TEMPLATE: &str = include_str!("../../../../ejabberd/ejabberd.yml");
/// The ejabberdctl configuration template, `ejabberd/ejabberdctl.cfg`.
pub const CTL_CONFIG_TEMPLATE: &str = include_str!("../../../../ejabberd/ejabberdctl.cfg");
/// Name resolution for the Erlang VM (`ERL_INETRC`): the hosts file first, `localhost` fixed.
pub const INETRC: &str = "{lookup,[\"file\",\"native\"]}.\n{host,{127,0,0,1},[\"localhost\"]}.\n";

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

static NODE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// ejabberd 23.01; see the module docs.
pub struct Ejabberd {
    ctl: PathBuf,
    data: PathBuf,
    node: String,
    cookie: String,
    api_port: u16,
    dist_port: u16,
    /// Whether `mod_multicast` is configured.
    multicast: bool,
    /// For a cluster node: the port of the cluster's epmd, through which the node is found
    /// instead of at a fixed distribution port.
    epmd_port: Option<u16>,
}

impl Ejabberd {
    /// The HTTP port of ejabberd's REST API (`mod_http_api`, loopback only).
    pub fn api_port(&self) -> u16 {
        self.api_port
    }

    /// The Erlang distribution port of the node (what ejabberdctl connects to); 0 for a
    /// cluster node, whose port the VM picks and registers with the cluster's epmd.
    pub fn dist_port(&self) -> u16 {
        self.dist_port
    }

    /// The Erlang node name, `ejabberd_test_PID_N@localhost`.
    pub fn node_name(&self) -> &str {
        &self.node
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

    /// A node of a cluster (see [`EjabberdCluster`](super::EjabberdCluster)): the Erlang node
    /// `node`, the cookie all its nodes share, found through the epmd on `epmd_port`.
    pub fn cluster_node(data: &Path, node: String, cookie: String, epmd_port: u16) -> Result<Ejabberd, String> {
        Ok(Ejabberd { node, cookie, epmd_port: Some(epmd_port), ..Ejabberd::new(data)? })
    }

    /// An ejabberd without `mod_multicast`.
    pub fn without_multicast(data: &Path) -> Result<Ejabberd, String> {
        Ok(Ejabberd { multicast: false, ..Ejabberd::new(data)? })
    }

    fn ctl_command(&self) -> Command {
        let mut command = Command::new(&self.ctl);
        command.arg("--config-dir").arg(&self.data).current_dir(&self.data);
        for var in CTL_ENV {
            command.env_remove(var);
        }
        command
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

impl Server for Ejabberd {
    fn new(data: &Path) -> Result<Self, String> {
        let ctl = installed("SMARTFEEDS_EJABBERDCTL", "/usr/sbin/ejabberdctl", "ejabberd", "ejabberd")?;
        let data_str = data.to_str().ok_or("temporary directory path is not UTF-8")?;
        if !data_str.chars().all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c)) {
            return Err(format!("temporary directory path {data_str:?} cannot go unquoted in ejabberdctl.cfg"));
        }
        for sub in ["logs", "spool"] {
            fs::create_dir_all(data.join(sub)).map_err(|e| format!("cannot create {sub}/: {e}"))?;
        }
        fs::write(data.join("inetrc"), INETRC).map_err(|e| format!("cannot write inetrc: {e}"))?;
        let n = NODE_COUNTER.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        Ok(Ejabberd {
            ctl,
            data: data.to_path_buf(),
            node: format!("ejabberd_test_{pid}_{n}@localhost"),
            cookie: format!("cookie{pid:x}x{n}x{nanos:x}"),
            api_port: 0,
            dist_port: 0,
            multicast: true,
            epmd_port: None,
        })
    }

    fn kind(&self) -> Kind {
        Kind::Ejabberd
    }

    /// The REST API and the Erlang distribution (a cluster node: the REST API only).
    fn extra_ports(&self) -> usize {
        if self.epmd_port.is_some() { 1 } else { 2 }
    }

    fn write_config(&mut self, setup: &Setup) -> Result<(), String> {
        self.api_port = setup.ports[2];
        self.dist_port = if self.epmd_port.is_some() { 0 } else { setup.ports[3] };
        let level = match std::env::var("SMARTFEEDS_EJABBERD_LOG_LEVEL").as_deref() {
            Ok("debug") => "debug",
            _ => "info", // readiness detection needs the info lines
        };
        let data = self.data.to_str().expect("checked UTF-8");
        let mut config = render_config(setup.c2s_port(), setup.component_port(), self.api_port, &setup.secret, level)?;
        if !self.multicast {
            config = without_module(&config, "mod_multicast")?;
        }
        let ctl_config = match self.epmd_port {
            None => render_ctl_config(&self.node, self.dist_port, &self.cookie, data)?,
            Some(epmd) => render_cluster_ctl_config(&self.node, epmd, &self.cookie, data)?,
        };
        fs::write(self.data.join("ejabberd.yml"), config).map_err(|e| format!("cannot write ejabberd.yml: {e}"))?;
        fs::write(self.data.join("ejabberdctl.cfg"), ctl_config)
            .map_err(|e| format!("cannot write ejabberdctl.cfg: {e}"))?;
        give_to_ejabberd_user(&self.data)
    }

    fn command(&self, _setup: &Setup) -> Command {
        let mut command = self.ctl_command();
        command.arg("foreground");
        command
    }

    fn log_path(&self, data: &Path) -> PathBuf {
        data.join("logs").join("ejabberd.log")
    }

    /// A cold start takes about 2.5 s of CPU, and parallel test processes share CPUs.
    fn ready_timeout(&self) -> Duration {
        Duration::from_secs(60)
    }

    fn stop_timeout(&self) -> Duration {
        Duration::from_secs(15)
    }

    /// The Erlang VM among the descendants of ejabberdctl.
    fn main_pid(&self, root: u32) -> Option<u32> {
        descendants(root).into_iter().find(|(_, comm)| comm.starts_with("beam")).map(|(pid, _)| pid)
    }

    fn port_taken<'a>(&self, text: &'a str) -> Option<&'a str> {
        text.lines().find(|l| l.contains("Failed to open socket") || l.contains("eaddrinuse"))
    }

    fn says_ready(&self, text: &str, _setup: &Setup) -> bool {
        text.contains("is started in the node")
    }

    fn ready_ports(&self, setup: &Setup) -> Vec<u16> {
        vec![setup.c2s_port(), setup.component_port(), self.api_port]
    }

    /// While ejabberd runs, one REST call; while it is stopped, the account is created at
    /// the next start ([`after_start`](Server::after_start)).
    fn store_account(&self, _setup: &Setup, running: bool, name: &str, password: &str) -> Result<(), String> {
        if running { self.register(name, password) } else { Ok(()) }
    }

    /// One REST call, `unregister`; the account's sessions are closed.
    fn remove_account(&self, _setup: &Setup, running: bool, name: &str) -> Result<(), String> {
        if !running {
            return Ok(());
        }
        let (user, host) = (json_string(name), json_string(VHOST));
        self.api("unregister", &format!(r#"{{"user":{user},"host":{host}}}"#)).map(drop)
    }

    fn after_start(&self, accounts: &[(String, String)]) -> Result<(), String> {
        for (user, password) in accounts {
            self.register(user, password).map_err(|e| format!("cannot create {user}@{VHOST}: {e}"))?;
        }
        Ok(())
    }

    /// The way `ejabberdctl stop` (and Debian's systemd unit) does it, through the REST API's
    /// `stop` command: clients get a `<system-shutdown/>` stream error and the stream footer,
    /// then, a second later, the node stops; components see their TCP connection closed (no
    /// stream error, no footer). Takes about 2 s. If the API does not answer, SIGTERM to the
    /// VM (the same, except that clients may lose the race and see the connection closed
    /// without the stream error); a VM not started far enough has nothing to shut down.
    fn request_stop(&self, process: &Process) -> bool {
        if self.api("stop", "{}").is_ok() {
            return true;
        }
        let beam = if process.has_main() { Some(process.main_pid()) } else { self.main_pid(process.id()) };
        beam.inspect(|&beam| send_signal("-TERM", &[beam])).is_some()
    }

    fn describe(&self) -> String {
        format!("node {}, ", self.node)
    }

    /// Names another server in the `multicast_senders` ACL and reloads the configuration
    /// (REST `reload_config`, which returns once it is in force).
    fn refuse_multicast(&self, _setup: &Setup, _process: &Process) -> Result<(), String> {
        let path = self.data.join("ejabberd.yml");
        let config = fs::read_to_string(&path).map_err(|e| e.to_string())?;
        let granted = format!("  multicast_senders:\n    server:\n      - \"{COMPONENT_DOMAIN}\"\n");
        if !config.contains(&granted) {
            return Err(format!("{} does not grant multicast with {granted:?}", path.display()));
        }
        let withdrawn = granted.replace(COMPONENT_DOMAIN, "nobody.invalid");
        fs::write(&path, config.replace(&granted, &withdrawn)).map_err(|e| e.to_string())?;
        self.api("reload_config", "{}").map(drop)
    }

    /// ejabberd 23.01 has no route for the domain, tries server-to-server and answers
    /// `<error type="cancel">` with `<remote-server-not-found/>` at once (and a text like
    /// "DNS lookup failed: enoname"; the request's payload is echoed).
    fn component_down(&self) -> ComponentDown {
        ComponentDown { condition: "remote-server-not-found", kind: "cancel", marker: None }
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
    no_leftover(config, "#", "ejabberd/ejabberd.yml")
}

/// `config` without the entry of `module` under `modules:` (its line and the more
/// deeply indented lines below it).
fn without_module(config: &str, module: &str) -> Result<String, String> {
    let head = format!("  {module}:");
    let mut out = String::with_capacity(config.len());
    let (mut skipping, mut found) = (false, false);
    for line in config.lines() {
        if line == head || line.starts_with(&format!("{head} ")) {
            (skipping, found) = (true, true);
            continue;
        }
        if skipping && (line.starts_with("   ") || line.trim().is_empty()) {
            continue;
        }
        skipping = false;
        out.push_str(line);
        out.push('\n');
    }
    if found { Ok(out) } else { Err(format!("ejabberd.yml has no {module} to leave out")) }
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
    no_leftover(config, "#", "ejabberd/ejabberdctl.cfg")
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
