//! Libervia's command-line client against a test server: the backend (Debian
//! `libervia-backend`) on a private D-Bus session bus (`dbus-daemon --session`, Debian
//! `dbus`), its client `libervia-cli` (Debian `libervia-cli`), one profile logged in to the
//! server's c2s port as a test user. Everything lives in a temporary directory (HOME and
//! the XDG directories point there); the bus and the backend are killed on drop.
//!
//! Both programs are Python scripts run with Debian's own `/usr/bin/python3` (their
//! `env python3` line would take whichever `python3` comes first on PATH). The backend
//! keeps a cache of pubsub nodes that answers repeated reads itself; it is turned off
//! (`pubsub_cache_strategy = no_cache`) so that every read reaches the service. What the
//! command line does not expose (a MAM query, the RSM answer) is asked of the backend
//! through its D-Bus bridge, as Libervia's other front ends do.

use crate::process::Process;
use crate::server::installed;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const PYTHON: &str = "/usr/bin/python3";
const BUS_NAME: &str = "org.libervia.Libervia";
const BRIDGE_PATH: &str = "/org/libervia/Libervia/bridge";

/// A running Libervia backend with one connected profile.
pub struct Libervia {
    dir: tempfile::TempDir,
    bus: String,
    profile: String,
    cli: PathBuf,
    // Dropped in this order: the backend, then its bus.
    backend: Option<Process>,
    dbus: Option<Process>,
}

/// What a command printed and how it ended.
#[derive(Debug)]
pub struct Output {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Libervia {
    /// Starts the bus and the backend and connects a profile for `jid` (with `password`)
    /// to 127.0.0.1:`c2s_port`, without certificate checks (test servers have none worth
    /// checking). Panics, naming the Debian package, when a program is missing.
    pub fn start(c2s_port: u16, jid: &str, password: &str) -> Libervia {
        let need = |path: &str, name: &str, package: &str| {
            installed("SMARTFEEDS_NONE", path, name, package).unwrap_or_else(|e| panic!("{e}"))
        };
        need("/usr/bin/dbus-daemon", "dbus-daemon", "dbus");
        need("/usr/bin/libervia-backend", "Libervia's backend", "libervia-backend");
        let cli = need("/usr/bin/libervia-cli", "Libervia's command-line client", "libervia-cli");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = dir.path().join("home/.config/libervia");
        std::fs::create_dir_all(&config).expect("the config directory");
        std::fs::create_dir_all(dir.path().join("home/.local/share")).expect("the data directory");
        std::fs::create_dir_all(dir.path().join("home/.cache")).expect("the cache directory");
        std::fs::write(
            config.join("libervia.conf"),
            "[DEFAULT]\nlog_level = info\nlog_colors = false\npubsub_cache_strategy = no_cache\n",
        )
        .expect("the config written");
        let bus_path = dir.path().join("bus");
        let bus = format!("unix:path={}", bus_path.display());
        let mut dbus = Command::new("/usr/bin/dbus-daemon");
        dbus.args(["--session", "--nofork", "--nopidfile", &format!("--address={bus}")]);
        let dbus = Process::spawn(dbus, &dir.path().join("dbus.log")).unwrap_or_else(|e| panic!("dbus-daemon: {e}"));
        wait_until(Duration::from_secs(10), || bus_path.exists(), || "the D-Bus socket".into());
        let mut lv = Libervia { dir, bus, profile: "alice".into(), cli, backend: None, dbus: Some(dbus) };
        let log = lv.dir.path().join("backend.log");
        let mut backend = lv.command(PYTHON);
        backend.args(["/usr/bin/libervia-backend", "fg"]);
        lv.backend = Some(Process::spawn(backend, &log).unwrap_or_else(|e| panic!("libervia-backend: {e}")));
        wait_until(
            Duration::from_secs(60),
            || std::fs::read_to_string(&log).is_ok_and(|l| l.contains("Backend is ready")),
            || format!("Libervia's backend to be ready:\n{}", std::fs::read_to_string(&log).unwrap_or_default()),
        );
        let profile = lv.profile.clone();
        let port = c2s_port.to_string();
        for args in [
            vec!["profile", "create", "-j", jid, "-x", password, "-p", "", &profile],
            vec!["param", "set", "-p", &profile, "Connection", "Force server", "127.0.0.1"],
            vec!["param", "set", "-p", &profile, "Connection", "Force port", &port],
            vec!["param", "set", "-p", &profile, "Connection", "check_certificate", "false"],
            vec!["profile", "connect", "-p", &profile, "-c"],
        ] {
            let out = lv.li(&args);
            assert!(out.ok, "li {}: {}\n{}\n{}", args.join(" "), out.stderr, out.stdout, lv.log());
        }
        lv
    }

    /// A command with the private HOME, XDG directories and bus.
    fn command(&self, program: &str) -> Command {
        let home = self.dir.path().join("home");
        let mut c = Command::new(program);
        c.env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("DBUS_SESSION_BUS_ADDRESS", &self.bus);
        c
    }

    /// Runs `libervia-cli ARGS` (the profile is the caller's to name with `-p`).
    pub fn li(&self, args: &[&str]) -> Output {
        let mut c = self.command(PYTHON);
        c.arg(&self.cli).args(args);
        run(c)
    }

    /// `libervia-cli ARGS -p PROFILE`.
    pub fn li_as_user(&self, args: &[&str]) -> Output {
        let mut all = args.to_vec();
        all.extend(["-p", &self.profile]);
        self.li(&all)
    }

    /// Calls the backend's bridge method `psItemsGet` (what `li pubsub get` calls) with
    /// `extra` (Libervia's keys: `rsm_max`, `rsm_after`, `mam_start`, `order_by`, …): the
    /// JSON it answers (its `items` as XML text, and `rsm` when the service paged).
    pub fn items_get(&self, service: &str, node: &str, extra: &serde_json::Value) -> Result<serde_json::Value, String> {
        let mut c = self.command("/usr/bin/dbus-send");
        c.args([
            "--session",
            "--print-reply=literal",
            "--reply-timeout=30000",
            &format!("--dest={BUS_NAME}"),
            BRIDGE_PATH,
            &format!("{BUS_NAME}.plugin.psItemsGet"),
            &format!("string:{service}"),
            &format!("string:{node}"),
            "int32:-1",
            "array:string:",
            "string:",
            &format!("string:{extra}"),
            &format!("string:{}", self.profile),
        ]);
        let out = run(c);
        if !out.ok {
            return Err(format!("{}{}", out.stderr, out.stdout));
        }
        serde_json::from_str(out.stdout.trim()).map_err(|e| format!("{e}: {}", out.stdout))
    }

    /// The backend's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("backend.log")).unwrap_or_default()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Libervia {
    fn drop(&mut self) {
        self.backend.take();
        self.dbus.take();
    }
}

fn run(mut c: Command) -> Output {
    let program = c.get_program().to_string_lossy().to_string();
    let out = c.output().unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    Output {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool, what: impl Fn() -> String) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "waited {timeout:?} for {}", what());
        std::thread::sleep(Duration::from_millis(50));
    }
}
