//! Two real Prosody servers federated over server-to-server (s2s) on loopback, for the
//! federation tests: the **home** server (`localhost`, with the component `feeds.localhost`
//! that smartfeeds connects as) and a **remote** server (`remote.test`) whose users reach
//! the component only through their own server and the s2s link.
//!
//! ```ignore
//! let fed = Federation::start();
//! let feeds = Smartfeeds::start(&fed.home, TABLES);      // the home is a `Server`
//! let mut alice = fed.remote.login("alice").await;       // alice@remote.test
//! fed.remote.stop(); …; fed.remote.start_again();        // the link is cut, then restored
//! ```
//!
//! **Name resolution without the machine's resolver.** Each server has its own loopback
//! address with its s2s port 5269 on it (home `127.N.M.1`, remote `127.N.M.2`; N and M are
//! unique per test, so tests run in parallel), and finds the other through its own
//! configuration only. Prosody 0.12 resolves with libunbound (`net/unbound.lua`, Debian
//! package `lua-unbound`), configured by the global `unbound` option: `hoststxt` is a hosts
//! file of the server's own (`ADDRESS DOMAIN` of the peer), `resolvconf = false` ignores
//! `/etc/resolv.conf`, and the unbound option `local-zone: ". static"` answers every name
//! that file does not hold with NXDOMAIN, locally. `localhost.` needs a zone of its own
//! (unbound's built-in one refuses names below `localhost` such as `feeds.localhost`), and
//! since the option table takes one value per key, that second `local-zone` is written
//! without its colon, which `ub_ctx_set_option` accepts as well. So the SRV lookup for
//! `_xmpp-server._tcp.remote.test` fails at once with NXDOMAIN (Prosody then falls back to
//! the domain's address and the default port 5269, RFC 6120 §3.2.2), the A lookup comes
//! from the hosts file, and no query ever leaves the process. (An SRV lookup answered with
//! an error other than NXDOMAIN would make Prosody give up instead of falling back, which is
//! why the static zone matters.)
//!
//! **Authentication.** Dialback (XEP-0220) without TLS: `s2s_require_encryption = false`,
//! `s2s_secure_auth = false`, no certificates. The component's domain federates through its
//! host (Prosody gives components the global `dialback` module).
//!
//! `SMARTFEEDS_KEEP_PROSODY=1` keeps both servers' directories (configs, logs).
//!
//! Accounts are `internal_plain` files, as in [`Prosody`](super::prosody::Prosody); every
//! server has `admin`, `bot`, `alice` and `bob` with the password `password`.

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use super::prosody::{COMPONENT_DOMAIN, DEMO_PASSWORD, DEMO_USERS, VHOST};
use super::server::Server;

/// The remote server's domain.
pub const REMOTE: &str = "remote.test";
/// The s2s port, on each server's own loopback address.
pub const S2S_PORT: u16 = 5269;
const BIN: &str = "/usr/bin/prosody";
const READY_TIMEOUT: Duration = Duration::from_secs(15);

static PAIR: AtomicU8 = AtomicU8::new(0);

/// The two servers of one test; both are killed on drop.
pub struct Federation {
    /// `localhost`, carrying `feeds.localhost`.
    pub home: FedServer,
    /// `remote.test`.
    pub remote: FedServer,
}

impl Federation {
    /// Starts both servers on a fresh pair of loopback addresses.
    pub fn start() -> Federation {
        let n = PAIR.fetch_add(1, Ordering::Relaxed);
        let base = format!("127.{}.{n}", 100 + std::process::id() % 150);
        let (home_addr, remote_addr) = (format!("{base}.1"), format!("{base}.2"));
        let home = FedServer::start(Role::Home, &home_addr, &format!("{remote_addr} {REMOTE}"));
        let remote = FedServer::start(Role::Remote, &remote_addr, &format!("{home_addr} {COMPONENT_DOMAIN} {VHOST}"));
        Federation { home, remote }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Role {
    Home,
    Remote,
}

/// One Prosody of a [`Federation`].
pub struct FedServer {
    dir: Option<tempfile::TempDir>,
    data: PathBuf,
    role: Role,
    domain: &'static str,
    s2s_addr: String,
    c2s_port: u16,
    component_port: u16,
    secret: String,
    passwords: Mutex<HashMap<String, String>>,
    process: Option<(Child, Option<Child>)>,
}

impl FedServer {
    fn start(role: Role, s2s_addr: &str, hosts: &str) -> FedServer {
        assert!(
            Path::new(BIN).exists(),
            "Prosody is not installed ({BIN} is missing): install the Debian packages with \
             `apt-get install prosody lua-unbound`"
        );
        let dir = tempfile::Builder::new().prefix("smartfeeds-fed-").tempdir().expect("a temporary directory");
        let data = dir.path().to_path_buf();
        fs::create_dir_all(data.join("certs")).expect("certs/");
        fs::write(data.join("hosts"), format!("{hosts}\n")).expect("hosts");
        let free = || TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        let domain = if role == Role::Home { VHOST } else { REMOTE };
        let mut server = FedServer {
            secret: format!("fed-secret-{}", std::process::id()),
            dir: Some(dir),
            data,
            role,
            domain,
            s2s_addr: s2s_addr.to_string(),
            c2s_port: free(),
            component_port: free(),
            passwords: Mutex::new(HashMap::new()),
            process: None,
        };
        for user in DEMO_USERS {
            server.create_user(user, DEMO_PASSWORD);
        }
        fs::write(server.data.join("prosody.cfg.lua"), server.config()).expect("the config");
        server.spawn();
        server
    }

    /// The server's domain: `localhost` or `remote.test`.
    pub fn domain(&self) -> &'static str {
        self.domain
    }

    /// The loopback address its s2s port listens on.
    pub fn s2s_addr(&self) -> &str {
        &self.s2s_addr
    }

    /// `name@DOMAIN`.
    pub fn jid(&self, name: &str) -> String {
        format!("{name}@{}", self.domain)
    }

    /// Starts the server again after [`stop`](Server::stop): same ports, same accounts.
    pub fn start_again(&mut self) {
        if self.process.is_none() {
            self.spawn();
        }
    }

    fn config(&self) -> String {
        let data = self.data.to_str().expect("UTF-8 temporary path");
        let component = match self.role {
            Role::Home => format!(
                "component_ports = {{ {} }}\ncomponent_interfaces = {{ \"127.0.0.1\" }}\n\
                 VirtualHost \"{VHOST}\"\nComponent \"{COMPONENT_DOMAIN}\"\n\tcomponent_secret = \"{}\"\n",
                self.component_port, self.secret
            ),
            Role::Remote => format!("component_ports = {{}}\nVirtualHost \"{REMOTE}\"\n"),
        };
        format!(
            r#"run_as_root = true
pidfile = "{data}/prosody.pid"
data_path = "{data}"
certificates = "{data}/certs"
log = {{ {{ levels = {{ min = "debug" }}, to = "file", filename = "{data}/prosody.log" }} }}
modules_enabled = {{ "roster"; "saslauth"; "disco"; "ping"; "posix"; "dialback" }}
modules_disabled = {{ "tls"; "s2s_auth_certs" }}
network_default_read_size = 65536
interfaces = {{ "127.0.0.1" }}
c2s_ports = {{ {c2s} }}
c2s_direct_tls_ports = {{}}
c2s_require_encryption = false
allow_unencrypted_plain_auth = true
authentication = "internal_plain"
storage = "internal"
-- Server-to-server on this server's own loopback address, dialback without TLS.
s2s_interfaces = {{ "{s2s}" }}
s2s_ports = {{ {S2S_PORT} }}
s2s_direct_tls_ports = {{}}
s2s_require_encryption = false
s2s_secure_auth = false
-- Names come from this server's own hosts file; everything else is NXDOMAIN, locally.
unbound = {{ hoststxt = "{data}/hosts"; resolvconf = false;
	options = {{ ["local-zone:"] = ". static"; ["local-zone"] = "localhost. static" }} }}
{component}"#,
            c2s = self.c2s_port,
            s2s = self.s2s_addr,
        )
    }

    fn log_path(&self) -> PathBuf {
        self.data.join("prosody.log")
    }

    fn spawn(&mut self) {
        let offset = fs::metadata(self.log_path()).map_or(0, |m| m.len());
        let out = fs::OpenOptions::new().create(true).append(true).open(self.data.join("prosody.out")).expect("out");
        let child = Command::new(BIN)
            .arg("-F")
            .arg("--config")
            .arg(self.data.join("prosody.cfg.lua"))
            .current_dir(&self.data)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("out"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"));
        // SIGKILLs Prosody if this test process dies without dropping the handle.
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(format!("while read -r _l; do :; done; kill -9 {} 2>/dev/null", child.id()))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok();
        self.process = Some((child, watchdog));
        let wanted = [
            format!("Activated service 'c2s' on [127.0.0.1]:{}", self.c2s_port),
            format!("Activated service 's2s' on [{}]:{S2S_PORT}", self.s2s_addr),
            // libunbound is up (so `unbound` is the resolver, not the machine's).
            "Setting up net.server event handling for ub_ctx".to_string(),
        ];
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let text = fs::read(self.log_path()).map(|b| String::from_utf8_lossy(&b[offset as usize..]).into_owned());
            let text = text.unwrap_or_default();
            if wanted.iter().all(|w| text.contains(w.as_str())) && self.role_ports_open() {
                return;
            }
            let exited = self.process.as_mut().is_some_and(|(c, _)| matches!(c.try_wait(), Ok(Some(_))));
            if text.contains("Using legacy DNS API") {
                self.kill();
                panic!(
                    "Prosody resolves without libunbound, so it would ask the machine's resolver: \
                     install the Debian package with `apt-get install lua-unbound`"
                );
            }
            if exited || Instant::now() > deadline || text.contains("Failed to open server port") {
                let tail = self.log_tail(30);
                self.kill();
                panic!("Prosody for {} did not start (s2s on {}:{S2S_PORT}):\n{tail}", self.domain, self.s2s_addr);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn role_ports_open(&self) -> bool {
        let open = |addr: &str| TcpStream::connect_timeout(&addr.parse().expect("addr"), Duration::from_millis(200));
        open(&format!("127.0.0.1:{}", self.c2s_port)).is_ok()
            && (self.role == Role::Remote || open(&format!("127.0.0.1:{}", self.component_port)).is_ok())
    }

    fn account_file(&self, name: &str) -> PathBuf {
        let enc = |s: &str| -> String {
            s.bytes()
                .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02x}") })
                .collect()
        };
        self.data.join(enc(self.domain)).join("accounts").join(format!("{}.dat", enc(name)))
    }
}

impl Server for FedServer {
    const NAME: &'static str = "prosody (federated)";

    fn start() -> Self {
        panic!("start a Federation, not one of its servers")
    }
    fn c2s_port(&self) -> u16 {
        self.c2s_port
    }
    fn component_port(&self) -> u16 {
        assert!(self.role == Role::Home, "only the home server carries the component");
        self.component_port
    }
    fn component_domain(&self) -> &'static str {
        COMPONENT_DOMAIN
    }
    fn vhost(&self) -> &'static str {
        self.domain
    }
    fn secret(&self) -> &str {
        &self.secret
    }
    fn data_dir(&self) -> &Path {
        &self.data
    }
    fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(self.log_path()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        format!("--- prosody.log of {} ---\n{}", self.domain, all[all.len().saturating_sub(lines)..].join("\n"))
    }
    fn create_user(&self, name: &str, password: &str) {
        let file = self.account_file(name);
        fs::create_dir_all(file.parent().expect("a parent")).expect("accounts/");
        assert!(!password.contains(['"', '\\']), "a plain password");
        fs::write(&file, format!("return {{\n\t[\"password\"] = \"{password}\";\n}};\n")).expect("an account");
        self.passwords.lock().unwrap().insert(name.to_string(), password.to_string());
    }
    fn delete_user(&self, name: &str) {
        let _ = fs::remove_file(self.account_file(name));
        self.passwords.lock().unwrap().remove(name);
    }
    fn password(&self, name: &str) -> String {
        self.passwords.lock().unwrap().get(name).cloned().unwrap_or_else(|| panic!("no user {name}"))
    }
    fn is_running(&mut self) -> bool {
        self.process.as_mut().is_some_and(|(c, _)| matches!(c.try_wait(), Ok(None)))
    }
    /// SIGTERM (Prosody closes its c2s and s2s streams), then waits for the exit; SIGKILL
    /// once the log says "Shutdown complete" (Prosody 0.12 lingers a second or two after).
    fn stop(&mut self) {
        let Some((mut child, watchdog)) = self.process.take() else { return };
        if let Some(mut w) = watchdog {
            let _ = w.kill();
            let _ = w.wait();
        }
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            let log = fs::read_to_string(self.log_path()).unwrap_or_default();
            if log.rsplit("Activated service 'c2s'").next().is_some_and(|t| t.contains("Shutdown complete")) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    fn kill(&mut self) {
        if let Some((mut child, watchdog)) = self.process.take() {
            if let Some(mut w) = watchdog {
                let _ = w.kill();
                let _ = w.wait();
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for FedServer {
    fn drop(&mut self) {
        self.kill();
        if std::env::var_os("SMARTFEEDS_KEEP_PROSODY").is_some()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("keeping the {} Prosody directory {}", self.domain, dir.keep().display());
        }
    }
}

/// The value of a Prometheus counter or gauge (summed over its labels) from smartfeeds'
/// `GET /metrics` on `127.0.0.1:port`.
pub fn metric(port: u16, name: &str) -> f64 {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("metrics on {port}: {e}"));
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").expect("a request");
    let mut body = String::new();
    tcp.read_to_string(&mut body).expect("an answer");
    body.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// A free port on 127.0.0.1 (for smartfeeds' `metrics.listen`).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}
