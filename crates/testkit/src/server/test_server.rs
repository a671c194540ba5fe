//! [`TestServer`]: one private XMPP server for a test, whichever [`Server`] it is. The
//! process handling lives here once; the server's own hooks say what differs.
//!
//! Ports come from the OS (bind to port 0, then release); if another process grabs one in
//! between, the server says so in its log (see [`Server::port_taken`]) and we try fresh
//! ports. Ready means: the server's log says so and the ports accept connections.
//!
//! The process methods (`start`, `stop`, `restart`, `kill`) block the calling thread for
//! the time the server takes (Prosody: a few hundred milliseconds; ejabberd: about 3 s to
//! start, 2 s to stop); call them from the test body.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{COMPONENT_DOMAIN, DEMO_PASSWORD, DEMO_USERS, Server, Setup};
use crate::client::Client;
use crate::component::Component;
use crate::logs::{self, WorkDir};
use crate::process::{Process, free_ports, port_open};

const PORT_ATTEMPTS: usize = 8;
/// After a stop, the ports were ours a moment ago: sockets may still be being torn down.
const RESTART_RETRIES: Duration = Duration::from_secs(10);

static INSTANCE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A running (or stopped) server: free loopback ports, a temporary directory, the demo
/// users (`admin`, `bot`, `alice`, `bob`, password `password`), the external components
/// `feeds.localhost` and `bench.localhost` (one port, one secret) and the server's own
/// pubsub service at `pubsub.localhost`. Killed on drop. Derefs to the [`Server`] for what
/// only one kind has (`ejabberd.ctl(…)`) and for how it behaves (`host.kind()`).
pub struct TestServer<S: Server + ?Sized = dyn Server> {
    setup: Setup,
    passwords: Mutex<BTreeMap<String, String>>,
    /// Declared before `dir`: the server is killed (on drop) before its directory goes.
    process: Option<Process>,
    dir: WorkDir,
    server: Box<S>,
}

enum StartError {
    /// One of the ports was taken before the server could bind it.
    PortTaken(String),
    Other(String),
}

impl<S: Server> TestServer<S> {
    /// Starts a fresh instance; panics with the server's log tail if it does not come up.
    pub fn start() -> Self {
        Self::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`start`](Self::start), returning the reason instead of panicking.
    pub fn try_start() -> Result<Self, String> {
        Self::try_start_with(S::new)
    }

    /// Like [`start`](Self::start) with the server `make` returns for the fresh directory
    /// instead of [`Server::new`]'s (a server with settings of its own).
    pub fn start_with(make: impl FnOnce(&Path) -> Result<S, String>) -> Self {
        Self::try_start_with(make).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`start_with`](Self::start_with), returning the reason instead of panicking.
    pub fn try_start_with(make: impl FnOnce(&Path) -> Result<S, String>) -> Result<Self, String> {
        Self::try_start_with_secret(make, fresh_secret())
    }

    /// Like [`try_start_with`](Self::try_start_with) with the component secret `secret`
    /// (the nodes of one cluster serve one component domain with one secret).
    pub fn try_start_with_secret(
        make: impl FnOnce(&Path) -> Result<S, String>,
        secret: String,
    ) -> Result<Self, String> {
        let dir = WorkDir::new("smartfeeds-xmpp-")?;
        let data = dir.path().to_path_buf();
        let server = make(&data)?;
        let mut instance = TestServer {
            setup: Setup { data, ports: Vec::new(), secret },
            passwords: Mutex::new(BTreeMap::new()),
            process: None,
            dir,
            server: Box::new(server),
        };
        for user in DEMO_USERS {
            instance.create_user(user, DEMO_PASSWORD);
        }
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let count = 2 + instance.server.extra_ports();
            instance.setup.ports = free_ports(count).map_err(|e| format!("cannot pick free ports: {e}"))?;
            instance.server.write_config(&instance.setup)?;
            match instance.spawn_and_wait() {
                Ok(()) => return Ok(instance),
                Err(StartError::PortTaken(e)) => last_error = e,
                Err(StartError::Other(e)) => return Err(e),
            }
        }
        Err(format!("{} could not get free ports in {PORT_ATTEMPTS} attempts; last: {last_error}", instance.name()))
    }

    /// The same instance as the one handle any server can be (`TestServer`).
    pub fn into_dyn(self) -> TestServer {
        let TestServer { setup, passwords, process, dir, server } = self;
        TestServer { setup, passwords, process, dir, server }
    }
}

/// A component secret unique to this process and call.
pub fn fresh_secret() -> String {
    let n = INSTANCE_COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("secret-{}-{n}-{nanos:x}", std::process::id())
}

impl<S: Server + ?Sized> TestServer<S> {
    /// The client-to-server port on 127.0.0.1 (plain TCP, SASL PLAIN).
    pub fn c2s_port(&self) -> u16 {
        self.setup.c2s_port()
    }

    /// The XEP-0114 component port on 127.0.0.1 (`feeds.localhost` and `bench.localhost`).
    pub fn component_port(&self) -> u16 {
        self.setup.component_port()
    }

    /// Every port of the instance: c2s, component, then the server's own.
    pub fn ports(&self) -> &[u16] {
        &self.setup.ports
    }

    /// `127.0.0.1:PORT` of the component port, as smartfeeds' `[component] server` wants it.
    pub fn component_addr(&self) -> String {
        format!("127.0.0.1:{}", self.component_port())
    }

    /// The component domain, `feeds.localhost`.
    pub fn component_domain(&self) -> &'static str {
        COMPONENT_DOMAIN
    }

    /// The virtual host, `localhost` (see [`Server::vhost`]).
    pub fn vhost(&self) -> &'static str {
        self.server.vhost()
    }

    /// The component secret (unique per instance).
    pub fn secret(&self) -> &str {
        &self.setup.secret
    }

    /// The temporary directory (config, logs, data); a good place for a test's other files.
    /// It belongs to the `ejabberd` user when the tests run ejabberd as root.
    pub fn data_dir(&self) -> &Path {
        &self.setup.data
    }

    /// The server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.server.log_path(&self.setup.data)
    }

    /// The last `lines` lines of the server's log and of its stdout/stderr.
    pub fn log_tail(&self, lines: usize) -> String {
        let data = &self.setup.data;
        let log = self.log_path();
        let log_name = log.file_name().map_or("log".into(), |n| n.to_string_lossy().into_owned());
        logs::tail(self.name(), &[(&log_name, log.clone()), ("stdout/stderr", self.server.output_path(data))], lines)
    }

    /// The pid of the running server (for ejabberd: its Erlang VM, once found).
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().filter(|p| p.has_main()).map(Process::main_pid)
    }

    /// Whether the server process is running (it may have exited on its own).
    pub fn is_running(&mut self) -> bool {
        self.process.as_mut().is_some_and(Process::is_running)
    }

    /// Creates (or resets the password of) `name@localhost` (the [`vhost`](Self::vhost));
    /// works while the server runs (on ejabberd, while it is stopped the account is created
    /// at the next start).
    pub fn create_user(&self, name: &str, password: &str) {
        let running = self.process.is_some();
        if let Err(e) = self.server.store_account(&self.setup, running, name, password) {
            panic!("cannot create {name}@{} on {}: {e}", self.vhost(), self.name());
        }
        self.passwords.lock().unwrap().insert(name.to_string(), password.to_string());
    }

    /// Deletes the account `name@localhost`; works while the server runs. (Prosody keeps a
    /// session of the deleted account up; ejabberd closes it.)
    pub fn delete_user(&self, name: &str) {
        let running = self.process.is_some();
        if let Err(e) = self.server.remove_account(&self.setup, running, name) {
            panic!("cannot delete {name}@{} on {}: {e}", self.vhost(), self.name());
        }
        self.passwords.lock().unwrap().remove(name);
    }

    /// The password of a user made by [`create_user`](Self::create_user) (or a demo user).
    pub fn password(&self, name: &str) -> String {
        let passwords = self.passwords.lock().unwrap();
        let password = passwords.get(name).cloned();
        password.unwrap_or_else(|| panic!("no user {name:?} was created on this {}", self.name()))
    }

    /// Logs a known user in: `server.login("alice").await` (the future borrows neither the
    /// server nor the name, for `join_all` over many logins).
    pub fn login(&self, name: &str) -> impl Future<Output = Client> + Send + use<S> {
        let (port, jid, password) = (self.c2s_port(), format!("{name}@{}", self.vhost()), self.password(name));
        async move { Client::connect(port, &jid, &password).await }
    }

    /// Creates `name@localhost` with the demo password (or gives it that password again)
    /// and logs it in with a fresh resource: a user of one test.
    pub fn user(&self, name: &str) -> impl Future<Output = Client> + Send + use<S> {
        self.create_user(name, DEMO_PASSWORD);
        self.login(name)
    }

    /// Connects a raw component as `feeds.localhost` with this instance's secret.
    pub fn component(&self) -> impl Future<Output = Component> + Send + use<S> {
        self.component_as(COMPONENT_DOMAIN)
    }

    /// Connects a raw component as `domain` (`feeds.localhost` or `bench.localhost`).
    pub fn component_as(&self, domain: &str) -> impl Future<Output = Component> + Send + use<S> {
        let (port, domain, secret) = (self.component_port(), domain.to_string(), self.secret().to_string());
        async move { Component::connect(port, &domain, &secret).await }
    }

    /// Stops the server gracefully (clients get `<system-shutdown/>`, components see their
    /// connection closed); kills it when it has not stopped in time (reported on stderr).
    /// No-op when not running.
    pub fn stop(&mut self) {
        let Some(mut process) = self.process.take() else { return };
        let log = self.log_path();
        let log_offset = logs::offset(&log);
        if !self.server.request_stop(&process) {
            process.kill();
            return;
        }
        process.stop_watchdog();
        let timeout = self.server.stop_timeout();
        let mut complete = false;
        let exited = process.wait_exit(timeout, || {
            complete = self.server.stop_complete(&logs::read_from(&log, log_offset));
            complete
        });
        if exited.is_none() && !complete {
            let pid = process.main_pid();
            eprintln!("{} ({}pid {pid}) did not stop within {timeout:?}; killing it", self.name(), self.describe());
        }
        process.kill();
    }

    /// Makes the running server's multicast service refuse `feeds.localhost` from now on
    /// (see [`Server::refuse_multicast`]). Panics if the server did not take the change.
    pub fn refuse_multicast(&self) {
        let process = self.process.as_ref().unwrap_or_else(|| panic!("{} is not running", self.name()));
        if let Err(e) = self.server.refuse_multicast(&self.setup, process) {
            panic!("{}: cannot withdraw the multicast right: {e}\n{}", self.name(), self.log_tail(30));
        }
    }

    /// Kills the server with SIGKILL (a crash: no stream is closed). No-op when not running.
    pub fn kill(&mut self) {
        if let Some(process) = self.process.take() {
            process.kill();
        }
    }

    /// Stops (if running) and starts again on the SAME ports with the same data (users and
    /// the server's own pubsub data survive). Panics with the log tail if it does not come
    /// back.
    pub fn restart(&mut self) {
        self.stop();
        self.server.write_config(&self.setup).unwrap_or_else(|e| panic!("{e}"));
        let deadline = Instant::now() + RESTART_RETRIES;
        loop {
            match self.spawn_and_wait() {
                Ok(()) => return,
                Err(StartError::PortTaken(_)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(StartError::PortTaken(e) | StartError::Other(e)) => {
                    panic!("{} restart on the same ports failed: {e}", self.name())
                }
            }
        }
    }

    fn spawn_and_wait(&mut self) -> Result<(), StartError> {
        let log = self.log_path();
        let out = self.server.output_path(&self.setup.data);
        let offsets = (logs::offset(&log), logs::offset(&out));
        let process = Process::spawn(self.server.command(&self.setup), &out).map_err(StartError::Other)?;
        self.process = Some(process);
        let ready = self.wait_ready(&log, &out, offsets).and_then(|()| {
            let accounts: Vec<(String, String)> =
                self.passwords.lock().unwrap().iter().map(|(u, p)| (u.clone(), p.clone())).collect();
            self.server.after_start(&accounts).map_err(StartError::Other)
        });
        ready.map_err(|e| {
            let tail = self.log_tail(40);
            self.kill();
            match e {
                StartError::PortTaken(e) => StartError::PortTaken(e),
                StartError::Other(e) => StartError::Other(format!(
                    "{} did not start ({}ports {:?}, dir {}): {e}\n{tail}",
                    self.name(),
                    self.describe(),
                    self.setup.ports,
                    self.setup.data.display()
                )),
            }
        })
    }

    fn wait_ready(&mut self, log: &Path, out: &Path, (log_offset, out_offset): (u64, u64)) -> Result<(), StartError> {
        let timeout = self.server.ready_timeout();
        let deadline = Instant::now() + timeout;
        loop {
            let process = self.process.as_mut().expect("spawned");
            if !process.has_main()
                && let Some(pid) = self.server.main_pid(process.id())
            {
                process.watch(pid);
            }
            let exited = process.exited();
            let text = logs::read_from(log, log_offset) + &logs::read_from(out, out_offset);
            if let Some(line) = self.server.port_taken(&text) {
                return Err(StartError::PortTaken(line.to_string()));
            }
            if let Some(reason) = self.server.start_failure(&text) {
                return Err(StartError::Other(reason));
            }
            if let Some(status) = exited {
                return Err(StartError::Other(format!("{} exited during startup with {status}", self.name())));
            }
            if self.server.says_ready(&text, &self.setup)
                && self.server.ready_ports(&self.setup).into_iter().all(port_open)
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(StartError::Other(format!("not ready after {timeout:?}")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl<S: Server + ?Sized> Deref for TestServer<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.server
    }
}

impl<S: Server + ?Sized> DerefMut for TestServer<S> {
    fn deref_mut(&mut self) -> &mut S {
        &mut self.server
    }
}

impl<S: Server + ?Sized> fmt::Debug for TestServer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TestServer({}, ports {:?}, dir {})", self.name(), self.setup.ports, self.setup.data.display())
    }
}
