//! `smartfeeds-load`: drives any XEP-0060 pubsub service over a real XMPP server and
//! measures it end to end.
//!
//! It connects to the server as an external component (XEP-0114, `bench.localhost` by
//! default), so no client accounts are needed: a component may send from any JID of its
//! domain, which gives the tool as many subscriber identities as it wants
//! (`sub{i}@bench.localhost`). The service sees the bare JID `bench.localhost` as the
//! sender of publishes, so smartfeeds must list it in `admins` (or the feed's `publishers`):
//! `Service::may` compares the sender's bare JID string, and a component domain's bare JID
//! is the domain itself. `fanout --sessions` takes its subscribers from the server's own
//! users instead: anonymous client sessions, one connection each (`session`).
//!
//! Modes: `pull` (pages, RSM or `max_items`), `publish` (Atom entries), `fanout` (pushes to
//! many subscribers), `create` (a node, on services that need one created), `canned` (a
//! component answering every items request with one page: the baseline of `pull`), `websub`
//! (smartfeeds' WebSub hub, over HTTP only, with callbacks served by the tool), and `table` and
//! `compare` (print JSON lines of earlier runs as one table, or side by side). Every run prints one JSON line on stdout
//! and a readable table on stderr. Work is bounded by counts and by `--duration`, and only
//! loopback servers are accepted.
//!
//! The runtime is single-threaded unless `--threads` says otherwise: on a small machine the
//! tool then takes at most one core from the service and server it measures, and its own CPU
//! time is reported (`tool_cpu_s`) so a saturated load generator is visible.

#![forbid(unsafe_code)]

mod canned;
mod compare;
mod create;
mod fanout;
mod http;
mod link;
mod pool;
mod procstat;
mod publish;
mod pull;
mod report;
mod scan;
mod session;
mod stanzas;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};

use link::Link;
use report::Report;

/// Load generator for XEP-0060 pubsub services (smartfeeds, Prosody's mod_pubsub, …),
/// connecting as an XEP-0114 component.
#[derive(Parser, Debug)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Pull pages: K walkers page through the node with RSM `after` (or ask `max_items`).
    Pull {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: pull::PullArgs,
    },
    /// Publish Atom entries, K in flight.
    Publish {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: publish::PublishArgs,
    },
    /// Subscribe S JIDs of our domain, publish P items one at a time, time each fan-out.
    Fanout {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: fanout::FanoutArgs,
    },
    /// Serve as a pubsub service that answers every items request with one canned page
    /// (smartfeeds' first page of `--node` from `--service`, captured once): the
    /// baseline of `pull` through the server. Run it as its own component domain.
    Canned {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: canned::CannedArgs,
    },
    /// Create the node with room for `--max-items` items (for Prosody's and ejabberd's pubsub).
    Create {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: create::CreateArgs,
    },
    /// Pull pages over smartfeeds' HTTP face: K walkers page through a view with `since`.
    HttpPull {
        #[command(flatten)]
        common: http::HttpCommon,
        #[command(flatten)]
        args: pull::PullArgs,
    },
    /// Publish Atom entries over HTTP (PUT), K in flight.
    HttpPublish {
        #[command(flatten)]
        common: http::HttpCommon,
        #[command(flatten)]
        args: http::PublishArgs,
    },
    /// Hold N long-polls on one view, publish once, time the last answer.
    HttpLongpoll {
        #[command(flatten)]
        common: http::HttpCommon,
        #[command(flatten)]
        args: http::LongpollArgs,
    },
    /// Hold N event streams or long-polls on one view (smartfeeds or Nchan), publish P
    /// times, time each publish's last arrival.
    HttpFanout {
        #[command(flatten)]
        common: http::HttpCommon,
        #[command(flatten)]
        args: http::FanoutArgs,
    },
    /// Fetch the recent, middle and oldest archive documents, each many times.
    HttpArchive {
        #[command(flatten)]
        common: http::HttpCommon,
        #[command(flatten)]
        args: http::ArchiveArgs,
    },
    /// WebSub: S subscriptions to one view (callbacks served here), P publishes over HTTP,
    /// each timed until its last delivery (smartfeeds only; no XMPP involved).
    Websub {
        #[command(flatten)]
        common: http::HttpCommon,
        #[command(flatten)]
        args: http::WebsubArgs,
    },
    /// Print JSON lines of earlier runs (files, or stdin) as one table.
    Table {
        /// Files of JSON lines; stdin when none.
        files: Vec<PathBuf>,
    },
    /// Side by side: runs labelled HOST/SERVICE (files, or stdin), medians over rounds and
    /// ratios of smartfeeds to each other service on the same host.
    Compare {
        /// Files of JSON lines; stdin when none.
        files: Vec<PathBuf>,
    },
}

/// What every load mode needs.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// The XMPP server's component port (loopback only).
    #[arg(long, default_value = "127.0.0.1:5347")]
    server: SocketAddr,
    /// Our component domain, as the server's configuration names it.
    #[arg(long, default_value = "bench.localhost")]
    component: String,
    /// The component's shared secret.
    #[arg(long, default_value = "secret")]
    secret: String,
    /// The pubsub service's JID.
    #[arg(long, default_value = "feeds.localhost")]
    service: String,
    /// The node (smartfeeds: a feed name, or FEED?QUERY for pulls and subscriptions).
    #[arg(long, default_value = "load")]
    node: String,
    /// How much, how long, what to watch.
    #[command(flatten)]
    pub run: RunOpts,
}

/// Common fields read through `Common` as if they were its own.
impl std::ops::Deref for Common {
    type Target = RunOpts;
    fn deref(&self) -> &RunOpts {
        &self.run
    }
}

/// How a run is bounded and what it watches, over XMPP or HTTP alike.
#[derive(Args, Debug, Clone)]
pub struct RunOpts {
    /// Requests in flight at once.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub in_flight: u32,
    /// Stop issuing requests after this many seconds (in-flight ones still finish).
    #[arg(long, default_value_t = 120.0)]
    pub duration: f64,
    /// Seconds to wait for any one reply (or, in fanout, for one publish's notifications).
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    /// The service's process id: its CPU time over the run is reported.
    #[arg(long)]
    pub service_pid: Option<u32>,
    /// The XMPP server's process id: its CPU time over the run is reported.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Worker threads of the tool's runtime (1: everything on one thread).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub threads: u32,
    /// A label copied into the JSON line.
    #[arg(long)]
    pub label: Option<String>,
}

impl RunOpts {
    /// Checks the bounds; the reason when they are out of range.
    fn check(&self) -> Result<(), String> {
        if self.duration > 0.0 && self.duration <= 86_400.0 && self.timeout > 0.0 && self.timeout <= 3600.0 {
            Ok(())
        } else {
            Err("--duration must be in (0, 86400] and --timeout in (0, 3600] seconds".into())
        }
    }

    /// Starts measuring the CPU of the service, the server and this tool.
    pub fn cpu_window(&self) -> procstat::CpuWindow {
        procstat::CpuWindow::start(&[self.service_pid, self.server_pid, Some(std::process::id())])
    }

    /// A report for `mode` with the label and the requests in flight.
    pub fn report(&self, mode: &str) -> Report {
        let mut r = Report::new(mode);
        if let Some(label) = &self.label {
            r.str("label", label);
        }
        r.int("in_flight", self.in_flight.into());
        r
    }
}

/// A connected run: the link, the options, and when to stop issuing work.
pub struct Ctx {
    pub link: Arc<Link>,
    pub common: Common,
    pub deadline: Instant,
}

impl Ctx {
    pub fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.common.timeout)
    }

    /// Whether new work may still start.
    pub fn open(&self) -> bool {
        Instant::now() < self.deadline
    }

    /// Starts measuring the CPU of the service, the server and this tool.
    pub fn cpu_window(&self) -> procstat::CpuWindow {
        self.common.cpu_window()
    }

    /// A report for `mode` with the run's settings.
    pub fn report(&self, mode: &str) -> Report {
        let mut r = self.common.report(mode);
        r.str("service", &self.common.service);
        r.str("node", &self.common.node);
        r
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let job = match cli.mode {
        Mode::Table { files } => return print_runs(&files, report::combined_table),
        Mode::Compare { files } => return print_runs(&files, compare::table),
        Mode::Websub { common, args } => Job::Http(common, http::Run::Websub(args)),
        Mode::Pull { common, args } => Job::Xmpp(common, Run::Pull(args)),
        Mode::Publish { common, args } => Job::Xmpp(common, Run::Publish(args)),
        Mode::Fanout { common, args } => Job::Xmpp(common, Run::Fanout(args)),
        Mode::Create { common, args } => Job::Xmpp(common, Run::Create(args)),
        Mode::Canned { common, args } => Job::Xmpp(common, Run::Canned(args)),
        Mode::HttpPull { common, args } => Job::Http(common, http::Run::Pull(args)),
        Mode::HttpPublish { common, args } => Job::Http(common, http::Run::Publish(args)),
        Mode::HttpLongpoll { common, args } => Job::Http(common, http::Run::Longpoll(args)),
        Mode::HttpArchive { common, args } => Job::Http(common, http::Run::Archive(args)),
        Mode::HttpFanout { common, args } => Job::Http(common, http::Run::Fanout(args)),
    };
    let (opts, loopback, target) = match &job {
        Job::Xmpp(c, _) => (&c.run, c.server.ip().is_loopback(), format!("--server {}", c.server)),
        Job::Http(h, _) => (&h.run, h.is_loopback(), format!("--base {}", h.base)),
    };
    if !loopback {
        eprintln!("smartfeeds-load: {target} is not a loopback address; refusing");
        return ExitCode::from(2);
    }
    if let Err(e) = opts.check() {
        eprintln!("smartfeeds-load: {e}");
        return ExitCode::from(2);
    }
    let rt = if opts.threads == 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(opts.threads as usize).enable_all().build()
    };
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("smartfeeds-load: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = rt.block_on(async move {
        match job {
            Job::Xmpp(common, mode) => run(common, mode).await,
            Job::Http(common, mode) => http::run(common, mode).await,
        }
    });
    match outcome {
        Ok(report) => {
            eprint!("{}", report.table());
            println!("{}", report.json());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("smartfeeds-load: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A run over one face.
enum Job {
    Xmpp(Common, Run),
    Http(http::HttpCommon, http::Run),
}

enum Run {
    Pull(pull::PullArgs),
    Publish(publish::PublishArgs),
    Fanout(fanout::FanoutArgs),
    Create(create::CreateArgs),
    Canned(canned::CannedArgs),
}

async fn run(common: Common, mode: Run) -> Result<Report, String> {
    let (link, inbox) = Link::connect(common.server, &common.component, &common.secret)
        .await
        .map_err(|e| format!("cannot log in as {} at {}: {e}", common.component, common.server))?;
    let deadline = Instant::now() + Duration::from_secs_f64(common.duration);
    let ctx = Ctx { link, common, deadline };
    let result = match mode {
        Run::Fanout(args) => fanout::run(&ctx, &args, inbox).await,
        other => {
            // Nothing is expected in the inbox.
            inbox.drain();
            match other {
                Run::Pull(args) => pull::run(&ctx, &args).await,
                Run::Publish(args) => publish::run(&ctx, &args).await,
                Run::Create(args) => create::run(&ctx, &args).await,
                Run::Canned(args) => canned::run(&ctx, &args).await,
                Run::Fanout(_) => unreachable!("handled above"),
            }
        }
    };
    if let Some(why) = ctx.link.closed_reason() {
        eprintln!("smartfeeds-load: the stream ended during the run: {why}");
    }
    ctx.link.close();
    // Give the writer a moment to send the footer.
    tokio::time::sleep(Duration::from_millis(50)).await;
    result
}

/// Reads JSON lines of earlier runs and prints them with `show`.
fn print_runs(files: &[PathBuf], show: fn(&[serde_json::Map<String, serde_json::Value>]) -> String) -> ExitCode {
    let text = if files.is_empty() {
        std::io::read_to_string(std::io::stdin()).map_err(|e| format!("stdin: {e}"))
    } else {
        files
            .iter()
            .map(|f| std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display())))
            .collect::<Result<Vec<_>, _>>()
            .map(|t| t.join("\n"))
    };
    let text = match text {
        Ok(t) => t,
        Err(e) => {
            eprintln!("smartfeeds-load: cannot read {e}");
            return ExitCode::FAILURE;
        }
    };
    let runs: Vec<_> =
        text.lines().filter(|l| l.trim_start().starts_with('{')).filter_map(report::parse_line).collect();
    print!("{}", show(&runs));
    ExitCode::SUCCESS
}
