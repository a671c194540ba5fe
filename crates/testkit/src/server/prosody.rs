//! Prosody (Debian package `prosody`, 0.12) as a [`Server`].
//!
//! The configuration is `prosody/prosody.cfg.lua` (compiled in with `include_str!`) with its
//! `@PLACEHOLDERS@` filled in — the same file `prosody/start.sh` uses for the demo. Accounts
//! use `internal_plain`, so a user is one small Lua file written here; no `prosodyctl`.
//!
//! Ready: Prosody's log says "Activated service 'c2s' on [127.0.0.1]:PORT" (and the same for
//! 'component'). A port taken in between: it logs "Failed to open server port" and keeps
//! running without it. Stop: SIGTERM; Prosody 0.12's event loop lingers 1–2 s after its
//! shutdown work is done (it retries closing on a 1 s timer), so once the log says
//! "Shutdown complete" (sessions closed, storage flushed, pid file removed) it is killed to
//! save that time.
//!
//! Environment: `SMARTFEEDS_PROSODY_BIN` (default `/usr/bin/prosody`),
//! `SMARTFEEDS_PROSODY_LOG_LEVEL` (`debug` or `info`; default `info`, always `debug` for a
//! federated one),
//! `SMARTFEEDS_KEEP_PROSODY=1` keeps the temporary directory and prints where it is.
//!
//! [`Prosody::federated`] is the same server with server-to-server on: one of the two of a
//! federation test, with the settings of [`S2s`] ([`federation`](crate::federation)).
//!
//! [`Prosody::following`] adds Prosody's own WebSub subscriber, `mod_pubsub_feeds` (Debian
//! `prosody-modules`), on a pubsub service of its own, [`FOLLOWER`]: each of its nodes
//! follows a feed URL, fetched once, then pushed by the feed's hub to the callback on
//! Prosody's HTTP server (a free loopback port).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{COMPONENT_DOMAIN, ComponentDown, Kind, Server, Setup, VHOST, installed};
use crate::federation::S2s;
use crate::logs;
use crate::process::{Process, free_port};

/// The configuration template, `prosody/prosody.cfg.lua`.
pub const CONFIG_TEMPLATE: &str = include_str!("../../../../prosody/prosody.cfg.lua");
/// The repo's `prosody/` directory, where `mod_component_multicast.lua` lives (the
/// template's `plugin_paths`).
pub const PLUGIN_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../prosody");
/// The variable `prosody/prosody.cfg.lua` reads: `off` leaves the multicast service out.
pub const MULTICAST_ENV: &str = "SMARTFEEDS_PROSODY_MULTICAST";
/// Prosody's namespace for "the component is not connected".
pub const COMPONENT_NS: &str = "xmpp:prosody.im/protocol/component";
/// The pubsub service of [`Prosody::following`], whose nodes follow feeds.
pub const FOLLOWER: &str = "follower.localhost";
/// Where Debian's `prosody-modules` puts `mod_pubsub_feeds`.
const PUBSUB_FEEDS: &str = "/usr/lib/prosody/modules/mod_pubsub_feeds/mod_pubsub_feeds.lua";
/// The line of the template before which global settings go (after it, a host's).
const FIRST_HOST: &str = "\nVirtualHost \"localhost\"\n";

/// Prosody 0.12; see the module docs.
pub struct Prosody {
    bin: PathBuf,
    /// Server-to-server, for a federation test; none by default.
    s2s: Option<S2s>,
    /// Whether the multicast service is loaded (`SMARTFEEDS_PROSODY_MULTICAST`).
    multicast: bool,
    /// `mod_pubsub_feeds` on [`FOLLOWER`]; none by default.
    follows: Option<Follows>,
}

/// The settings of [`Prosody::following`].
struct Follows {
    /// Node → feed URL.
    feeds: Vec<(String, String)>,
    /// Where `mod_pubsub_feeds` lives (its `mod_pubsub_feeds/` directory's parent).
    modules: PathBuf,
    /// Prosody's HTTP port, for the hub's callbacks; chosen with the configuration.
    http_port: u16,
}

impl Follows {
    /// The global HTTP settings, put before the first host.
    fn globals(&self) -> String {
        format!(
            "\n-- Prosody's HTTP server, for the WebSub callbacks of {FOLLOWER}.\n\
             http_interfaces = {{ \"127.0.0.1\" }}\nhttp_ports = {{ {} }}\nhttps_ports = {{}}\n",
            self.http_port
        )
    }

    /// `config` with `mod_pubsub_feeds`' directory added to the template's plugin paths.
    fn plugin_paths(&self, config: String) -> Result<String, String> {
        let ours = format!("plugin_paths = {{ \"{PLUGIN_DIR}\" }}");
        if !config.contains(&ours) {
            return Err(format!("prosody/prosody.cfg.lua no longer says {ours:?}"));
        }
        let modules = lua_string(self.modules.to_str().ok_or("the modules directory is not UTF-8")?);
        Ok(config.replacen(&ours, &format!("plugin_paths = {{ \"{PLUGIN_DIR}\", {modules} }}"), 1))
    }

    /// The component whose nodes follow the feeds. `mod_pubsub_feeds` fetches each feed
    /// once (then only every `feed_pull_interval` minutes, here far beyond any test), finds
    /// its `<link rel="hub">` and subscribes with a secret of its own; the callback URL is
    /// built from `http_host`.
    fn component(&self) -> String {
        let feeds: String = self
            .feeds
            .iter()
            .map(|(node, url)| format!("\t\t[{}] = {};\n", lua_string(node), lua_string(url)))
            .collect();
        format!(
            "\n-- Nodes that follow feeds through their WebSub hubs (Debian prosody-modules).\n\
             Component \"{FOLLOWER}\" \"pubsub\"\n\tmodules_enabled = {{ \"pubsub_feeds\" }}\n\
             \tuse_pubsubhubub = true\n\tfeed_pull_interval = 600\n\thttp_host = \"127.0.0.1\"\n\
             \tfeeds = {{\n{feeds}\t}}\n"
        )
    }
}

impl Prosody {
    /// A Prosody of a federation test, for [`TestServer::start_with`](super::TestServer::start_with).
    pub fn federated(data: &Path, s2s: S2s) -> Result<Prosody, String> {
        Ok(Prosody { s2s: Some(s2s), ..Prosody::new(data)? })
    }

    /// A Prosody whose pubsub service [`FOLLOWER`] follows `feeds` (node, feed URL) with
    /// `mod_pubsub_feeds`; an error naming `prosody-modules` if that is not installed.
    pub fn following(data: &Path, feeds: &[(&str, &str)]) -> Result<Prosody, String> {
        let module = installed(
            "SMARTFEEDS_PROSODY_PUBSUB_FEEDS",
            PUBSUB_FEEDS,
            "Prosody's mod_pubsub_feeds",
            "prosody-modules",
        )?;
        let modules = module.parent().and_then(Path::parent).ok_or("mod_pubsub_feeds has no modules directory")?;
        let feeds = feeds.iter().map(|(n, u)| (n.to_string(), u.to_string())).collect();
        let follows = Follows { feeds, modules: modules.to_path_buf(), http_port: 0 };
        Ok(Prosody { follows: Some(follows), ..Prosody::new(data)? })
    }

    /// A Prosody without the multicast service (`SMARTFEEDS_PROSODY_MULTICAST=off`).
    pub fn without_multicast(data: &Path) -> Result<Prosody, String> {
        Ok(Prosody { multicast: false, ..Prosody::new(data)? })
    }

    /// Whether it carries the template's hosts and components (`feeds.localhost`, …).
    fn carries_components(&self) -> bool {
        self.vhost() == VHOST
    }
}

impl Server for Prosody {
    fn new(data: &Path) -> Result<Self, String> {
        let bin = installed("SMARTFEEDS_PROSODY_BIN", "/usr/bin/prosody", "Prosody", "prosody")?;
        let data_str = data.to_str().ok_or("temporary directory path is not UTF-8")?;
        if data_str.contains(['"', '\\', '\n']) {
            return Err(format!("temporary directory path {data_str:?} cannot go in a Lua string"));
        }
        fs::create_dir_all(data.join("certs")).map_err(|e| e.to_string())?;
        Ok(Prosody { bin, s2s: None, multicast: true, follows: None })
    }

    fn kind(&self) -> Kind {
        Kind::Prosody
    }

    fn vhost(&self) -> &'static str {
        self.s2s.as_ref().map_or(VHOST, |s2s| s2s.vhost)
    }

    fn write_config(&mut self, setup: &Setup) -> Result<(), String> {
        let level = match std::env::var("SMARTFEEDS_PROSODY_LOG_LEVEL").as_deref() {
            Ok("debug") => "debug",
            _ if self.s2s.is_some() => "debug", // a federated one's readiness needs unbound's debug line
            _ => "info",                        // readiness detection needs the info lines
        };
        let data = setup.data.to_str().expect("checked UTF-8");
        let mut config = render_config(setup.c2s_port(), setup.component_port(), data, &setup.secret, level)?;
        if let Some(s2s) = &self.s2s {
            config = s2s.configure(config, &setup.data)?;
        }
        if let Some(follows) = &mut self.follows {
            // A fresh port each time: the harness writes the configuration again after a
            // port was taken.
            follows.http_port = free_port();
            if !config.contains(FIRST_HOST) {
                return Err(format!("prosody/prosody.cfg.lua no longer has the line {FIRST_HOST:?} verbatim"));
            }
            config = follows.plugin_paths(config)?;
            config = config.replacen(FIRST_HOST, &format!("{}{FIRST_HOST}", follows.globals()), 1);
            config.push_str(&follows.component());
        }
        fs::write(config_path(&setup.data), config).map_err(|e| format!("cannot write the Prosody config: {e}"))
    }

    fn command(&self, setup: &Setup) -> Command {
        let mut command = Command::new(&self.bin);
        command.arg("-F").arg("--config").arg(config_path(&setup.data)).current_dir(&setup.data);
        match self.multicast {
            true => command.env_remove(MULTICAST_ENV),
            false => command.env(MULTICAST_ENV, "off"),
        };
        command
    }

    fn log_path(&self, data: &Path) -> PathBuf {
        data.join("prosody.log")
    }

    fn port_taken<'a>(&self, text: &'a str) -> Option<&'a str> {
        text.lines().find(|l| l.contains("Failed to open server port"))
    }

    fn start_failure(&self, text: &str) -> Option<String> {
        self.s2s.as_ref().and_then(|s2s| s2s.start_failure(text))
    }

    fn says_ready(&self, text: &str, setup: &Setup) -> bool {
        let c2s = format!("Activated service 'c2s' on [127.0.0.1]:{}", setup.c2s_port());
        let component = format!("Activated service 'component' on [127.0.0.1]:{}", setup.component_port());
        let http = |f: &Follows| format!("Activated service 'http' on [127.0.0.1]:{}", f.http_port);
        text.contains(&c2s)
            && (!self.carries_components() || text.contains(&component))
            && self.s2s.as_ref().is_none_or(|s2s| s2s.says_ready(text))
            && self.follows.as_ref().is_none_or(|f| text.contains(&http(f)))
    }

    /// The component port only where there are components (the template's hosts); the HTTP
    /// port where feeds are followed.
    fn ready_ports(&self, setup: &Setup) -> Vec<u16> {
        let mut ports = if self.carries_components() {
            vec![setup.c2s_port(), setup.component_port()]
        } else {
            vec![setup.c2s_port()]
        };
        ports.extend(self.follows.as_ref().map(|f| f.http_port));
        ports
    }

    fn store_account(&self, setup: &Setup, _running: bool, name: &str, password: &str) -> Result<(), String> {
        let dir = setup.data.join(encode_path(self.vhost())).join("accounts");
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let file = dir.join(format!("{}.dat", encode_path(name)));
        let tmp = dir.join(format!(".{}.tmp", encode_path(name)));
        let body = format!("return {{\n\t[\"password\"] = {};\n}};\n", lua_string(password));
        fs::write(&tmp, body).and_then(|()| fs::rename(&tmp, &file)).map_err(|e| format!("{}: {e}", file.display()))
    }

    /// Removes the account's file, as `prosodyctl deluser` would; a session it has stays up.
    fn remove_account(&self, setup: &Setup, _running: bool, name: &str) -> Result<(), String> {
        let file =
            setup.data.join(encode_path(self.vhost())).join("accounts").join(format!("{}.dat", encode_path(name)));
        match fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("{}: {e}", file.display())),
            _ => Ok(()),
        }
    }

    fn stop_complete(&self, log: &str) -> bool {
        log.contains("Shutdown complete")
    }

    fn describe(&self) -> String {
        self.s2s.as_ref().map_or_else(String::new, |s2s| format!("{} with s2s on {}, ", s2s.vhost, s2s.addr))
    }

    /// Empties `multicast_senders` in the configuration file and has Prosody reload it
    /// (SIGHUP); our module reads its options again then, and logs them.
    fn refuse_multicast(&self, setup: &Setup, process: &Process) -> Result<(), String> {
        let path = config_path(&setup.data);
        let config = fs::read_to_string(&path).map_err(|e| e.to_string())?;
        let granted = format!("multicast_senders = {{ \"{COMPONENT_DOMAIN}\" }}");
        if !config.contains(&granted) {
            return Err(format!("{} does not grant multicast with `{granted}`", path.display()));
        }
        fs::write(&path, config.replace(&granted, "multicast_senders = { }")).map_err(|e| e.to_string())?;
        let log = self.log_path(&setup.data);
        let offset = logs::offset(&log);
        process.signal("-HUP");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !logs::read_from(&log, offset).contains("multicast offered to: ") {
            if std::time::Instant::now() > deadline {
                return Err("Prosody did not reload the multicast options within 10 s".into());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Ok(())
    }

    /// Prosody 0.12 knows the component and answers `<error type="wait">` with
    /// `<remote-server-timeout/>`, the text "Component unavailable" and
    /// `<not-connected xmlns="xmpp:prosody.im/protocol/component"/>`.
    fn component_down(&self) -> ComponentDown {
        ComponentDown {
            condition: "remote-server-timeout",
            kind: "wait",
            marker: Some(("not-connected", COMPONENT_NS)),
        }
    }
}

fn config_path(data: &Path) -> PathBuf {
    data.join("prosody.cfg.lua")
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
        .replace("@PLUGIN_DIR@", PLUGIN_DIR);
    no_leftover(config, "--", "prosody/prosody.cfg.lua")
}

/// `config`, or an error naming the first `@PLACEHOLDER@` left in it (outside lines that
/// start with `comment`).
pub fn no_leftover(config: String, comment: &str, file: &str) -> Result<String, String> {
    let leftover = config.lines().filter(|l| !l.trim_start().starts_with(comment)).find_map(|line| {
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
