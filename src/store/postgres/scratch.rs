//! A private, throwaway PostgreSQL server for tests and benchmarks: `initdb` into a
//! temporary directory, `pg_ctl start` on a free loopback port with its unix socket in that
//! directory, one fresh database per store, and stopped (directory removed) when dropped or
//! when the process that started it exits, however it exits.
//!
//! The server runs under a small shell that waits on a pipe from this process: dropping the
//! [`TempServer`] closes the pipe, and so does the process's death, so the shell stops the
//! server and removes its files even when a test binary's static server is never dropped.
//! As root it runs as the `postgres` user (`runuser`), since PostgreSQL refuses root.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio_postgres::NoTls;

/// Starts the server, prints `ready`, waits for its stdin to close, then stops it.
const SCRIPT: &str = r#"
bin="$1"; dir="$2"; port="$3"
"$bin/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --locale=C --no-sync >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
"$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=300" start >/dev/null 2>&1 \
    || { cat "$dir/server.log" >&2; exit 1; }
echo ready
read _ignored
"$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1
rm -rf "$dir"
"#;

/// What is missing when the server binaries cannot be found.
const MISSING: &str = "PostgreSQL 15 or later is not installed (no initdb and pg_ctl in /usr/lib/postgresql/*/bin, \
     $SMARTFEEDS_PG_BIN or PATH): install the Debian package `postgresql`";

/// A running private server.
pub struct TempServer {
    port: u16,
    dir: PathBuf,
    /// Closing it stops the server.
    stdin: Option<ChildStdin>,
    child: Child,
}

static DATABASES: AtomicU64 = AtomicU64::new(0);

impl TempServer {
    /// One server for the whole process (a test binary), started on first use. Panics with
    /// the reason (naming the package to install) when it cannot start.
    pub fn shared() -> &'static TempServer {
        static SHARED: OnceLock<Result<TempServer, String>> = OnceLock::new();
        match SHARED.get_or_init(TempServer::start) {
            Ok(server) => server,
            Err(e) => panic!("cannot start a private PostgreSQL server: {e}"),
        }
    }

    /// Starts a new server.
    pub fn start() -> Result<TempServer, String> {
        let bin = bindir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let n = DATABASES.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("smartfeeds-pg-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let root = std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false);
        let mut cmd = if root {
            let chown = Command::new("chown").arg("postgres").arg(&dir).status();
            if !chown.is_ok_and(|s| s.success()) {
                return Err(format!("cannot give {} to the postgres user (is the package installed?)", dir.display()));
            }
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", "sh"]);
            c
        } else {
            Command::new("sh")
        };
        cmd.arg("-c").arg(SCRIPT).arg("sh").arg(&bin).arg(&dir).arg(port.to_string());
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run the server's shell: {e}"))?;
        let mut line = String::new();
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let _ = BufReader::new(stdout).read_line(&mut line);
        if line.trim() != "ready" {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!("the server did not start: {}", err.trim()));
        }
        let stdin = child.stdin.take();
        Ok(TempServer { port, dir, stdin, child })
    }

    /// The URL of database `db` on this server.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// The directory holding the data, the logs and the unix socket.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates a new, empty database and returns its URL.
    pub async fn create_database(&self) -> Result<String, String> {
        let name = format!("db{}", DATABASES.fetch_add(1, Ordering::Relaxed));
        let (client, conn) = tokio_postgres::connect(&self.url("postgres"), NoTls).await.map_err(|e| e.to_string())?;
        let task = tokio::spawn(conn);
        let made = client.batch_execute(&format!("CREATE DATABASE {name}")).await.map_err(|e| e.to_string());
        drop(client);
        let _ = task.await;
        made.map(|()| self.url(&name))
    }
}

impl Drop for TempServer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// The directory of `initdb` and `pg_ctl`: `$SMARTFEEDS_PG_BIN`, Debian's
/// `/usr/lib/postgresql/<major>/bin` (the newest, 15 or later), or `PATH`.
fn bindir() -> Result<PathBuf, String> {
    let has = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Some(d) = std::env::var_os("SMARTFEEDS_PG_BIN") {
        let d = PathBuf::from(d);
        return if has(&d) { Ok(d) } else { Err(format!("$SMARTFEEDS_PG_BIN ({}): {MISSING}", d.display())) };
    }
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<u32>().ok()?, e.path().join("bin"))))
        .filter(|(major, d)| *major >= 15 && has(d))
        .collect();
    debian.sort();
    if let Some((_, d)) = debian.pop() {
        return Ok(d);
    }
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).find(|d| has(d))).ok_or_else(|| MISSING.to_string())
}
