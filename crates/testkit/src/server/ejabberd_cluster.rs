//! Two ejabberd 23.01 nodes on this machine forming one cluster ([`EjabberdCluster`]): one
//! vhost `localhost`, users in one replicated Mnesia database, and on each node its own c2s,
//! component and REST API ports (loopback), whose component listener accepts
//! `feeds.localhost` with the one secret of the cluster. Each node is a [`TestServer`] of
//! its own (directory, log, process and watchdog); [`EjabberdCluster::start`] panics with the
//! logs of both if the cluster does not form.
//!
//! **How the nodes find each other.** A lone test node runs with `ERL_DIST_PORT`, which makes
//! ejabberdctl pass `-erl_epmd_port PORT -start_epmd false`: the node listens on that port
//! and assumes that every other node listens on the same port (OTP's `erl_epmd` answers
//! "which port has node N?" with its own port without asking anyone). Two nodes on
//! 127.0.0.1 cannot both listen on one port, so that way a node can only ever reach itself.
//! The nodes of a cluster run without `ERL_DIST_PORT` and use epmd instead, but an epmd of
//! their own: the harness runs `epmd -port P -address 127.0.0.1` in the foreground on a free
//! port (a [`Process`] with its watchdog), and every VM of the cluster, the nodes and each
//! ejabberdctl call alike, gets `ERL_EPMD_PORT=P` (exported from ejabberdctl.cfg; the `su`
//! by which ejabberdctl switches to the `ejabberd` user keeps the environment) and
//! `-start_epmd false`, so none of them starts the usual daemon on port 4369, which would
//! outlive the test and be shared with anything else on the machine. Each node listens on a
//! port it picks (loopback only, `inet_dist_use_interface`) and registers it with that epmd.
//! (Fixing the port with `inet_dist_listen_min`/`max` does not work: ejabberdctl puts
//! `ERL_OPTIONS` on the command line of its own short-lived VMs too, which then fail with
//! `eaddrinuse`.)
//!
//! **Joining.** Both nodes start at once; then `ejabberdctl join_cluster NODE_A` runs against
//! node b: ejabberd stops on b, b's Mnesia schema is replaced by copies of a's tables, and
//! ejabberd starts again on b (well under a second), after which `list_cluster` names both
//! on each node. The REST API's `join_cluster` cannot do this in 23.01: stopping ejabberd on b
//! stops its HTTP listener and the request's process with it, which cuts the join off
//! halfway and leaves b's VM running with ejabberd stopped and no listeners.
//!
//! **Users.** b's own accounts go with its schema; the demo users registered on a at its
//! start are the cluster's, and an account made through either node afterwards is in both
//! ([`create_user`](EjabberdCluster::create_user)).
//!
//! **Routing.** The route table is cluster-wide. With a component connected to each node and
//! no `domain_balancing` (README, "Several instances on PostgreSQL"), a node routes stanzas
//! for the domain to the connection on itself whenever it has one, and across the cluster
//! only when it has none: a client's requests reach the instance on the client's node,
//! while pushes cross to subscribers on the other node.
//!
//! **Cleanup.** Dropping the value kills both VMs (each [`TestServer`]), then epmd, then
//! removes the directories; a panicking test drops it too, and if the test process dies
//! without unwinding, the watchdogs kill all three.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::test_server::fresh_secret;
use super::{DEMO_USERS, Ejabberd, TestServer, VHOST, installed};
use crate::logs::{self, WorkDir};
use crate::process::{Process, free_port, port_open};

/// Attempts at a free port for epmd (another process may take it between pick and bind).
const EPMD_ATTEMPTS: usize = 8;
/// Joining restarts ejabberd on the joining node; generous, for a busy machine.
const JOIN_TIMEOUT: Duration = Duration::from_secs(60);

static CLUSTER_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Two clustered ejabberd nodes and their epmd; see the module docs.
pub struct EjabberdCluster {
    /// Declared before `epmd`: the nodes are killed before the name server they use.
    nodes: [TestServer<Ejabberd>; 2],
    epmd: Process,
    epmd_port: u16,
    /// epmd's output; declared last, removed after every process is gone.
    dir: WorkDir,
}

impl EjabberdCluster {
    /// Starts the cluster (see the module docs); panics with the reason and the logs.
    pub fn start() -> EjabberdCluster {
        Self::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`start`](Self::start), returning the reason instead of panicking.
    pub fn try_start() -> Result<EjabberdCluster, String> {
        let epmd_bin = installed("SMARTFEEDS_EPMD", "/usr/bin/epmd", "epmd (Erlang's port mapper)", "ejabberd")?;
        let dir = WorkDir::new("smartfeeds-epmd-")?;
        let (epmd, epmd_port) = start_epmd(&epmd_bin, dir.path())?;
        let pid = std::process::id();
        let n = CLUSTER_COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let (base, cookie, secret) =
            (format!("ejabberd_test_{pid}_{n}"), format!("cookie{pid:x}c{n}x{nanos:x}"), fresh_secret());
        // Both at once: a cold start is mostly CPU of its own VM.
        let (a, b) = std::thread::scope(|s| {
            let start = |suffix: &'static str| {
                let (node, cookie, secret) = (format!("{base}_{suffix}@localhost"), cookie.clone(), secret.clone());
                s.spawn(move || {
                    TestServer::try_start_with_secret(
                        |data| Ejabberd::cluster_node(data, node, cookie, epmd_port),
                        secret,
                    )
                })
            };
            let (a, b) = (start("a"), start("b"));
            (joined(a.join()), joined(b.join()))
        });
        let cluster = EjabberdCluster { nodes: [a?, b?], epmd, epmd_port, dir };
        cluster.join().map_err(|e| format!("the ejabberd cluster did not form: {e}\n{}", cluster.log_tail(30)))?;
        Ok(cluster)
    }

    /// Node a, the one the other joined.
    pub fn a(&self) -> &TestServer<Ejabberd> {
        &self.nodes[0]
    }

    /// Node b.
    pub fn b(&self) -> &TestServer<Ejabberd> {
        &self.nodes[1]
    }

    /// Both nodes, a then b.
    pub fn nodes(&self) -> &[TestServer<Ejabberd>; 2] {
        &self.nodes
    }

    /// The port of the cluster's epmd.
    pub fn epmd_port(&self) -> u16 {
        self.epmd_port
    }

    /// The pid of the cluster's epmd.
    pub fn epmd_pid(&self) -> u32 {
        self.epmd.id()
    }

    /// The component secret every node takes for `feeds.localhost`.
    pub fn secret(&self) -> &str {
        self.a().secret()
    }

    /// The cluster's members as `node` sees them (REST `list_cluster`), sorted.
    pub fn members_seen_by(&self, node: &TestServer<Ejabberd>) -> Result<Vec<String>, String> {
        let body = node.api("list_cluster", "{}")?;
        let mut members: Vec<String> =
            serde_json::from_str(&body).map_err(|e| format!("list_cluster {body:?}: {e}"))?;
        members.sort();
        Ok(members)
    }

    /// Creates (or resets the password of) `name@localhost` through node a, and makes the
    /// other node's handle know the password (setting it again through that node, where the
    /// account already is).
    pub fn create_user(&self, name: &str, password: &str) {
        for node in &self.nodes {
            node.create_user(name, password);
        }
    }

    /// The last `lines` lines of each node's log and output, and of epmd's output.
    pub fn log_tail(&self, lines: usize) -> String {
        let epmd = logs::tail("epmd", &[("epmd.out", self.epmd_out())], lines);
        format!(
            "=== node a ===\n{}=== node b ===\n{}=== epmd ===\n{epmd}",
            self.a().log_tail(lines),
            self.b().log_tail(lines)
        )
    }

    fn epmd_out(&self) -> PathBuf {
        self.dir.path().join("epmd.out")
    }

    /// Joins b to a and waits until both list both, b serves again and b has a's accounts.
    fn join(&self) -> Result<(), String> {
        let (a, b) = (self.a(), self.b());
        b.ctl(&["join_cluster", a.node_name()])?;
        let mut want = vec![a.node_name().to_string(), b.node_name().to_string()];
        want.sort();
        let deadline = Instant::now() + JOIN_TIMEOUT;
        loop {
            let seen = self.nodes.iter().map(|n| self.members_seen_by(n)).collect::<Result<Vec<_>, _>>();
            let last = match seen {
                Ok(seen) if seen.iter().all(|m| *m == want) && b.ports().iter().all(|&p| port_open(p)) => break,
                Ok(seen) => format!("list_cluster on a, b: {seen:?}"),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(format!("not joined after {JOIN_TIMEOUT:?}; last: {last}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Accounts registered on a before the join are b's now: one Mnesia database.
        let users = b.api("registered_users", &format!(r#"{{"host":"{VHOST}"}}"#))?;
        let users: Vec<String> =
            serde_json::from_str(&users).map_err(|e| format!("registered_users {users:?}: {e}"))?;
        match DEMO_USERS.iter().find(|u| !users.iter().any(|have| have == *u)) {
            Some(missing) => Err(format!("node b does not have {missing}@{VHOST} from node a: {users:?}")),
            None => Ok(()),
        }
    }
}

impl fmt::Debug for EjabberdCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EjabberdCluster({:?}, {:?}, epmd port {})", self.a(), self.b(), self.epmd_port)
    }
}

/// A node's start on its thread: the result, or the panic as an error.
fn joined<T>(result: std::thread::Result<Result<T, String>>) -> Result<T, String> {
    result.unwrap_or_else(|_| Err("the start of a node panicked".into()))
}

/// Starts `epmd` in the foreground on a free loopback port; returns it once it accepts
/// connections.
fn start_epmd(bin: &Path, dir: &Path) -> Result<(Process, u16), String> {
    let out = dir.join("epmd.out");
    let mut last = String::new();
    for _ in 0..EPMD_ATTEMPTS {
        let port = free_port();
        let mut command = Command::new(bin);
        command.args(["-port", &port.to_string(), "-address", "127.0.0.1"]);
        command.env_remove("ERL_EPMD_PORT").env_remove("ERL_EPMD_ADDRESS");
        let mut process = Process::spawn(command, &out)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = process.exited() {
                // Most likely the port was taken in between: try another.
                last = format!("epmd on port {port} exited with {status}: {}", logs::read_from(&out, 0).trim());
                break;
            }
            if port_open(port) && process.is_running() {
                return Ok((process, port));
            }
            if Instant::now() >= deadline {
                return Err(format!("epmd did not listen on port {port} within 10 s"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Err(format!("could not start epmd in {EPMD_ATTEMPTS} attempts; last: {last}"))
}

/// [`render_ctl_config`](super::ejabberd::render_ctl_config)'s file for a cluster node: no
/// fixed distribution port, no epmd of its own, the cluster's epmd on `epmd_port`.
pub fn render_cluster_ctl_config(node: &str, epmd_port: u16, cookie: &str, data: &str) -> Result<String, String> {
    let config = super::ejabberd::render_ctl_config(node, 0, cookie, data)?;
    let edit = |config: String, from: &str, to: &str| {
        if config.matches(from).count() == 1 {
            Ok(config.replacen(from, to, 1))
        } else {
            Err(format!("ejabberd/ejabberdctl.cfg has not exactly one {from:?} to change for a cluster node"))
        }
    };
    let config = edit(config, "\nERL_DIST_PORT=0\n", "\nERL_DIST_PORT=\n")?;
    let config = edit(config, "\nERL_OPTIONS=\"", "\nERL_OPTIONS=\"-start_epmd false ")?;
    Ok(format!(
        "{config}\n# A cluster node: found through the cluster's own epmd (no ERL_DIST_PORT, which makes a\n\
         # node expect every other node on its own port). Exported: the node and every ctl call use it.\n\
         export ERL_EPMD_PORT={epmd_port}\n"
    ))
}
