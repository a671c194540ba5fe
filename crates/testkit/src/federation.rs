//! Two real Prosody servers federated over server-to-server (s2s) on loopback, for the
//! federation tests: the **home** server (`localhost`, with the component `feeds.localhost`
//! that smartfeeds connects as) and a **remote** server (`remote.test`) whose users reach
//! the component only through their own server and the s2s link.
//!
//! ```text
//! let fed = Federation::start();
//! let feeds = Smartfeeds::start(&fed.home, TABLES);      // both are TestServer<Prosody>
//! let mut alice = fed.remote.login("alice").await;       // alice@remote.test
//! fed.remote.stop(); …; fed.remote.restart();            // the link is cut, then restored
//! ```
//!
//! Both are the harness's [`Prosody`] ([`Prosody::federated`]), with its process handling,
//! accounts and configuration template; [`S2s`] is what a federated one adds: the s2s
//! settings below in place of the template's "no server-to-server" lines, and for the
//! remote server its own virtual host instead of the template's hosts and components.
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
//! `SMARTFEEDS_KEEP_PROSODY=1` keeps both servers' directories (configs, logs, hosts files).
//!
//! Every server has `admin`, `bot`, `alice` and `bob` with the password `password`, on its
//! own domain ([`Server::vhost`](super::server::Server::vhost)).

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};

use super::server::{COMPONENT_DOMAIN, Prosody, TestServer, VHOST};

/// The remote server's domain.
pub const REMOTE: &str = "remote.test";
/// The s2s port, on each server's own loopback address.
pub const S2S_PORT: u16 = 5269;
/// The lines of `prosody/prosody.cfg.lua` that turn server-to-server off; [`S2s`] puts its
/// settings in their place.
pub const NO_S2S: &str = r#"-- No server-to-server: nothing listens on 5269, so several instances can run side by side.
-- (The federation test, tests/common/federation.rs, puts its s2s settings in place of
-- these lines.)
modules_disabled = { "s2s"; "s2s_auth_certs"; "dialback"; "tls" }
s2s_ports = {}
"#;
/// Where the template's hosts and components begin.
const HOSTS: &str = "\nVirtualHost \"localhost\"\n";

static PAIR: AtomicU8 = AtomicU8::new(0);

/// The two servers of one test; both are killed on drop.
pub struct Federation {
    /// `localhost`, carrying `feeds.localhost`.
    pub home: TestServer<Prosody>,
    /// `remote.test`.
    pub remote: TestServer<Prosody>,
}

impl Federation {
    /// Starts both servers on a fresh pair of loopback addresses.
    pub fn start() -> Federation {
        let n = PAIR.fetch_add(1, Ordering::Relaxed);
        let base = format!("127.{}.{n}", 100 + std::process::id() % 150);
        let (home_addr, remote_addr) = (format!("{base}.1"), format!("{base}.2"));
        let home = S2s { vhost: VHOST, addr: home_addr.clone(), hosts: format!("{remote_addr} {REMOTE}") };
        let remote = S2s { vhost: REMOTE, addr: remote_addr, hosts: format!("{home_addr} {COMPONENT_DOMAIN} {VHOST}") };
        Federation {
            home: TestServer::start_with(|data| Prosody::federated(data, home)),
            remote: TestServer::start_with(|data| Prosody::federated(data, remote)),
        }
    }
}

/// What a [`Prosody`] of a [`Federation`] adds to the harness's (see the module docs).
pub struct S2s {
    /// The domain of its users: `localhost`, with the template's hosts and components
    /// (`feeds.localhost`, …), or another, the only host then.
    pub vhost: &'static str,
    /// The loopback address its s2s port ([`S2S_PORT`]) listens on.
    pub addr: String,
    /// Its hosts file: `ADDRESS DOMAIN…` of the peer.
    pub hosts: String,
}

impl S2s {
    /// The rendered template `config` with server-to-server on, and the hosts file written
    /// next to it in `data`.
    pub fn configure(&self, config: String, data: &Path) -> Result<String, String> {
        let hosts = data.join("hosts");
        fs::write(&hosts, format!("{}\n", self.hosts)).map_err(|e| format!("{}: {e}", hosts.display()))?;
        let data = data.to_str().expect("checked UTF-8");
        let section = format!(
            r#"-- Server-to-server on this server's own loopback address, dialback without TLS.
modules_disabled = {{ "tls"; "s2s_auth_certs" }}
s2s_interfaces = {{ "{addr}" }}
s2s_ports = {{ {S2S_PORT} }}
s2s_direct_tls_ports = {{}}
s2s_require_encryption = false
s2s_secure_auth = false
-- Names come from this server's own hosts file; everything else is NXDOMAIN, locally.
unbound = {{ hoststxt = "{data}/hosts"; resolvconf = false;
	options = {{ ["local-zone:"] = ". static"; ["local-zone"] = "localhost. static" }} }}
"#,
            addr = self.addr,
        );
        let (Some(_), Some(hosts_at)) = (config.find(NO_S2S), config.find(HOSTS)) else {
            return Err(format!("prosody/prosody.cfg.lua no longer has the lines {NO_S2S:?} and {HOSTS:?} verbatim"));
        };
        let mut config = config;
        if self.vhost != VHOST {
            config.truncate(hosts_at + 1);
            config.push_str(&format!("-- The remote server: its own domain only.\nVirtualHost \"{}\"\n", self.vhost));
        }
        Ok(config.replacen(NO_S2S, &section, 1))
    }

    /// Whether the log since the start says s2s listens and libunbound is the resolver.
    pub fn says_ready(&self, text: &str) -> bool {
        text.contains(&format!("Activated service 's2s' on [{}]:{S2S_PORT}", self.addr))
            // libunbound is up (so `unbound` is the resolver, not the machine's).
            && text.contains("Setting up net.server event handling for ub_ctx")
    }

    /// Prosody without libunbound would ask the machine's resolver.
    pub fn start_failure(&self, text: &str) -> Option<String> {
        text.contains("Using legacy DNS API").then(|| {
            "Prosody resolves without libunbound, so it would ask the machine's resolver: \
             install the Debian package with `apt-get install lua-unbound`"
                .to_string()
        })
    }
}
