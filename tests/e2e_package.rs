//! The Debian package, end to end, as an administrator meets it: `scripts/package.sh` builds
//! it (cargo-deb), `dpkg -i` installs it, the installed binary answers
//! `--version` and accepts the installed configuration as shipped, then runs as the
//! `smartfeeds` system user against a private Prosody with a copy of that configuration (the
//! test's component domain, component port and HTTP port; the secret in SMARTFEEDS_SECRET, as
//! systemd passes it from secret.env) and serves a page over HTTP. `apt-get remove` keeps the
//! configuration, the data and the user; `apt-get purge` leaves the machine as it was.
//!
//! It needs root, dpkg and apt-get (CI runs `scripts/test.sh` as root on Debian) and fails
//! saying so when they are missing. It installs a package system-wide, so it refuses to start
//! when anything of smartfeeds is installed already, purges what it installed even when it
//! fails.
//!
//! The package is made from the test build's binary (`cargo deb --profile dev`, which reuses
//! what the other tests compiled and strips it), not from a release build of its own: what
//! is tested here is the packaging (files, maintainer scripts, user, unit, conffile), which
//! is the same for every profile, and a release build would cost the suite minutes of both
//! cores. `scripts/package.sh` without arguments builds the release package users install.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use testkit::process::{Process, free_port};
use testkit::pubsub::{entry, publish_iq};
use testkit::server::{COMPONENT_DOMAIN, DEMO_PASSWORD, VHOST};
use testkit::{Client, Prosody, Server, stanza_type, to_xml, xml};

const PACKAGE: &str = "smartfeeds";
const USER: &str = "smartfeeds";
const BIN: &str = "/usr/bin/smartfeeds";
const CONFIG: &str = "/etc/smartfeeds/smartfeeds.toml";
const SECRET_ENV: &str = "/etc/smartfeeds/secret.env";
const STATE: &str = "/var/lib/smartfeeds";
const UNIT: &str = "/usr/lib/systemd/system/smartfeeds.service";
/// Everything of the package on the machine: none of it is there before or after a purge.
const LEFTOVERS: [&str; 6] = [
    BIN,
    "/etc/smartfeeds",
    STATE,
    UNIT,
    "/lib/systemd/system/smartfeeds.service",
    "/etc/systemd/system/smartfeeds.service",
];

#[test]
fn the_debian_package_installs_runs_as_its_user_and_purges_clean() {
    let started = Instant::now();
    preconditions();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));

    // scripts/package.sh (cargo-deb) prints the package's path. From the test build's
    // binary (see the module docs), at the lowest CPU priority, beside the other tests.
    let build = Instant::now();
    let mut package = Command::new("nice");
    package.args(["-n", "19", "bash"]).arg(root.join("scripts/package.sh")).args(["--profile", "dev"]);
    package.current_dir(&root);
    let out = run(&mut package, "scripts/package.sh");
    let deb = PathBuf::from(String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("").trim());
    let deb = if deb.is_absolute() { deb } else { root.join(deb) };
    let version = env!("CARGO_PKG_VERSION");
    let arch = text(&run(Command::new("dpkg").arg("--print-architecture"), "dpkg --print-architecture"));
    assert_eq!(
        deb.file_name().and_then(|n| n.to_str()),
        Some(format!("{PACKAGE}_{version}_{arch}.deb").as_str()),
        "the package is target/debian/{PACKAGE}_VERSION_ARCH.deb: {}",
        deb.display()
    );
    assert!(deb.ends_with(format!("target/debian/{PACKAGE}_{version}_{arch}.deb")), "{}", deb.display());
    let deb_size = fs::metadata(&deb).unwrap_or_else(|e| panic!("{}: {e}", deb.display())).len();
    eprintln!("e2e_package: built {} ({deb_size} bytes) in {:.0?}", deb.display(), build.elapsed());
    check_package_file(&deb);

    let mut installed = Installed { purged: false };
    run(Command::new("dpkg").arg("-i").arg(&deb), "dpkg -i");
    check_installed(version);

    // Installing again (the maintainer scripts are idempotent) changes neither the user nor
    // the secret generated at the first installation.
    let uid = user_id(USER).expect("the user exists");
    let secret = fs::read_to_string(SECRET_ENV).expect("secret.env");
    run(Command::new("dpkg").arg("-i").arg(&deb), "dpkg -i (again)");
    assert_eq!(user_id(USER), Some(uid), "reinstalling keeps the user");
    assert_eq!(fs::read_to_string(SECRET_ENV).expect("secret.env"), secret, "reinstalling keeps the secret");

    serve_as_installed(uid);

    // Removal keeps the configuration, the data and the user.
    apt_get("remove");
    for gone in [BIN, UNIT] {
        assert!(!Path::new(gone).exists(), "{gone} is still there after apt-get remove");
    }
    for kept in [CONFIG, SECRET_ENV, STATE, &format!("{STATE}/smartfeeds.db")] {
        assert!(Path::new(kept).exists(), "apt-get remove deleted {kept}: only a purge may");
    }
    assert_eq!(user_id(USER), Some(uid), "apt-get remove keeps the user");
    assert_eq!(package_status(), "config-files", "removed, its configuration left");

    // A purge takes everything.
    apt_get("purge");
    installed.purged = true;
    assert_clean("after apt-get purge");
    eprintln!("e2e_package: done in {:.0?}", started.elapsed());
}

/// Fails, saying why, where the test cannot run or would not prove anything.
fn preconditions() {
    let uid = Command::new("id").arg("-u").output().map(|o| text(&o)).unwrap_or_default();
    assert_eq!(
        uid, "0",
        "e2e_package installs a Debian package system-wide and must run as root (CI runs scripts/test.sh as \
         root); this runs as uid {uid:?}"
    );
    for (tool, package) in [
        ("dpkg", "dpkg"),
        ("dpkg-deb", "dpkg"),
        ("dpkg-query", "dpkg"),
        ("apt-get", "apt"),
        ("adduser", "adduser"),
        ("setpriv", "util-linux"),
        ("getent", "libc-bin"),
    ] {
        assert!(
            Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success()),
            "e2e_package needs {tool} (Debian package {package}): it tests the Debian package on a Debian machine"
        );
    }
    let status = package_status();
    assert!(
        status.is_empty() || status == "not-installed",
        "the package {PACKAGE} is on this machine already (status {status:?}): this test installs and purges it \
         and must start from a machine without it; `dpkg --purge {PACKAGE}` first"
    );
    assert_clean("before the test (remove these first: this test checks that a purge leaves none of them)");
}

/// The package's metadata and files, read from the .deb.
fn check_package_file(deb: &Path) {
    let fields = text(&run(Command::new("dpkg-deb").arg("--field").arg(deb), "dpkg-deb --field"));
    for field in [format!("Package: {PACKAGE}"), format!("Version: {}", env!("CARGO_PKG_VERSION"))] {
        assert!(fields.lines().any(|l| l == field), "{field:?} in the control fields:\n{fields}");
    }
    let depends = fields.lines().find(|l| l.starts_with("Depends:")).unwrap_or("");
    assert!(depends.contains("adduser"), "the package depends on adduser (its postinst uses it): {depends:?}");
    let conffiles = text(&run(Command::new("dpkg-deb").arg("--info").arg(deb).arg("conffiles"), "dpkg-deb --info"));
    assert_eq!(conffiles, CONFIG, "the configuration is the package's one conffile");
    let files = text(&run(Command::new("dpkg-deb").arg("--contents").arg(deb), "dpkg-deb --contents"));
    for file in [BIN, CONFIG, UNIT] {
        assert!(files.lines().any(|l| l.ends_with(&format!(".{file}"))), "{file} in the package:\n{files}");
    }
}

/// What `dpkg -i` must have left: the binary, the conffile as shipped, the unit, the user,
/// its state directory and the secret.
fn check_installed(version: &str) {
    let bin = fs::metadata(BIN).unwrap_or_else(|e| panic!("{BIN}: {e}"));
    eprintln!("e2e_package: {BIN} is {} bytes", bin.len());
    // Stripped as packaged: no DWARF, no symbol table (readelf is binutils', which cargo-deb
    // strips with; rustc's small `.debug_gdb_scripts` is loaded data, and stays).
    let sections = text(&run(Command::new("readelf").args(["--section-headers", "--wide", BIN]), "readelf"));
    let kept: Vec<&str> = sections
        .split_whitespace()
        .filter(|w| [".debug_info", ".debug_line", ".debug_str", ".symtab"].contains(w))
        .collect();
    assert!(kept.is_empty(), "{BIN} carries {kept:?}: the package's binary is stripped");
    assert!(sections.contains(".text"), "readelf listed the sections of {BIN}:\n{sections}");
    let out = run(Command::new(BIN).arg("--version"), "smartfeeds --version");
    assert_eq!(text(&out), format!("smartfeeds {version}"));

    // The configuration as shipped passes, with no secret in the environment.
    let out = run(
        Command::new(BIN).args(["check-config", "--config", CONFIG]).env_remove("SMARTFEEDS_SECRET"),
        "smartfeeds check-config on the installed configuration",
    );
    assert!(text(&out).contains("ok"), "{}", text(&out));

    // The user: a system account and group, its home the state directory, no login.
    let passwd = getent("passwd", USER).unwrap_or_else(|| panic!("no user {USER} after installing"));
    let fields: Vec<&str> = passwd.split(':').collect();
    let (uid, gid): (u32, u32) = (fields[2].parse().unwrap(), fields[3].parse().unwrap());
    assert!(uid < 1000, "{USER} is a system user: {passwd}");
    assert_eq!(fields[5], STATE, "{USER}'s home is the state directory: {passwd}");
    assert!(fields[6].ends_with("nologin") || fields[6].ends_with("false"), "{USER} cannot log in: {passwd}");
    let group = getent("group", USER).unwrap_or_else(|| panic!("no group {USER} after installing"));
    assert_eq!(group.split(':').nth(2), Some(gid.to_string().as_str()), "{USER}'s group is its own: {group}");

    let state = fs::metadata(STATE).unwrap_or_else(|e| panic!("{STATE}: {e}"));
    assert!(state.is_dir() && state.uid() == uid && state.gid() == gid, "{STATE} belongs to {USER}");
    assert_eq!(state.permissions().mode() & 0o777, 0o750, "{STATE} is its user's alone");

    let secret = fs::metadata(SECRET_ENV).unwrap_or_else(|e| panic!("{SECRET_ENV}: {e}"));
    assert!(secret.uid() == 0 && secret.permissions().mode() & 0o777 == 0o600, "{SECRET_ENV} is root's, 0600");
    let value = secret_from_env_file();
    assert!(value.len() >= 32 && value.chars().all(|c| c.is_ascii_hexdigit()), "a random secret: {value:?}");

    let unit = fs::read_to_string(UNIT).unwrap_or_else(|e| panic!("{UNIT}: {e}"));
    for line in [
        "User=smartfeeds",
        "ExecStart=/usr/bin/smartfeeds --config /etc/smartfeeds/smartfeeds.toml",
        "ExecStartPre=/usr/bin/smartfeeds check-config --config /etc/smartfeeds/smartfeeds.toml",
        "EnvironmentFile=-/etc/smartfeeds/secret.env",
        "StateDirectory=smartfeeds",
        "ProtectSystem=strict",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line:?} in {UNIT}:\n{unit}");
    }
    assert!(!unit.contains("DynamicUser"), "the packaged unit runs as the {USER} user, not a dynamic one");

    // As the unit's ExecStartPre runs it: the service's user, the secret from secret.env.
    run(
        Command::new("setpriv")
            .args(["--reuid", USER, "--regid", USER, "--init-groups", BIN, "check-config", "--config", CONFIG])
            .env("SMARTFEEDS_SECRET", &value)
            .current_dir(STATE),
        "smartfeeds check-config as the smartfeeds user",
    );
}

/// Runs the installed binary as the `smartfeeds` user, with the installed configuration made
/// to point at a private Prosody and a free HTTP port, publishes over XMPP and pulls the page
/// over HTTP, then stops it with SIGTERM.
fn serve_as_installed(uid: u32) {
    let prosody = Prosody::start();
    let http_port = free_port();
    let dir = tempfile::Builder::new().prefix("smartfeeds-package-").tempdir().expect("a temporary directory");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    let config = dir.path().join("smartfeeds.toml");
    fs::write(&config, test_config(&prosody.component_addr(), http_port)).expect("write the test's configuration");
    fs::set_permissions(&config, fs::Permissions::from_mode(0o644)).expect("chmod");
    let log = dir.path().join("smartfeeds.log");

    let mut command = Command::new("setpriv");
    command
        .args(["--reuid", USER, "--regid", USER, "--init-groups", BIN, "--config"])
        .arg(&config)
        .current_dir(STATE)
        .env("RUST_LOG", "info")
        .env("SMARTFEEDS_SECRET", prosody.secret());
    let mut process = Process::spawn(command, &log).unwrap_or_else(|e| panic!("{e}"));
    let log_tail = || fs::read_to_string(&log).unwrap_or_default();

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let served = rt.block_on(async {
        let c2s = prosody.c2s_port();
        wait_ready(c2s, http_port, &mut process).await?;
        let mut bot = Client::connect(c2s, &format!("bot@{VHOST}"), DEMO_PASSWORD).await;
        let reply = bot.iq(publish_iq("news", Some("first"), &entry("urn:package:1", "Packaged", None, &[]))).await;
        if stanza_type(&reply) != "result" {
            return Err(format!("the publish was answered {}", to_xml(&reply)));
        }
        bot.close().await;
        let page = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{http_port}/feeds/news/?max=10"))
            .header("Accept", "application/json")
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| format!("GET the page: {e}"))?;
        let status = page.status();
        let body = page.text().await.map_err(|e| format!("read the page: {e}"))?;
        if !status.is_success() || !body.contains("\"first\"") || !body.contains("Packaged") {
            return Err(format!("the page is {status}, without the published item:\n{body}"));
        }
        Ok(())
    });
    if let Err(e) = served {
        process.kill();
        panic!("the installed smartfeeds did not serve: {e}\n--- its log ---\n{}", log_tail());
    }

    let db = fs::metadata(format!("{STATE}/smartfeeds.db")).expect("the database in the state directory");
    assert_eq!(db.uid(), uid, "the database belongs to {USER}");
    let status = process.terminate(Duration::from_secs(15), "smartfeeds");
    assert!(status.is_some_and(|s| s.success()), "SIGTERM stops it cleanly: {status:?}\n{}", log_tail());
    drop(prosody);
}

/// The installed configuration, made to serve the test's Prosody: its component domain and
/// port, and a free HTTP port (the secret comes from the environment), plus a feed `news`
/// that `bot@localhost` publishes to. Everything else (the store in the state directory,
/// the limits) stays as shipped.
fn test_config(component_addr: &str, http_port: u16) -> String {
    let shipped = fs::read_to_string(CONFIG).unwrap_or_else(|e| panic!("{CONFIG}: {e}"));
    let mut config: toml::Table = shipped.parse().unwrap_or_else(|e| panic!("{CONFIG} is not TOML: {e}"));
    let table = |config: &mut toml::Table, name: &str| -> toml::Table {
        match config.remove(name) {
            Some(toml::Value::Table(t)) => t,
            other => panic!("{CONFIG} has no [{name}] table as shipped: {other:?}"),
        }
    };
    let mut component = table(&mut config, "component");
    component.insert("jid".into(), COMPONENT_DOMAIN.into());
    component.insert("server".into(), component_addr.into());
    config.insert("component".into(), component.into());
    let mut http = table(&mut config, "http");
    http.insert("listen".into(), format!("127.0.0.1:{http_port}").into());
    config.insert("http".into(), http.into());
    let store = table(&mut config, "store");
    assert_eq!(
        store.get("path").and_then(|p| p.as_str()),
        Some(&*format!("{STATE}/smartfeeds.db")),
        "the shipped store is in the state directory"
    );
    config.insert("store".into(), store.into());
    let mut news = toml::Table::new();
    news.insert("name".into(), "news".into());
    news.insert("publishers".into(), toml::Value::Array(vec![format!("bot@{VHOST}").into()]));
    config.insert("feeds".into(), toml::Value::Array(vec![news.into()]));
    toml::to_string(&config).expect("TOML")
}

/// Until the HTTP face answers `/health` and the component answers disco#info through the
/// server (20 s at most); an error with the reason when the process exits or time runs out.
async fn wait_ready(c2s: u16, http_port: u16, process: &mut Process) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let http = reqwest::Client::new();
    let mut last = String::from("no answer yet");
    let mut client: Option<Client> = None;
    loop {
        if let Some(status) = process.exited() {
            return Err(format!("it exited with {status} before serving"));
        }
        if Instant::now() >= deadline {
            return Err(format!("not ready within 20 s: {last}"));
        }
        let health = http.get(format!("http://127.0.0.1:{http_port}/health")).timeout(Duration::from_secs(2)).send();
        match health.await {
            Ok(r) if r.status().is_success() => {
                if client.is_none() {
                    client = Client::try_connect(c2s, &format!("admin@{VHOST}"), DEMO_PASSWORD).await.ok();
                }
                if let Some(c) = client.as_mut() {
                    let probe = xml(&format!(
                        r#"<iq type="get" to="{COMPONENT_DOMAIN}"><query xmlns="http://jabber.org/protocol/disco#info"/></iq>"#
                    ));
                    match c.try_iq(probe, Duration::from_secs(2)).await {
                        Ok(reply) if stanza_type(&reply) == "result" => return Ok(()),
                        Ok(reply) => last = format!("disco#info: {}", to_xml(&reply)),
                        Err(e) => {
                            last = format!("disco#info: {e}");
                            client = None;
                        }
                    }
                }
            }
            Ok(r) => last = format!("/health answered {}", r.status()),
            Err(e) => last = format!("/health: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Purges the package if the test installed it and did not get to purge it (a failure).
struct Installed {
    purged: bool,
}

impl Drop for Installed {
    fn drop(&mut self) {
        if !self.purged {
            let out = Command::new("dpkg").args(["--purge", PACKAGE]).output();
            eprintln!("e2e_package: purged what the failed test installed: {out:?}");
        }
    }
}

/// `apt-get ACTION -y smartfeeds`, which must succeed.
fn apt_get(action: &str) {
    run(
        Command::new("apt-get").args([action, "-y", "-q", PACKAGE]).env("DEBIAN_FRONTEND", "noninteractive"),
        &format!("apt-get {action}"),
    );
}

/// None of the package's files, directories, user or group is on the machine.
fn assert_clean(when: &str) {
    let left: Vec<&str> = LEFTOVERS.iter().copied().filter(|p| fs::symlink_metadata(p).is_ok()).collect();
    assert!(left.is_empty(), "{when}: {left:?} on the machine");
    assert_eq!(getent("passwd", USER), None, "{when}: the user {USER} exists");
    assert_eq!(getent("group", USER), None, "{when}: the group {USER} exists");
    let status = package_status();
    assert!(status.is_empty() || status == "not-installed", "{when}: dpkg knows {PACKAGE} as {status:?}");
}

/// dpkg's status of the package (`installed`, `config-files`, …), empty when it knows none.
fn package_status() -> String {
    let out = Command::new("dpkg-query")
        .args(["--show", "--showformat=${db:Status-Status}", PACKAGE])
        .output()
        .expect("dpkg-query runs");
    text(&out)
}

/// The line `getent DATABASE KEY` prints, if any.
fn getent(database: &str, key: &str) -> Option<String> {
    let out = Command::new("getent").args([database, key]).output().expect("getent runs");
    out.status.success().then(|| text(&out))
}

fn user_id(name: &str) -> Option<u32> {
    getent("passwd", name)?.split(':').nth(2)?.parse().ok()
}

/// SMARTFEEDS_SECRET of secret.env.
fn secret_from_env_file() -> String {
    let text = fs::read_to_string(SECRET_ENV).unwrap_or_else(|e| panic!("{SECRET_ENV}: {e}"));
    text.lines()
        .find_map(|l| l.strip_prefix("SMARTFEEDS_SECRET="))
        .unwrap_or_else(|| panic!("no SMARTFEEDS_SECRET= line in {SECRET_ENV}"))
        .to_string()
}

/// Runs `command`, which must exit 0; panics with its output otherwise.
fn run(command: &mut Command, what: &str) -> Output {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: cannot run it: {e}"));
    if !out.status.success() {
        panic!("{what} failed: {}", describe(&out));
    }
    out
}

/// The exit status and the last 60 lines of stdout and stderr.
fn describe(out: &Output) -> String {
    let tail = |b: &[u8]| {
        let s = String::from_utf8_lossy(b);
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    };
    format!("{}\n--- stdout ---\n{}\n--- stderr ---\n{}", out.status, tail(&out.stdout), tail(&out.stderr))
}

/// A command's stdout, trimmed.
fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
