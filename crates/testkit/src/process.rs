//! A child process of a test (Prosody, ejabberd or smartfeeds) with its output appended to
//! a file and a watchdog, and the small OS helpers the harness needs (free ports, `/proc`).
//!
//! The watchdog is an `sh` that SIGKILLs the process, and every pid later handed to
//! [`Process::watch`], when our end of its stdin pipe closes: when the test process dies
//! without running destructors (SIGKILL, abort, a nextest timeout, a never-dropped
//! `static`), nothing it started outlives it. It has a process group of its own, so a
//! signal to the test's group (ctrl-c) does not take it down before it has done its job.
//! On an orderly stop it is ended first, while the process is still our unreaped child, so
//! its `kill` can never hit a reused pid.

use std::fs;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A running child process; SIGKILLed (with everything below it) on drop.
pub struct Process {
    child: Child,
    /// The process that does the work, when it is not `child` itself (ejabberdctl runs the
    /// Erlang VM through `su`, in a session of its own).
    main: Option<u32>,
    watchdog: Option<(Child, ChildStdin)>,
    /// How the spawned process ended, once reaped: nothing is signalled after that.
    status: Option<ExitStatus>,
}

impl Process {
    /// Spawns `command` with stdin closed and stdout and stderr appended to `output`.
    pub fn spawn(mut command: Command, output: &Path) -> Result<Process, String> {
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(output)
            .map_err(|e| format!("cannot open {}: {e}", output.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", command.get_program().to_string_lossy()))?;
        let watchdog = spawn_watchdog(child.id());
        Ok(Process { child, main: None, watchdog, status: None })
    }

    /// The pid of the process we spawned.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The pid of the process that does the work: the one given to [`watch`](Self::watch),
    /// else the spawned one.
    pub fn main_pid(&self) -> u32 {
        self.main.unwrap_or(self.child.id())
    }

    /// Whether [`watch`](Self::watch) has been given the working process yet.
    pub fn has_main(&self) -> bool {
        self.main.is_some()
    }

    /// Records `pid` as the working process and hands it to the watchdog.
    pub fn watch(&mut self, pid: u32) {
        self.main = Some(pid);
        if let Some((_, stdin)) = &mut self.watchdog {
            let _ = writeln!(stdin, "{pid}");
        }
    }

    /// How the spawned process ended, if it has (reaping it).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Whether the spawned process still runs.
    pub fn is_running(&mut self) -> bool {
        self.exited().is_none()
    }

    /// Sends `signal` (`-TERM`, …) to the working process.
    pub fn signal(&self, signal: &str) {
        send_signal(signal, &[self.main_pid()]);
    }

    /// Ends the watchdog (before an orderly stop, see the module docs).
    pub fn stop_watchdog(&mut self) {
        if let Some((mut watchdog, stdin)) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
            drop(stdin);
        }
    }

    /// Waits up to `timeout` for the spawned process to exit; `None` if it still runs.
    pub fn wait_exit(&mut self, timeout: Duration, mut give_up: impl FnMut() -> bool) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if Instant::now() >= deadline || give_up() {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM to the working process, then up to `timeout` for the exit, then SIGKILL
    /// (reported on stderr as `what` ignoring SIGTERM). Returns the exit status.
    pub fn terminate(mut self, timeout: Duration, what: &str) -> Option<ExitStatus> {
        self.stop_watchdog();
        self.signal("-TERM");
        match self.wait_exit(timeout, || false) {
            Some(status) => Some(status),
            None => {
                eprintln!("{what} (pid {}) ignored SIGTERM for {timeout:?}; killing it", self.main_pid());
                self.kill()
            }
        }
    }

    /// SIGKILLs the working process and everything below it; the processes between it and
    /// the spawned one then exit, and the spawned one is reaped. Whatever is left after 5 s
    /// is SIGKILLed too. Returns once the working process is gone (so its directory can be
    /// removed), with the spawned process's exit status.
    pub fn kill(mut self) -> Option<ExitStatus> {
        self.kill_all()
    }

    fn kill_all(&mut self) -> Option<ExitStatus> {
        self.stop_watchdog();
        if self.status.is_some() {
            return self.status;
        }
        let root = self.child.id();
        if let Some(main) = self.main.filter(|&main| main != root) {
            send_signal("-KILL", &with_descendants(main));
            let _ = self.wait_exit(Duration::from_secs(5), || false);
        }
        if self.is_running() {
            send_signal("-KILL", &with_descendants(root));
        }
        let _ = self.child.kill();
        self.status = self.child.wait().ok();
        if let Some(main) = self.main {
            let deadline = Instant::now() + Duration::from_secs(5);
            while is_alive(main) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        self.status
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// The watchdog of the process `pid` (see the module docs): pids written to its stdin, one
/// per line, are killed along with it.
fn spawn_watchdog(pid: u32) -> Option<(Child, ChildStdin)> {
    use std::os::unix::process::CommandExt;
    let script = format!(
        "trap '' INT HUP TERM; pids={pid}; while read -r pid; do pids=\"$pids $pid\"; done; kill -9 $pids 2>/dev/null"
    );
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .ok()?;
    let stdin = child.stdin.take()?;
    Some((child, stdin))
}

/// `root` and all its descendants.
fn with_descendants(root: u32) -> Vec<u32> {
    let mut pids: Vec<u32> = descendants(root).into_iter().map(|(pid, _)| pid).collect();
    pids.push(root);
    pids
}

/// All descendants of `root` (pid, command name), from `/proc`.
pub fn descendants(root: u32) -> Vec<(u32, String)> {
    let mut procs: Vec<(u32, u32, String)> = Vec::new();
    if let Ok(entries) = fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else { continue };
            // "PID (COMM) STATE PPID …"; COMM may contain spaces and parentheses.
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
            let comm = stat[open + 1..close].to_string();
            let Some(ppid) = stat[close + 1..].split_whitespace().nth(1).and_then(|s| s.parse().ok()) else {
                continue;
            };
            procs.push((pid, ppid, comm));
        }
    }
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for (pid, ppid, comm) in &procs {
            if *ppid == parent {
                found.push((*pid, comm.clone()));
                frontier.push(*pid);
            }
        }
    }
    found
}

/// Whether `pid` exists and is not a zombie.
pub fn is_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()) != Some("Z"),
        Err(_) => false,
    }
}

/// Sends `signal` (`-TERM`, `-KILL`, …) to `pids`.
pub fn send_signal(signal: &str, pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg(signal)
        .args(pids.iter().map(u32::to_string))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Where test listeners' ports are picked: below Linux's default ephemeral range (32768 and
/// up), which the kernel hands to outgoing connections. A port asked of the kernel with
/// `bind(0)` comes from that range, and between its release here and the server's bind an
/// outgoing connection of another test could take it ("Address already in use").
const TEST_PORTS: std::ops::Range<u16> = 20_000..32_768;

/// `n` distinct free loopback ports from [`TEST_PORTS`], starting at a random place so that
/// test processes running side by side rarely try the same ones: all listeners are held at
/// once, then released for the server (which may still lose one to another test process in
/// between; the caller retries then).
pub fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    use std::hash::{BuildHasher, Hasher};
    let span = (TEST_PORTS.end - TEST_PORTS.start) as u64;
    let start = std::collections::hash_map::RandomState::new().build_hasher().finish() % span;
    let listeners: Vec<TcpListener> = (0..span)
        .map(|i| TEST_PORTS.start + ((start + i) % span) as u16)
        .filter_map(|port| TcpListener::bind(("127.0.0.1", port)).ok())
        .take(n)
        .collect();
    if listeners.len() < n {
        return Err(std::io::Error::new(std::io::ErrorKind::AddrInUse, "no free test ports left"));
    }
    listeners.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

/// What `start` makes on `n` free loopback ports ([`free_ports`]), and the ports. Between a
/// port's pick and its bind another test's process can take it: when `start` fails saying so
/// ("Address already in use"), it is run again on fresh ports, three attempts in all.
pub fn on_free_ports<T>(n: usize, mut start: impl FnMut(&[u16]) -> Result<T, String>) -> Result<(T, Vec<u16>), String> {
    let mut attempt = 1;
    loop {
        let ports = free_ports(n).map_err(|e| e.to_string())?;
        match start(&ports) {
            Ok(started) => return Ok((started, ports)),
            Err(e) if n > 0 && attempt < 3 && e.contains("Address already in use") => attempt += 1,
            Err(e) => return Err(e),
        }
    }
}

/// One free loopback port (for a listener of a test's own, such as smartfeeds' metrics).
pub fn free_port() -> u16 {
    free_ports(1).expect("a free port")[0]
}

/// Whether something accepts connections on `127.0.0.1:port`.
pub fn port_open(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).is_ok()
}
