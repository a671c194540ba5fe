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
bin="$1"; dir="$2"; port="$3"; extra="$4"
"$bin/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --locale=C --no-sync >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
"$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=300 $extra" start >/dev/null 2>&1 \
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
    /// Where `pg_ctl` is, and the options the server was started with (for a restart).
    bin: PathBuf,
    options: String,
    /// Closing it stops the server.
    stdin: Option<ChildStdin>,
    child: Child,
}

static DATABASES: AtomicU64 = AtomicU64::new(0);

impl TempServer {
    /// One server for the whole process (a test binary), started on first use. Panics with
    /// the reason (naming the package to install) when it cannot start.
    ///
    /// It does not fsync: tests throw it away, and a crash of the machine is not what they
    /// test. [`TempServer::start`] gives a server with PostgreSQL's durable defaults.
    pub fn shared() -> &'static TempServer {
        static SHARED: OnceLock<Result<TempServer, String>> = OnceLock::new();
        let start = || TempServer::start_with("-c fsync=off -c synchronous_commit=off -c full_page_writes=off");
        match SHARED.get_or_init(start) {
            Ok(server) => server,
            Err(e) => panic!("cannot start a private PostgreSQL server: {e}"),
        }
    }

    /// Starts a new server with PostgreSQL's defaults (durable commits).
    pub fn start() -> Result<TempServer, String> {
        TempServer::start_with("")
    }

    /// Starts a new server with extra `postgres` options (`-c name=value …`).
    pub fn start_with(options: &str) -> Result<TempServer, String> {
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
        cmd.arg("-c").arg(SCRIPT).arg("sh").arg(&bin).arg(&dir).arg(port.to_string()).arg(options);
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
        Ok(TempServer { port, dir, bin, options: options.to_string(), stdin, child })
    }

    /// The URL of database `db` on this server.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Stops the server as an operator's restart does (`pg_ctl stop -m fast`: sessions are
    /// ended, in-flight transactions rolled back), keeps it down for `down`, and starts it
    /// again on the same port and data.
    pub fn restart(&self, down: std::time::Duration) -> Result<(), String> {
        let data = self.dir.join("data");
        self.pg_ctl(&["-D", &data.to_string_lossy(), "-m", "fast", "-w", "stop"])?;
        std::thread::sleep(down);
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=300 {}",
            self.port,
            self.dir.display(),
            self.options
        );
        let log = self.dir.join("server.log");
        self.pg_ctl(&[
            "-D",
            &data.to_string_lossy(),
            "-l",
            &log.to_string_lossy(),
            "-w",
            "-t",
            "60",
            "-o",
            &opts,
            "start",
        ])
    }

    /// Runs `pg_ctl ARGS` as the server's user.
    fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let pg_ctl = self.bin.join("pg_ctl");
        let root = std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false);
        let mut cmd = if root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&pg_ctl);
            c
        } else {
            Command::new(&pg_ctl)
        };
        let out = cmd.args(args).stdin(Stdio::null()).output().map_err(|e| format!("cannot run pg_ctl: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("pg_ctl {}: {}", args.last().unwrap_or(&""), String::from_utf8_lossy(&out.stderr).trim()))
        }
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
        let made = client.batch_execute(&format!("CREATE DATABASE {name}")).await;
        let made = made.map_err(|e| e.to_string());
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

/// Fills feed `feed` (created if needed, and empty) with `n` items straight in SQL, stamped
/// as publishes 40 to a millisecond would have been (created and modified keys alike,
/// author `a0`…`a6`), counts included: a million-item feed for benchmarks in a minute,
/// where a million publishes would take an hour of round trips. For a database that
/// `PostgresStore::connect` (`store-postgres`) has migrated.
pub async fn fill_feed(url: &str, feed: &str, n: u64, base_ms: i64) -> Result<(), String> {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.map_err(|e| e.to_string())?;
    let task = tokio::spawn(conn);
    let fill = async {
        client.execute("INSERT INTO feeds(name) VALUES ($1) ON CONFLICT (name) DO NOTHING", &[&feed]).await?;
        let row = client.query_one("SELECT id, n_items FROM feeds WHERE name = $1", &[&feed]).await?;
        let (id, have): (i64, i64) = (row.get(0), row.get(1));
        if have != 0 {
            return Ok(());
        }
        let last = n as i64 - 1;
        client
            .batch_execute(&format!(
                "BEGIN;
                 INSERT INTO items(feed, cseq, id, ctime, mseq, mtime, author, atom_id, categories, deleted, payload)
                 SELECT {id}, i + 1, 'item-' || i, {base_ms} + i / 40, i + 1, {base_ms} + i / 40, 'a' || (i % 7),
                        'urn:x:' || i, '{{}}', false,
                        convert_to('<entry xmlns=''http://www.w3.org/2005/Atom''><id>urn:x:' || i || '</id><title>Item '
                            || i || '</title><author><name>a' || (i % 7) || '</name></author><content>Some text for item '
                            || i || '.</content></entry>', 'UTF8')
                 FROM generate_series(0::bigint, {last}) AS i;
                 INSERT INTO mcounts(feed, level, bucket, n)
                 SELECT {id}, l, mseq >> (6 * l), COUNT(*) FROM items, generate_series(1, 4) AS l
                 WHERE feed = {id} GROUP BY l, mseq >> (6 * l);
                 UPDATE feeds SET items = {n}, n_items = {n}, last_t = {base_ms} + {last} / 40, last_mseq = {n}
                 WHERE id = {id};
                 COMMIT;"
            ))
            .await?;
        // One statement each: VACUUM cannot run in the implicit transaction of a batch.
        for table in ["items", "item_categories", "mcounts", "feeds"] {
            client.batch_execute(&format!("VACUUM ANALYZE {table}")).await?;
        }
        Ok(())
    };
    let out = fill.await.map_err(|e: tokio_postgres::Error| e.to_string());
    drop(client);
    let _ = task.await;
    out
}
