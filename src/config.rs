//! The TOML configuration: parsed with serde (unknown keys are errors, so a typo never goes
//! unnoticed), then validated into values the rest of the program can trust.

use feed::Order;
use feed::policy::{self, FeedPolicy, Policy};
use serde::Deserialize;
use std::collections::BTreeMap;

pub use http::hub::config::HubConfig;
use std::path::{Path, PathBuf};

/// The whole configuration file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Bare JIDs that may publish anywhere and, with `autocreate`, create feeds.
    #[serde(default)]
    pub admins: Vec<String>,
    /// Whether an admin's publish to an unknown feed creates it.
    #[serde(default)]
    pub autocreate: bool,
    pub component: ComponentConfig,
    #[serde(default)]
    pub store: StoreConfig,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub push: PushConfig,
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// The HTTP face (SPEC §9, §11); no HTTP listener when absent.
    #[serde(default)]
    pub http: Option<HttpConfig>,
    /// The WebSub hub (SPEC §10); it runs whenever `[http]` does.
    #[serde(default)]
    pub hub: HubConfig,
    /// How outbound requests (WebSub callbacks) resolve names.
    #[serde(default)]
    pub outbound: outbound::OutboundConfig,
    /// Settings for every feed's source (SPEC §13).
    #[serde(default)]
    pub sources: sources::SourcesConfig,
    #[serde(default)]
    pub feeds: Vec<FeedConfig>,
    /// The configuration file's directory: relative source paths are read from there.
    #[serde(skip)]
    pub dir: PathBuf,
}

/// The HTTP face: `[http]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// `ip:port` to listen on.
    #[serde(default = "default_http_listen")]
    pub listen: std::net::SocketAddr,
    /// The public prefix written into links; `http://LISTEN` when absent.
    #[serde(default)]
    pub base_url: Option<String>,
    /// The longest long-poll a client may ask for, seconds.
    #[serde(default = "default_max_timeout")]
    pub max_timeout: u64,
    /// `Cache-Control: max-age` of pull answers, seconds.
    #[serde(default)]
    pub cache_max_age: u64,
    /// Items per archive document (SPEC §11).
    #[serde(default = "default_archive_page")]
    pub archive_page: u64,
    /// `Cache-Control: max-age` of full archive documents, seconds.
    #[serde(default = "default_archive_max_age")]
    pub archive_max_age: u64,
    /// The most HTTP connections open at once; past it new ones wait in the listen backlog
    /// until one closes. Held long-polls and event streams count.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// The most requests held at once (long-polls waiting, event streams); past it, 503 with
    /// `Retry-After`. Fewer than `max_connections`, so that held requests never take the
    /// places publishes and pulls need. Default: all but a tenth of `max_connections`.
    #[serde(default)]
    pub max_held: Option<usize>,
    /// Seconds a request's head (request line and headers) may take to arrive, counted from
    /// the moment the connection is ready for it; also how long a kept-alive connection may
    /// sit idle.
    #[serde(default = "default_header_timeout")]
    pub header_timeout: u64,
    /// Proxies (addresses or CIDR networks) whose `proxy_header` names the client's address
    /// (its rate bucket); from any other peer forwarding headers are ignored.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// The header the trusted proxies write the client's address in: `x-forwarded-for` or
    /// `forwarded` (RFC 7239). Only that one is read: the other is the client's own.
    #[serde(default = "default_proxy_header")]
    pub proxy_header: String,
    /// Who an HTTP request is: `Authorization: Bearer TOKEN` acts as `jid`.
    #[serde(default)]
    pub tokens: Vec<HttpToken>,
}

fn default_http_listen() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], 8080))
}
fn default_proxy_header() -> String {
    "x-forwarded-for".into()
}
fn default_max_timeout() -> u64 {
    300
}
fn default_max_connections() -> usize {
    10_000
}
fn default_header_timeout() -> u64 {
    10
}
fn default_archive_page() -> u64 {
    100
}
fn default_archive_max_age() -> u64 {
    3600
}

/// Shortest bearer token accepted.
pub const MIN_TOKEN_LEN: usize = 16;

/// One `[[http.tokens]]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpToken {
    pub jid: String,
    pub token: String,
}

impl std::fmt::Debug for HttpToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpToken").field("jid", &self.jid).field("token", &"<redacted>").finish()
    }
}

impl HttpConfig {
    /// The public prefix, without a trailing `/`.
    pub fn base(&self) -> String {
        match &self.base_url {
            Some(b) => b.trim_end_matches('/').to_string(),
            None => format!("http://{}", self.listen),
        }
    }

    /// `trusted_proxies` and `proxy_header`, parsed.
    pub fn trusted_proxies(&self) -> Result<http::client_addr::TrustedProxies, String> {
        let header =
            http::client_addr::ProxyHeader::parse(&self.proxy_header).map_err(|why| format!("proxy_header: {why}"))?;
        http::client_addr::TrustedProxies::parse(self.trusted_proxies.iter().map(String::as_str), header)
            .map_err(|why| format!("trusted_proxies: {why}"))
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |msg: String| Err(ConfigError::Invalid(msg));
        if let Some(b) = &self.base_url
            && !(b.starts_with("http://") || b.starts_with("https://"))
        {
            return bad(format!("http.base_url {b:?} is not an http:// or https:// URL"));
        }
        if self.max_timeout == 0 || self.max_timeout > 3600 {
            return bad("http.max_timeout must be 1 to 3600 seconds".into());
        }
        if self.max_connections == 0 || self.max_connections > 1_000_000 {
            return bad("http.max_connections must be 1 to 1000000".into());
        }
        if self.max_held.is_some_and(|h| h >= self.max_connections) {
            return bad(
                "http.max_held must be less than http.max_connections: held requests must leave places for the others"
                    .into(),
            );
        }
        if self.header_timeout == 0 || self.header_timeout > 300 {
            return bad("http.header_timeout must be 1 to 300 seconds".into());
        }
        if let Err(why) = self.trusted_proxies() {
            return bad(format!("http.{why}"));
        }
        if self.archive_page == 0 || self.archive_page > 10_000 {
            return bad("http.archive_page must be 1 to 10000".into());
        }
        let mut seen = std::collections::HashSet::new();
        for (n, t) in self.tokens.iter().enumerate() {
            check_bare_jid(&format!("http.tokens[{n}].jid"), &t.jid)?;
            if t.token.chars().count() < MIN_TOKEN_LEN {
                return bad(format!(
                    "http.tokens[{n}] ({}): the token is shorter than {MIN_TOKEN_LEN} characters",
                    t.jid
                ));
            }
            if t.token.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return bad(format!("http.tokens[{n}] ({}): the token holds blanks or control characters", t.jid));
            }
            if !seen.insert(t.token.as_str()) {
                return bad(format!("http.tokens[{n}] ({}): the same token is given twice", t.jid));
            }
        }
        Ok(())
    }
}

/// The Prometheus endpoint.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// A loopback `ip:port` to serve `GET /metrics` on; off when absent.
    pub listen: Option<std::net::SocketAddr>,
}

/// How pushes are queued (see `xmpp::notify` for the policy).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PushConfig {
    /// Committed changes waiting to be fanned out; past this, new changes are not pushed
    /// (subscribers notice the gap through `PreviousCursor` and pull).
    pub backlog: usize,
    /// Push messages waiting for the link.
    pub queue: usize,
    /// Permanent delivery errors in a row after which a JID's subscriptions are removed.
    pub bounce_limit: u32,
    /// Whether to look for the server's XEP-0033 multicast service at each login and send
    /// each change once per view through it (see `xmpp::multicast`). Off: one push message
    /// per subscriber, as with a server that has no such service.
    pub multicast: bool,
}

impl Default for PushConfig {
    fn default() -> Self {
        PushConfig { backlog: 10_000, queue: 65_536, bounce_limit: 3, multicast: true }
    }
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentConfig {
    /// The component's domain, e.g. `feeds.localhost`.
    pub jid: String,
    /// The shared secret; `SMARTFEEDS_SECRET` overrides it. Never logged.
    #[serde(default)]
    pub secret: String,
    /// The server's component port, `host:port`; or several (`["a:5347", "b:5347"]`),
    /// tried in turn: each instance may attach to another node of a cluster and move when
    /// its node goes.
    #[serde(default = "default_server", deserialize_with = "one_or_many")]
    pub server: Vec<String>,
}

/// A string, or a list of strings.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

impl std::fmt::Debug for ComponentConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentConfig")
            .field("jid", &self.jid)
            .field("secret", &"<redacted>")
            .field("server", &self.server)
            .finish()
    }
}

fn default_server() -> Vec<String> {
    vec!["127.0.0.1:5347".into()]
}

#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// The SQLite file, created with its schema on first start (`smartfeeds.db` when neither
    /// this nor `url` is set).
    pub path: Option<PathBuf>,
    /// A PostgreSQL database, `postgres://USER@HOST:PORT/DB`, instead of `path`: several
    /// processes may then serve one component domain (SPEC §12).
    pub url: Option<String>,
}

/// Where the feeds are kept, as configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreBackend<'a> {
    Sqlite(&'a Path),
    Postgres(&'a str),
}

impl StoreConfig {
    /// The store to open. Validation has checked that at most one of `path` and `url` is set.
    pub fn backend(&self) -> StoreBackend<'_> {
        match (&self.path, &self.url) {
            (_, Some(url)) => StoreBackend::Postgres(url),
            (Some(path), None) => StoreBackend::Sqlite(path),
            (None, None) => StoreBackend::Sqlite(Path::new("smartfeeds.db")),
        }
    }

    /// The store for logs and errors: the URL without its password.
    pub fn describe(&self) -> String {
        match self.backend() {
            StoreBackend::Sqlite(path) => path.display().to_string(),
            StoreBackend::Postgres(url) => redact(url),
        }
    }
}

/// A URL with the password of its user part, if any, replaced by `***`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let end = rest.find('/').unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => match rest[..at].split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***{}", &rest[at..]),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// Never prints a password the URL may hold.
impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig").field("path", &self.path).field("url", &self.url.as_deref().map(redact)).finish()
    }
}

pub use feed::policy::Limits;

/// Who may read a feed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Anyone may pull and subscribe.
    #[default]
    Open,
    /// Only `allowed` JIDs (plus publishers and admins).
    Whitelist,
}

/// When a subscriber is sent the last published item (XEP-0060 §12.12's values this
/// service implements).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SendLast {
    /// Never: the clients that show feeds (Movim, Libervia) read the first page themselves
    /// right after subscribing, and would show the pushed item twice; a Smart Feeds client
    /// pulls from its own cursor.
    #[default]
    Never,
    /// Right after the subscription's result, as an ordinary push.
    OnSub,
}

/// One `[[feeds]]` entry.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedConfig {
    pub name: String,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// Bare JIDs that may publish and retract in this feed.
    #[serde(default)]
    pub publishers: Vec<String>,
    /// `created`, `-created`, `modified` or `-modified`; `-created` when absent.
    #[serde(default)]
    pub default_order: Option<String>,
    #[serde(default)]
    pub access: Access,
    /// Pushes carry a `<body>` (the entry's title and link), so chat clients show them.
    #[serde(default)]
    pub push_body: bool,
    /// Whether a new subscription is pushed the view's last published item at once.
    #[serde(default)]
    pub send_last_published_item: SendLast,
    /// For `whitelist` feeds: bare JIDs, or `*@domain` for a whole domain.
    #[serde(default)]
    pub allowed: Vec<String>,
    /// A feed document elsewhere whose entries become this feed's items (SPEC §13): an
    /// `http(s)://` URL or a file path (relative to the configuration file).
    #[serde(default)]
    pub source: Option<String>,
    /// Seconds between two fetches of `source` (default 900, at least 30).
    #[serde(default)]
    pub source_interval: Option<u64>,
}

/// Why a configuration cannot be used. The message says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {err}")]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{path}: {err}")]
    Toml { path: PathBuf, err: Box<toml::de::Error> },
    #[error("{0}")]
    Invalid(String),
}

impl Config {
    /// Reads, parses, applies environment overrides and validates.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Read { path: path.to_owned(), err })?;
        let mut cfg = Config::parse(&text).map_err(|e| match e {
            ConfigError::Toml { err, .. } => ConfigError::Toml { path: path.to_owned(), err },
            other => other,
        })?;
        cfg.dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        if let Ok(secret) = std::env::var("SMARTFEEDS_SECRET") {
            cfg.component.secret = secret;
        }
        if let Some(http) = &mut cfg.http {
            for (n, t) in http.tokens.iter_mut().enumerate() {
                if let Ok(token) = std::env::var(format!("SMARTFEEDS_HTTP_TOKEN_{n}")) {
                    t.token = token;
                }
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Parses TOML text (no environment, no validation).
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|err| ConfigError::Toml { path: PathBuf::new(), err: Box::new(err) })
    }

    /// Checks everything serde cannot: JIDs, feed names, orders, limits.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |msg: String| Err(ConfigError::Invalid(msg));
        match jid::Jid::new(&self.component.jid) {
            Ok(j) if j.node().is_none() && j.resource().is_none() => {}
            _ => return bad(format!("component.jid {:?} is not a domain JID", self.component.jid)),
        }
        if self.component.secret.is_empty() {
            return bad("component.secret is empty (set it, or SMARTFEEDS_SECRET)".into());
        }
        if self.component.server.is_empty() {
            return bad("component.server is an empty list".into());
        }
        for server in &self.component.server {
            if server.parse::<std::net::SocketAddr>().is_err() && !server.contains(':') {
                return bad(format!("component.server {server:?} is not host:port"));
            }
        }
        for a in &self.admins {
            check_bare_jid("admins", a)?;
        }
        if self.store.path.is_some() && self.store.url.is_some() {
            return bad("store: set either path (SQLite) or url (PostgreSQL), not both".into());
        }
        if let Some(url) = &self.store.url
            && let Err(why) = store_postgres::parse_url(url)
        {
            return bad(format!("store.url {:?}: {why}", redact(url)));
        }
        let l = &self.limits;
        if l.default_page == 0 || l.max_page == 0 || l.default_page > l.max_page {
            return bad("limits: need 0 < default_page <= max_page".into());
        }
        if l.max_payload_bytes == 0
            || l.max_ids == 0
            || l.max_subscriptions_per_jid == 0
            || l.max_subscriptions_per_feed == 0
        {
            return bad("limits: max_payload_bytes, max_ids and max_subscriptions_* must be positive".into());
        }
        if !(l.requests_per_second > 0.0 && l.request_burst >= 1.0 && l.request_backlog >= 0.0) {
            return bad("limits: need requests_per_second > 0, request_burst >= 1, request_backlog >= 0".into());
        }
        if l.requests_per_domain == 0 {
            return bad("limits: requests_per_domain must be positive".into());
        }
        if let Some(addr) = self.metrics.listen
            && !addr.ip().is_loopback()
        {
            return bad(format!("metrics.listen {addr} is not a loopback address (metrics are not for the network)"));
        }
        if let Some(http) = &self.http {
            http.validate()?;
            if http.archive_page > l.max_page {
                return bad(format!(
                    "http.archive_page {} is larger than limits.max_page {}",
                    http.archive_page, l.max_page
                ));
            }
        }
        self.hub.validate().map_err(ConfigError::Invalid)?;
        let p = &self.push;
        if p.backlog == 0 || p.queue == 0 || p.bounce_limit == 0 {
            return bad("push: backlog, queue and bounce_limit must be positive".into());
        }
        let mut seen = BTreeMap::new();
        for f in &self.feeds {
            if !feed::node::valid_feed_name(&f.name) {
                return bad(format!(
                    "feeds: name {:?} is not a valid feed name (no ? & = # % or control characters)",
                    f.name
                ));
            }
            if seen.insert(f.name.as_str(), ()).is_some() {
                return bad(format!("feeds: {:?} is defined twice", f.name));
            }
            if let Some(o) = &f.default_order
                && Order::parse(o).is_none()
            {
                return bad(format!(
                    "feeds.{}: default_order {o:?} is not created, -created, modified or -modified",
                    f.name
                ));
            }
            for p in &f.publishers {
                check_bare_jid(&format!("feeds.{}.publishers", f.name), p)?;
            }
            for p in &f.allowed {
                let jid = p.strip_prefix("*@").unwrap_or(p);
                check_bare_jid(&format!("feeds.{}.allowed", f.name), jid)?;
            }
        }
        self.sources.validate().map_err(ConfigError::Invalid)?;
        for f in &self.feeds {
            if f.source.is_none() && f.source_interval.is_some() {
                return bad(format!("feeds.{}: source_interval is set but there is no source", f.name));
            }
        }
        for s in self.feed_sources()? {
            if let sources::Location::Web(url) = &s.location
                && !self.sources.allow_private
                && names_a_private_host(url)
            {
                return bad(format!(
                    "feeds.{}: source {:?} is a loopback, private, link-local or multicast address \
                     (set sources.allow_private = true to allow it)",
                    s.feed, s.configured
                ));
            }
        }
        Ok(())
    }

    /// Every feed's source, checked (URL or path, interval).
    pub fn feed_sources(&self) -> Result<Vec<sources::Source>, ConfigError> {
        self.feeds
            .iter()
            .filter_map(|f| f.source.as_ref().map(|s| (f, s)))
            .map(|(f, s)| {
                sources::Source::parse(&f.name, s, f.source_interval, &self.dir).map_err(ConfigError::Invalid)
            })
            .collect()
    }
}

/// Whether a URL's host is, as written, a local name or an address that is not public (a
/// name resolving to one is refused when it is fetched: names may change).
fn names_a_private_host(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(name)) => outbound::is_local_name(name),
        Some(url::Host::Ipv4(ip)) => !outbound::is_public(ip.into()),
        Some(url::Host::Ipv6(ip)) => !outbound::is_public(ip.into()),
        None => true,
    }
}

impl Config {
    /// The settings of `[http]` the HTTP face's handlers use.
    pub fn http_settings(&self, c: &HttpConfig) -> http::Settings {
        http::Settings {
            base: c.base(),
            max_timeout: c.max_timeout,
            cache_max_age: c.cache_max_age,
            archive_page: c.archive_page,
            archive_max_age: c.archive_max_age,
            component_jid: self.component.jid.clone(),
            // Checked by `validate`.
            trusted_proxies: c.trusted_proxies().unwrap_or_default(),
        }
    }

    /// The core's rules, built once at start from a validated configuration: orders parsed,
    /// JIDs in their canonical bare form, feeds by name.
    pub fn policy(&self) -> Policy {
        let feeds = self.feeds.iter().map(|f| (f.name.clone(), f.policy())).collect();
        Policy {
            admins: self.admins.iter().map(|a| canonical_jid(a)).collect(),
            autocreate: self.autocreate,
            feeds,
            limits: self.limits.clone(),
            bounce_limit: self.push.bounce_limit,
        }
    }
}

impl FeedConfig {
    fn policy(&self) -> FeedPolicy {
        let (domains, jids): (Vec<&String>, Vec<&String>) = self.allowed.iter().partition(|a| a.starts_with("*@"));
        FeedPolicy {
            title: self.title.clone(),
            description: self.description.clone(),
            publishers: self.publishers.iter().map(|p| canonical_jid(p)).collect(),
            order: self.default_order.as_deref().and_then(Order::parse).unwrap_or_default(),
            access: match self.access {
                Access::Open => policy::Access::Open,
                Access::Whitelist => policy::Access::Whitelist,
            },
            allowed: jids.into_iter().map(|j| canonical_jid(j)).collect(),
            allowed_domains: domains.into_iter().map(|d| canonical_jid(&d[2..])).collect(),
            push_body: self.push_body,
            last_on_subscribe: self.send_last_published_item == SendLast::OnSub,
        }
    }
}

/// A validated bare JID as the JID parser writes it (as senders' JIDs are compared).
pub fn canonical_jid(s: &str) -> String {
    jid::BareJid::new(s).map_or_else(|_| s.to_string(), |j| j.to_string())
}

fn check_bare_jid(what: &str, s: &str) -> Result<(), ConfigError> {
    match jid::BareJid::new(s) {
        Ok(_) => Ok(()),
        Err(e) => Err(ConfigError::Invalid(format!("{what}: {s:?} is not a bare JID ({e})"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
admins = ["admin@localhost"]
autocreate = true
[component]
jid = "feeds.localhost"
secret = "s"
[[feeds]]
name = "comments"
publishers = ["bot@localhost"]
access = "whitelist"
allowed = ["bob@x", "*@example.net"]
"#;

    #[test]
    fn good_config_parses_with_defaults() {
        let c = Config::parse(GOOD).unwrap();
        c.validate().unwrap();
        assert_eq!(c.component.server, ["127.0.0.1:5347"]);
        assert_eq!(c.limits.max_page, 500);
        let p = c.policy();
        let comments = p.feed("comments");
        assert_eq!(comments.order, Order::NEWEST_FIRST);
        assert_eq!(comments.access, policy::Access::Whitelist);
        assert!(comments.allowed.contains("bob@x") && comments.allowed_domains.contains("example.net"));
        assert!(p.is_admin("admin@localhost") && comments.publishers.contains("bot@localhost"));
        assert!(!format!("{:?}", c.component).contains("\"s\""), "secret must not be printed");
    }

    #[test]
    fn the_store_is_sqlite_by_default_or_postgres_by_url_without_printing_its_password() {
        let c = Config::parse(GOOD).unwrap();
        assert_eq!(c.store.backend(), StoreBackend::Sqlite(Path::new("smartfeeds.db")));
        let with =
            |store: &str| Config::parse(&GOOD.replace("[[feeds]]", &format!("[store]\n{store}\n[[feeds]]"))).unwrap();
        let c = with("path = \"/var/lib/x.db\"");
        c.validate().unwrap();
        assert_eq!(c.store.backend(), StoreBackend::Sqlite(Path::new("/var/lib/x.db")));
        let c = with("url = \"postgres://feeds:s3cret@db.example:5433/feeds\"");
        c.validate().unwrap();
        assert_eq!(c.store.backend(), StoreBackend::Postgres("postgres://feeds:s3cret@db.example:5433/feeds"));
        assert_eq!(c.store.describe(), "postgres://feeds:***@db.example:5433/feeds");
        assert!(!format!("{c:?}").contains("s3cret"), "the password is not printed");
        assert_eq!(redact("postgresql://u@h/d"), "postgresql://u@h/d");
    }

    #[test]
    fn the_server_is_one_address_or_a_list_tried_in_turn() {
        let with = |server: &str| {
            Config::parse(&GOOD.replace("secret = \"s\"", &format!("secret = \"s\"\nserver = {server}")))
        };
        let c = with("\"10.0.0.1:5347\"").unwrap();
        assert_eq!(c.component.server, ["10.0.0.1:5347"]);
        let c = with("[\"a.example:5347\", \"b.example:5348\"]").unwrap();
        c.validate().unwrap();
        assert_eq!(c.component.server, ["a.example:5347", "b.example:5348"]);
        let err = with("[]").unwrap().validate().unwrap_err().to_string();
        assert!(err.contains("empty"), "{err}");
        let err = with("[\"a:1\", \"nowhere\"]").unwrap().validate().unwrap_err().to_string();
        assert!(err.contains("\"nowhere\" is not host:port"), "{err}");
        assert!(with("5347").is_err());
    }

    #[test]
    fn sources_are_checked_and_relative_paths_read_beside_the_configuration() {
        let text = GOOD.replace("publishers =", "source = \"demo/feed.xml\"\nsource_interval = 30\npublishers =");
        let mut c = Config::parse(&text).unwrap();
        c.dir = PathBuf::from("/etc/smartfeeds");
        c.validate().unwrap();
        let s = c.feed_sources().unwrap();
        assert_eq!(s[0].location, sources::Location::File("/etc/smartfeeds/demo/feed.xml".into()));
        assert_eq!(s[0].interval, std::time::Duration::from_secs(30));
        let text = GOOD
            .replace("publishers =", "source = \"http://127.0.0.1:9/f\"\npublishers =")
            .replace("[[feeds]]", "[sources]\nallow_private = true\n[[feeds]]");
        Config::parse(&text).unwrap().validate().unwrap();
    }

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let err = Config::parse(&GOOD.replace("autocreate", "autocreat")).unwrap_err().to_string();
        assert!(err.contains("autocreat") && err.contains("line 3"), "{err}");
    }

    #[test]
    fn invalid_values_say_what_to_fix() {
        let cases = [
            (GOOD.replace("feeds.localhost", "a@b/c"), "component.jid"),
            (GOOD.replace("\"bot@localhost\"", "\"bot@@x\""), "publishers"),
            (GOOD.replace("name = \"comments\"", "name = \"a?b\""), "valid feed name"),
            (GOOD.replace("access = \"whitelist\"", "default_order = \"up\""), "default_order"),
            (GOOD.replace("secret = \"s\"", "secret = \"\""), "secret"),
            (GOOD.replace("[[feeds]]", "[limits]\nrequests_per_domain = 0\n[[feeds]]"), "requests_per_domain"),
            (GOOD.replace("[[feeds]]", "[http]\nlisten = \"nowhere\"\n[[feeds]]"), "listen"),
            (GOOD.replace("[[feeds]]", "[http]\nmax_connections = 0\n[[feeds]]"), "http.max_connections"),
            (GOOD.replace("[[feeds]]", "[http]\nheader_timeout = 0\n[[feeds]]"), "http.header_timeout"),
            (GOOD.replace("[[feeds]]", "[http]\nmax_connections = 100\nmax_held = 100\n[[feeds]]"), "http.max_held"),
            (GOOD.replace("[[feeds]]", "[http]\nproxy_header = \"x-real-ip\"\n[[feeds]]"), "http.proxy_header"),
            (
                GOOD.replace("[[feeds]]", "[http]\ntrusted_proxies = [\"10.0.0.0/40\"]\n[[feeds]]"),
                "http.trusted_proxies",
            ),
            (
                GOOD.replace("[[feeds]]", "[[http.tokens]]\njid = \"a@b\"\ntoken = \"short\"\n[[feeds]]"),
                "shorter than 16",
            ),
            (
                GOOD.replace(
                    "[[feeds]]",
                    "[[http.tokens]]\njid = \"a@b\"\ntoken = \"0123456789abcdef\"\n\
                     [[http.tokens]]\njid = \"c@d\"\ntoken = \"0123456789abcdef\"\n[[feeds]]",
                ),
                "twice",
            ),
            (GOOD.replace("publishers =", "source_interval = 60\npublishers ="), "no source"),
            (
                GOOD.replace("publishers =", "source = \"https://x.example/f\"\nsource_interval = 10\npublishers ="),
                "below 30",
            ),
            (GOOD.replace("publishers =", "source = \"gopher://x.example/f\"\npublishers ="), "not an http"),
            (GOOD.replace("publishers =", "source = \"http://127.0.0.1:9/f\"\npublishers ="), "allow_private"),
            (GOOD.replace("publishers =", "source = \"http://localhost/f\"\npublishers ="), "allow_private"),
            (GOOD.replace("[[feeds]]", "[sources]\ntimeout = 0\n[[feeds]]"), "sources.timeout"),
            (GOOD.replace("[[feeds]]", "[sources]\nmax_bytes = 5\n[[feeds]]"), "sources.max_bytes"),
            (GOOD.replace("[[feeds]]", "[store]\npath = \"a.db\"\nurl = \"postgres://u@h/d\"\n[[feeds]]"), "not both"),
            (GOOD.replace("[[feeds]]", "[store]\nurl = \"mysql://u@h/d\"\n[[feeds]]"), "postgres://"),
            (GOOD.replace("[[feeds]]", "[store]\nurl = \"postgres://u@h:notaport/d\"\n[[feeds]]"), "store.url"),
            (GOOD.replace("[[feeds]]", "[store]\nurl = \"postgres://h/d\"\n[[feeds]]"), "no user"),
            (GOOD.replace("[[feeds]]", "[store]\nurl = \"postgres://u@h/d?sslmode=require\"\n[[feeds]]"), "TLS"),
        ];
        for (text, needle) in cases {
            let err = Config::parse(&text).and_then(|c| c.validate()).unwrap_err().to_string();
            assert!(err.contains(needle), "{err} should mention {needle}");
        }
    }
}
