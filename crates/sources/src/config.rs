//! `[sources]` and each feed's `source`/`source_interval` (SPEC §13), as the configuration
//! file gives them; [`Source::parse`] turns a `source` string into where to fetch from.

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use url::Url;

/// The shortest interval between two fetches of one source, seconds.
pub const MIN_INTERVAL: u64 = 30;
/// The interval when a feed sets none, seconds.
pub const DEFAULT_INTERVAL: u64 = 900;
/// The longest a failing source waits between two attempts: one day.
pub const MAX_BACKOFF: Duration = Duration::from_secs(86_400);

/// `[sources]`: settings for every source.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SourcesConfig {
    /// Seconds one request of a fetch may take.
    pub timeout: u64,
    /// The largest document read, bytes (decoded); larger: that fetch fails.
    pub max_bytes: u64,
    /// The most entries imported through archives on a first fetch.
    pub max_history: u64,
    /// Whether loopback, private, link-local and multicast addresses may be fetched.
    pub allow_private: bool,
}

impl Default for SourcesConfig {
    fn default() -> Self {
        SourcesConfig { timeout: 30, max_bytes: 10 << 20, max_history: 10_000, allow_private: false }
    }
}

impl SourcesConfig {
    /// Why these settings cannot be used, if they cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.timeout == 0 || self.timeout > 3600 {
            return Err("sources.timeout must be 1 to 3600 seconds".into());
        }
        if self.max_bytes < 1024 || self.max_bytes > 1 << 30 {
            return Err("sources.max_bytes must be 1024 to 1073741824".into());
        }
        if self.max_history > 1_000_000 {
            return Err("sources.max_history must be at most 1000000".into());
        }
        Ok(())
    }
}

/// Where a source's documents come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// An `http://` or `https://` URL.
    Web(Url),
    /// A file, read as the process's user.
    File(PathBuf),
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Web(u) => f.write_str(u.as_str()),
            Location::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// One feed's source, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// The feed it publishes into.
    pub feed: String,
    /// As configured: what pings name.
    pub configured: String,
    pub location: Location,
    pub interval: Duration,
}

impl Source {
    /// Checks a feed's `source` and `source_interval`: a string with `://` must be an
    /// `http`/`https` URL with a host; anything else is a file path, relative to `base` (the
    /// configuration file's directory). The interval is at least [`MIN_INTERVAL`].
    pub fn parse(feed: &str, source: &str, interval: Option<u64>, base: &Path) -> Result<Source, String> {
        let interval = interval.unwrap_or(DEFAULT_INTERVAL);
        if interval < MIN_INTERVAL {
            return Err(format!("feeds.{feed}: source_interval {interval} is below {MIN_INTERVAL} seconds"));
        }
        let location = if source.contains("://") {
            let url = Url::parse(source).map_err(|e| format!("feeds.{feed}: source {source:?} is not a URL ({e})"))?;
            if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
                return Err(format!("feeds.{feed}: source {source:?} is not an http:// or https:// URL with a host"));
            }
            Location::Web(url)
        } else if source.trim().is_empty() {
            return Err(format!("feeds.{feed}: source is empty"));
        } else {
            Location::File(base.join(source))
        };
        Ok(Source {
            feed: feed.to_string(),
            configured: source.to_string(),
            location,
            interval: Duration::from_secs(interval),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_urls_or_paths_with_an_interval_of_at_least_30_seconds() {
        let base = Path::new("/etc/smartfeeds");
        let s = Source::parse("a", "https://example.com/feed.xml", None, base).unwrap();
        assert_eq!(s.interval, Duration::from_secs(900));
        assert!(matches!(s.location, Location::Web(_)));
        let s = Source::parse("a", "demo/feed.xml", Some(30), base).unwrap();
        assert_eq!(s.location, Location::File(PathBuf::from("/etc/smartfeeds/demo/feed.xml")));
        assert!(Source::parse("a", "/abs.xml", None, base).unwrap().location == Location::File("/abs.xml".into()));
        for (src, interval, needle) in [
            ("https://x/", Some(29), "below 30"),
            ("ftp://example.com/f", None, "not an http"),
            ("http://", None, "not a URL"),
            ("", None, "empty"),
        ] {
            let err = Source::parse("a", src, interval, base).unwrap_err();
            assert!(err.contains(needle), "{src}: {err}");
        }
        assert!(SourcesConfig::default().validate().is_ok());
        assert!(SourcesConfig { timeout: 0, ..Default::default() }.validate().is_err());
        assert!(SourcesConfig { max_bytes: 10, ..Default::default() }.validate().is_err());
    }
}
