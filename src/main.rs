//! The `smartfeeds` command: parse the command line, load the configuration, set up logging,
//! and run the component until SIGTERM or ctrl-c.

#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use smartfeeds::config::Config;
use std::path::PathBuf;
use std::process::ExitCode;

/// Smart Feeds as XMPP pubsub nodes: an external component (XEP-0114) that keeps feeds in
/// SQLite, pages them with RSM over stable cursors, and pushes every change to subscribers
/// with sync headers.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None, after_long_help = AFTER_HELP)]
struct Cli {
    /// The configuration file (TOML).
    #[arg(long, short, global = true, default_value = "smartfeeds.toml", value_name = "FILE")]
    config: PathBuf,
    /// Log as JSON lines instead of human-readable text.
    #[arg(long, global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the component (the default).
    Run,
    /// Validate the configuration and exit: 0 when it is usable, 2 with the reason when not.
    CheckConfig,
}

/// jemalloc instead of glibc's malloc: a held request, a woken long-poll and an event are
/// many small short-lived allocations across worker threads, where glibc's arenas spent a
/// third of the service's CPU (BENCHMARKS.md, "The HTTP face").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const AFTER_HELP: &str = "\
ENVIRONMENT:
    SMARTFEEDS_SECRET   overrides component.secret
    RUST_LOG            log filter, e.g. info or smartfeeds=debug (default: info)

SIGNALS:
    SIGTERM, SIGINT     stop taking requests, finish or fail those in flight, close the
                        stream and exit 0

EXIT STATUS:
    0 success, 1 runtime failure, 2 unusable configuration";

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(&cli.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("smartfeeds: configuration error: {e}");
            return ExitCode::from(2);
        }
    };
    match cli.command.unwrap_or(Command::Run) {
        Command::CheckConfig => {
            let sources = config.feeds.iter().filter(|f| f.source.is_some()).count();
            println!(
                "{}: ok ({} feeds, {sources} with a source, component {})",
                cli.config.display(),
                config.feeds.len(),
                config.component.jid
            );
            ExitCode::SUCCESS
        }
        Command::Run => {
            smartfeeds::logging::init(cli.log_json);
            let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("smartfeeds: cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match rt.block_on(smartfeeds::app::run(config)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
