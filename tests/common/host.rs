//! The XMPP server the end-to-end tests run against, chosen at run time for the whole suite
//! by one switch, the environment variable `SMARTFEEDS_TEST_SERVER`:
//!
//! | value | server |
//! | --- | --- |
//! | `prosody` (or unset, or empty) | Prosody 0.12 ([`Prosody`]) |
//! | `ejabberd` | ejabberd 23.01 ([`Ejabberd`]) |
//!
//! Any other value panics (a typo must not silently test the default). The e2e tests use
//! [`Host`] wherever they need "the server"; `tests/harness.rs` and
//! `tests/harness_ejabberd.rs` stay server-specific.
//!
//! ```ignore
//! let host = Host::start();                        // Prosody or ejabberd, as selected
//! let feeds = Smartfeeds::start(&host, TABLES);    // the real smartfeeds, connected to it
//! let mut alice = host.login("alice").await;
//! if host.is_ejabberd() { … }                      // where the two legitimately differ
//! ```
//!
//! [`Host`] has the inherent methods of both servers (same names, same meaning) and
//! implements [`Server`], so helpers written for `&impl Server` take it too. Where the
//! servers behave differently, see [`HostKind`] and the table in `tests/harness_ejabberd.rs`.

use std::fmt;
use std::future::Future;
use std::path::Path;

use super::client::Client;
use super::component::Component;
use super::ejabberd::Ejabberd;
use super::prosody::{COMPONENT_DOMAIN, Prosody};
use super::server::Server;
use super::xml::{NS_CLIENT, error_condition, stanza_type};
use minidom::Element;

/// The environment variable that selects the server.
pub const ENV: &str = "SMARTFEEDS_TEST_SERVER";
/// Prosody's namespace for "the component is not connected".
pub const PROSODY_COMPONENT_NS: &str = "xmpp:prosody.im/protocol/component";

/// Which server a [`Host`] is (or [`HostKind::from_env`] selects).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostKind {
    Prosody,
    Ejabberd,
}

impl HostKind {
    /// The server `SMARTFEEDS_TEST_SERVER` selects: `prosody` (the default) or `ejabberd`.
    /// Panics on any other value.
    pub fn from_env() -> HostKind {
        match std::env::var(ENV) {
            Err(std::env::VarError::NotPresent) => HostKind::Prosody,
            Ok(value) => HostKind::parse(&value).unwrap_or_else(|| {
                panic!("{ENV}={value:?} is not a server the tests know: use `prosody` (the default) or `ejabberd`")
            }),
            Err(e) => panic!("{ENV} is not usable: {e}"),
        }
    }

    /// `prosody` / `ejabberd` (case-insensitive, surrounding blanks ignored); empty is Prosody.
    pub fn parse(value: &str) -> Option<HostKind> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "prosody" => Some(HostKind::Prosody),
            "ejabberd" => Some(HostKind::Ejabberd),
            _ => None,
        }
    }

    /// Whether `reply` is this server's own answer for the component while it is not
    /// connected, exactly as each sends it (XEP-0114 does not say what a server answers):
    ///
    /// - Prosody 0.12: from the component's domain, `<error type="wait">` with
    ///   `<remote-server-timeout/>`, the text "Component unavailable" and
    ///   `<not-connected xmlns="xmpp:prosody.im/protocol/component"/>`;
    /// - ejabberd 23.01: from the component's domain, `<error type="cancel">` with
    ///   `<remote-server-not-found/>` and a text like "DNS lookup failed: enoname" (it has no
    ///   route for the domain and tries server-to-server); the request's payload is echoed.
    pub fn is_component_down_error(self, reply: &Element) -> bool {
        let Some(error) = reply.get_child("error", NS_CLIENT) else { return false };
        let common = stanza_type(reply) == "error"
            && reply.attr("from") == Some(COMPONENT_DOMAIN)
            && error_condition(reply).as_deref() == Some(self.component_down_condition());
        common
            && match self {
                HostKind::Prosody => {
                    error.attr("type") == Some("wait") && error.has_child("not-connected", PROSODY_COMPONENT_NS)
                }
                HostKind::Ejabberd => error.attr("type") == Some("cancel"),
            }
    }

    /// `"prosody"` or `"ejabberd"`.
    pub fn name(self) -> &'static str {
        match self {
            HostKind::Prosody => Prosody::NAME,
            HostKind::Ejabberd => Ejabberd::NAME,
        }
    }

    /// The stanza error condition a client gets for an iq to the component's domain while
    /// no component is connected. Prosody 0.12 knows the component and answers
    /// `remote-server-timeout` ("Component unavailable"); ejabberd 23.01 has no route for
    /// the domain, tries server-to-server and answers `remote-server-not-found` at once.
    pub fn component_down_condition(self) -> &'static str {
        match self {
            HostKind::Prosody => "remote-server-timeout",
            HostKind::Ejabberd => "remote-server-not-found",
        }
    }
}

impl fmt::Display for HostKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A private XMPP server for one test (or one test binary's fixture): the one
/// `SMARTFEEDS_TEST_SERVER` selects. Killed on drop. See the module docs.
pub enum Host {
    Prosody(Prosody),
    Ejabberd(Ejabberd),
}

/// Calls the same method on whichever server this is.
macro_rules! dispatch {
    ($self:expr, $server:ident => $call:expr) => {
        match $self {
            Host::Prosody($server) => $call,
            Host::Ejabberd($server) => $call,
        }
    };
}

impl Host {
    /// Starts a fresh instance of the selected server (see [`HostKind::from_env`]): free
    /// ports, new temporary directory, the demo users. Panics with the server's log tail if
    /// it does not come up.
    pub fn start() -> Host {
        Self::start_kind(HostKind::from_env())
    }

    /// Starts a fresh instance of `kind`, whatever the environment says.
    pub fn start_kind(kind: HostKind) -> Host {
        match kind {
            HostKind::Prosody => Host::Prosody(Prosody::start()),
            HostKind::Ejabberd => Host::Ejabberd(Ejabberd::start()),
        }
    }

    /// Which server this is.
    pub fn kind(&self) -> HostKind {
        match self {
            Host::Prosody(_) => HostKind::Prosody,
            Host::Ejabberd(_) => HostKind::Ejabberd,
        }
    }

    /// `"prosody"` or `"ejabberd"`.
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    pub fn is_prosody(&self) -> bool {
        self.kind() == HostKind::Prosody
    }

    pub fn is_ejabberd(&self) -> bool {
        self.kind() == HostKind::Ejabberd
    }

    /// The Prosody, if this is one (for Prosody-only helpers such as its log path).
    pub fn as_prosody(&self) -> Option<&Prosody> {
        match self {
            Host::Prosody(p) => Some(p),
            Host::Ejabberd(_) => None,
        }
    }

    /// The ejabberd, if this is one (for `ctl`, `api`, …).
    pub fn as_ejabberd(&self) -> Option<&Ejabberd> {
        match self {
            Host::Ejabberd(e) => Some(e),
            Host::Prosody(_) => None,
        }
    }

    /// See [`HostKind::component_down_condition`].
    pub fn component_down_condition(&self) -> &'static str {
        self.kind().component_down_condition()
    }

    /// See [`HostKind::is_component_down_error`].
    pub fn is_component_down_error(&self, reply: &Element) -> bool {
        self.kind().is_component_down_error(reply)
    }

    /// The client-to-server port on 127.0.0.1.
    pub fn c2s_port(&self) -> u16 {
        dispatch!(self, s => s.c2s_port())
    }

    /// The XEP-0114 component port on 127.0.0.1.
    pub fn component_port(&self) -> u16 {
        dispatch!(self, s => s.component_port())
    }

    /// `127.0.0.1:PORT` of the component port, as smartfeeds' `[component] server` wants it.
    pub fn component_addr(&self) -> String {
        dispatch!(self, s => s.component_addr())
    }

    /// The component domain, `feeds.localhost`.
    pub fn component_domain(&self) -> &'static str {
        dispatch!(self, s => s.component_domain())
    }

    /// The virtual host, `localhost`.
    pub fn vhost(&self) -> &'static str {
        dispatch!(self, s => s.vhost())
    }

    /// The component secret (unique per instance).
    pub fn secret(&self) -> &str {
        dispatch!(self, s => s.secret())
    }

    /// The server's temporary directory (config, logs, data); a good place for a test's
    /// other files.
    pub fn data_dir(&self) -> &Path {
        dispatch!(self, s => s.data_dir())
    }

    /// The server's log file.
    pub fn log_path(&self) -> std::path::PathBuf {
        dispatch!(self, s => s.log_path())
    }

    /// The last `lines` lines of the server's log and of its stdout/stderr.
    pub fn log_tail(&self, lines: usize) -> String {
        dispatch!(self, s => s.log_tail(lines))
    }

    /// The pid of the running server (for ejabberd: its Erlang VM).
    pub fn pid(&self) -> Option<u32> {
        dispatch!(self, s => s.pid())
    }

    /// Whether the server process is running (it may have exited on its own).
    pub fn is_running(&mut self) -> bool {
        dispatch!(self, s => s.is_running())
    }

    /// Creates (or resets the password of) `name@localhost`; works while the server runs.
    pub fn create_user(&self, name: &str, password: &str) {
        dispatch!(self, s => s.create_user(name, password))
    }

    /// Deletes the account `name@localhost`; works while the server runs. (Prosody keeps a
    /// session of the deleted account up; ejabberd closes it.)
    pub fn delete_user(&self, name: &str) {
        dispatch!(self, s => s.delete_user(name))
    }

    /// The password of a user made by [`create_user`](Self::create_user) (or a demo user).
    pub fn password(&self, name: &str) -> String {
        dispatch!(self, s => s.password(name))
    }

    /// Logs a known user in: `host.login("alice").await`.
    pub async fn login(&self, name: &str) -> Client {
        Client::connect(self.c2s_port(), &format!("{name}@{}", self.vhost()), &self.password(name)).await
    }

    /// [`login`](Self::login) returning a future that borrows neither the host nor the name
    /// (for `join_all` over many logins).
    pub fn login_owned(&self, name: String) -> impl Future<Output = Client> + Send + 'static {
        let (port, jid, password) = (self.c2s_port(), format!("{name}@{}", self.vhost()), self.password(&name));
        async move { Client::connect(port, &jid, &password).await }
    }

    /// Connects a raw component as `feeds.localhost` with this instance's secret.
    pub async fn component(&self) -> Component {
        self.component_as(self.component_domain()).await
    }

    /// Connects a raw component as `domain`.
    pub async fn component_as(&self, domain: &str) -> Component {
        Component::connect(self.component_port(), domain, self.secret()).await
    }

    /// Stops the server gracefully (clients get `<system-shutdown/>`, components see their
    /// connection closed). No-op when not running.
    pub fn stop(&mut self) {
        dispatch!(self, s => s.stop())
    }

    /// Kills the server with SIGKILL (a crash). No-op when not running.
    pub fn kill(&mut self) {
        dispatch!(self, s => s.kill())
    }

    /// Stops (if running) and starts again on the same ports with the same data.
    pub fn restart(&mut self) {
        dispatch!(self, s => s.restart())
    }
}

impl fmt::Debug for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Host({}, c2s {}, component {})", self.name(), self.c2s_port(), self.component_port())
    }
}

impl Server for Host {
    const NAME: &'static str = "host";

    fn start() -> Self {
        Host::start()
    }
    fn c2s_port(&self) -> u16 {
        Host::c2s_port(self)
    }
    fn component_port(&self) -> u16 {
        Host::component_port(self)
    }
    fn component_domain(&self) -> &'static str {
        Host::component_domain(self)
    }
    fn vhost(&self) -> &'static str {
        Host::vhost(self)
    }
    fn secret(&self) -> &str {
        Host::secret(self)
    }
    fn data_dir(&self) -> &Path {
        Host::data_dir(self)
    }
    fn log_tail(&self, lines: usize) -> String {
        Host::log_tail(self, lines)
    }
    fn create_user(&self, name: &str, password: &str) {
        Host::create_user(self, name, password)
    }
    fn delete_user(&self, name: &str) {
        Host::delete_user(self, name)
    }
    fn password(&self, name: &str) -> String {
        Host::password(self, name)
    }
    fn is_running(&mut self) -> bool {
        Host::is_running(self)
    }
    fn stop(&mut self) {
        Host::stop(self)
    }
    fn kill(&mut self) {
        Host::kill(self)
    }
    fn restart(&mut self) {
        Host::restart(self)
    }
}
