//! Wiring: store, service, notifier and the component link, run until shutdown.

use crate::config::Config;

/// Runs the component until SIGTERM or ctrl-c.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let _ = config;
    anyhow::bail!("the component link is not wired yet")
}
