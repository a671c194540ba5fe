//! One server and one smartfeeds shared by all the tests of a test binary, started once, on
//! first use, from a `static`:
//!
//! ```ignore
//! static FIXTURE: Shared<Fixture> = Shared::new();
//! fn fixture() -> &'static Fixture {
//!     FIXTURE.get_or_start(|| Fixture::start(TABLES))
//! }
//! ```
//!
//! A `static` is never dropped: the processes' watchdogs kill both when the test binary
//! ends, and [`remove_on_exit`] removes their directories. Each test logs in its own clients
//! on its own runtime.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use super::logs::{KEEP_ENV, keep_dirs};
use super::process::on_free_ports;
use super::server::{TestServer, start_selected};
use super::smartfeeds::{DEFAULT_TOP, Smartfeeds};

/// The server `SMARTFEEDS_TEST_SERVER` selects and a smartfeeds connected to it.
pub struct Fixture {
    /// The server, Prosody or ejabberd (leaked: it lives as long as the test process).
    pub server: &'static TestServer,
    pub feeds: Smartfeeds,
    _cleanup: Option<Child>,
}

impl Fixture {
    /// A fresh server and smartfeeds with `tables` (see [`Smartfeeds::start`]).
    pub fn start(tables: &str) -> Fixture {
        Fixture::on(start_selected(), tables)
    }

    /// Smartfeeds with `tables` on `server`, a server started with settings of its own.
    pub fn on(server: TestServer, tables: &str) -> Fixture {
        Fixture::on_free_ports(server, 0, |_| tables.to_string()).0
    }

    /// Smartfeeds on `server` with `tables(ports)`, for `n` free loopback ports picked once
    /// the server is up (its listeners, its metrics), and the ports. Between a port's pick
    /// and smartfeeds' bind another test's process can take it: then the ports are picked
    /// again, a few times, rather than failing the test for its neighbour.
    pub fn on_free_ports(server: TestServer, n: usize, tables: impl Fn(&[u16]) -> String) -> (Fixture, Vec<u16>) {
        let server: &'static TestServer = Box::leak(Box::new(server));
        let (feeds, ports) = on_free_ports(n, |ports| Smartfeeds::try_start_with(server, DEFAULT_TOP, &tables(ports)))
            .unwrap_or_else(|e| panic!("{e}"));
        let cleanup = remove_on_exit(&[server.data_dir(), feeds.dir()]);
        (Fixture { server, feeds, _cleanup: cleanup }, ports)
    }
}

/// A fixture started once per test binary. When the start-up fails, the first test shows
/// why and every later one says so too (instead of starting again).
pub struct Shared<T>(OnceLock<Result<T, String>>);

impl<T> Shared<T> {
    pub const fn new() -> Self {
        Shared(OnceLock::new())
    }

    /// The fixture, started by `start` on first use.
    pub fn get_or_start(&'static self, start: impl FnOnce() -> T) -> &'static T {
        let started = self.0.get_or_init(|| {
            std::panic::catch_unwind(AssertUnwindSafe(start)).map_err(|panic| {
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "start-up panicked".into())
            })
        });
        match started {
            Ok(fixture) => fixture,
            Err(e) => panic!("the shared fixture could not be set up: {e}"),
        }
    }
}

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Shared::new()
    }
}

/// A `static` fixture's cleanup: a `sh` that waits for this test process to end (its stdin
/// pipe closes) and then removes `dirs` (the temporary directories a never-dropped `static`
/// would leave behind). Keep the returned child alive as long as the fixture.
pub fn remove_on_exit(dirs: &[&Path]) -> Option<Child> {
    if keep_dirs() {
        eprintln!("{}: keeping {dirs:?}", KEEP_ENV.join("/"));
        return None;
    }
    let quoted: Vec<String> = dirs.iter().map(|d| shell_quote(&d.to_string_lossy())).collect();
    Command::new("sh")
        .arg("-c")
        .arg(format!("while read -r _line; do :; done; sleep 1; rm -rf {}", quoted.join(" ")))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
