//! The real XMPP servers the end-to-end tests run against, Prosody 0.12 ([`Prosody`]) and
//! ejabberd 23.01 ([`Ejabberd`]), each a private instance per test (or per test binary's
//! fixture) on free loopback ports in a temporary directory of its own.
//!
//! [`Server`] is what differs between the two (configuration files, command line, the log
//! lines that say "ready" or "port taken", accounts, a graceful stop); [`TestServer`] is the
//! rest, written once: free ports and the retry when one is taken, the readiness wait, the
//! watchdog, stop, kill and restart, the log tail in failure messages, clients and raw
//! components. A test names its server, or takes the one `SMARTFEEDS_TEST_SERVER` selects:
//!
//! ```text
//! let prosody = Prosody::start();                 // TestServer<Prosody>
//! let host = server::start_selected();            // TestServer (dyn Server): Prosody or ejabberd
//! let mut feeds = host.component().await;         // raw component as feeds.localhost
//! let mut alice = host.login("alice").await;      // alice@localhost/test-…
//! async fn scenario<S: Server>() { let server = S::start(); … }  // once for each server
//! ```
//!
//! [`EjabberdCluster`] is two ejabberd nodes clustered on this machine, each a [`TestServer`].
//!
//! Where the servers behave differently for a component, see the table in
//! `tests/harness.rs`.

pub mod ejabberd;
pub mod ejabberd_cluster;
pub mod prosody;
pub mod select;
pub mod test_server;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use minidom::Element;

pub use ejabberd::Ejabberd;
pub use ejabberd_cluster::EjabberdCluster;
pub use prosody::Prosody;
pub use select::{ENV, Kind, start_selected};

/// The domain of the servers' multicast service (XEP-0033), offered to `feeds.localhost`.
pub const MULTICAST_DOMAIN: &str = "multicast.localhost";
pub use test_server::TestServer;

use super::process::Process;

/// The virtual host users live on.
pub const VHOST: &str = "localhost";
/// The external component domain smartfeeds connects as.
pub const COMPONENT_DOMAIN: &str = "feeds.localhost";
/// The external component domain of the load tool (same port and secret).
pub const BENCH_DOMAIN: &str = "bench.localhost";
/// The server's own pubsub service (mod_pubsub), for comparisons.
pub const PUBSUB_DOMAIN: &str = "pubsub.localhost";
/// Users every instance starts with (as in `prosody/start.sh` and `ejabberd/start.sh`),
/// all with [`DEMO_PASSWORD`].
pub const DEMO_USERS: [&str; 4] = ["admin", "bot", "alice", "bob"];
/// The password of the demo users.
pub const DEMO_PASSWORD: &str = "password";

/// The server's program: the path in the environment variable `env`, else `default`. If
/// it is missing, the error names the Debian package that installs it.
pub fn installed(env: &str, default: &str, server: &str, package: &str) -> Result<std::path::PathBuf, String> {
    let path = std::env::var_os(env).map_or_else(|| default.into(), std::path::PathBuf::from);
    if path.exists() {
        return Ok(path);
    }
    Err(format!(
        "{server} is not installed ({} is missing): install the Debian package with `apt-get install {package}` \
         (or set {env})",
        path.display()
    ))
}

/// What [`TestServer`] gives a server's hooks: its directory, its ports and its secret.
pub struct Setup {
    /// The temporary directory: generated config, logs, data.
    pub data: std::path::PathBuf,
    /// The c2s port, the component port, then the server's [`extra_ports`](Server::extra_ports).
    pub ports: Vec<u16>,
    /// The component secret (unique per instance).
    pub secret: String,
}

impl Setup {
    pub fn c2s_port(&self) -> u16 {
        self.ports[0]
    }

    pub fn component_port(&self) -> u16 {
        self.ports[1]
    }
}

/// What differs between the XMPP servers; everything else is [`TestServer`]'s.
pub trait Server: Send + Sync + 'static {
    /// Checks that the server is installed (the error names the Debian package) and
    /// prepares the fresh directory `data`.
    fn new(data: &Path) -> Result<Self, String>
    where
        Self: Sized;

    /// Which server this is.
    fn kind(&self) -> Kind;

    /// `"prosody"` or `"ejabberd"`, for messages.
    fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// The virtual host its users live on: [`VHOST`] (the other server of a federation
    /// test has a domain of its own).
    fn vhost(&self) -> &'static str {
        VHOST
    }

    /// Starts a fresh instance: free ports, new temporary directory, the demo users.
    /// Panics with the server's log tail if it does not come up.
    fn start() -> TestServer<Self>
    where
        Self: Sized,
    {
        TestServer::start()
    }

    /// How many ports it listens on besides c2s and component.
    fn extra_ports(&self) -> usize {
        0
    }

    /// Writes the configuration for `setup` (again before each restart).
    fn write_config(&mut self, setup: &Setup) -> Result<(), String>;

    /// The command that runs the server in the foreground.
    fn command(&self, setup: &Setup) -> Command;

    /// The server's own log file.
    fn log_path(&self, data: &Path) -> std::path::PathBuf;

    /// The file its stdout and stderr are appended to.
    fn output_path(&self, data: &Path) -> std::path::PathBuf {
        data.join(format!("{}.out", self.name()))
    }

    /// Generous: parallel test processes share the CPUs.
    fn ready_timeout(&self) -> Duration {
        Duration::from_secs(15)
    }

    /// How long a graceful stop may take before the server is killed.
    fn stop_timeout(&self) -> Duration {
        Duration::from_secs(10)
    }

    /// The process that does the work among the spawned one (`root`) and its descendants,
    /// once it exists.
    fn main_pid(&self, root: u32) -> Option<u32> {
        Some(root)
    }

    /// The line of the log and output written since the start that says a port was taken
    /// between picking it and binding it (then fresh ports are tried).
    fn port_taken<'a>(&self, text: &'a str) -> Option<&'a str>;

    /// Why the server, by the log and output written since the start, will not work as
    /// configured (then the start fails at once with this reason); `None` by default.
    fn start_failure(&self, _text: &str) -> Option<String> {
        None
    }

    /// Whether the log and output written since the start say the server is ready.
    fn says_ready(&self, text: &str, setup: &Setup) -> bool;

    /// The ports that must accept connections before the server counts as ready.
    fn ready_ports(&self, setup: &Setup) -> Vec<u16> {
        vec![setup.c2s_port(), setup.component_port()]
    }

    /// Creates or resets an account; `running` tells whether the server runs now.
    fn store_account(&self, setup: &Setup, running: bool, name: &str, password: &str) -> Result<(), String>;

    /// Deletes an account; `running` tells whether the server runs now.
    fn remove_account(&self, setup: &Setup, running: bool, name: &str) -> Result<(), String>;

    /// Work once the server is ready, with every account known so far.
    fn after_start(&self, _accounts: &[(String, String)]) -> Result<(), String> {
        Ok(())
    }

    /// Asks the running server to stop gracefully; `false` if it cannot be asked (then it
    /// is killed).
    fn request_stop(&self, process: &Process) -> bool {
        process.signal("-TERM");
        true
    }

    /// Whether the log written since the stop request says the stop is complete, though the
    /// process still runs (then it is killed to save the time).
    fn stop_complete(&self, _log: &str) -> bool {
        false
    }

    /// A few words on this instance for failure messages (`"node …, "`), empty by default.
    fn describe(&self) -> String {
        String::new()
    }

    /// Withdraws `feeds.localhost`'s right to the multicast service (XEP-0033) of the
    /// running server, whose process is `process`, so the service refuses its next
    /// messages: a refusal in the middle of a run. Returns once the server took the change.
    fn refuse_multicast(&self, setup: &Setup, process: &Process) -> Result<(), String>;

    /// What a client gets for an iq to the component's domain while no component is
    /// connected (XEP-0114 does not say what a server answers).
    fn component_down(&self) -> ComponentDown;

    /// The stanza error condition of [`component_down`](Self::component_down).
    fn component_down_condition(&self) -> &'static str {
        self.component_down().condition
    }

    /// Whether `reply` is exactly this server's answer for the component while it is not
    /// connected: an error from the component's domain, with the condition, the type and
    /// the extra child this server writes.
    fn is_component_down_error(&self, reply: &Element) -> bool {
        let down = self.component_down();
        let Some(error) = reply.get_child("error", crate::xml::NS_CLIENT) else { return false };
        crate::xml::stanza_type(reply) == "error"
            && reply.attr("from") == Some(COMPONENT_DOMAIN)
            && crate::xml::error_condition(reply).as_deref() == Some(down.condition)
            && error.attr("type") == Some(down.kind)
            && down.marker.is_none_or(|(name, ns)| error.has_child(name, ns))
    }
}

/// A server's error for an iq to a component that is not connected.
pub struct ComponentDown {
    /// The defined condition.
    pub condition: &'static str,
    /// The error's `type`.
    pub kind: &'static str,
    /// A child of `<error/>` the server adds, as (name, namespace).
    pub marker: Option<(&'static str, &'static str)>,
}
