//! The service: every operation a client can ask for, whichever face it came through, as
//! plain values in and typed outcomes out. Split by concern into files: `pull` (pages,
//! node meta-data, the feed list), `publish` (publish, update, retract), `subscriptions`,
//! `fanout` (who gets a change, and bounces), `admin`, `import` (a source's entries, one
//! transaction per fetch) and `source_status` (what `list-feeds` shows of sources), `websub` (callback subscriptions,
//! their progress and the outbox, for the WebSub hub). Every decision about who may do
//! what is asked of [`Policy::may`].

mod admin;
mod fanout;
mod import;
mod publish;
mod pull;
mod source_status;
mod subscriptions;
mod websub;

pub use fanout::{Bounce, Recipients};
pub use import::{Imported, Incoming, IncomingChange};
pub use source_status::{SourceBoard, SourceStatus};

pub use publish::{Published, Target};
pub use pull::{FeedSummary, NodeInfo, PullRequest, Readable};
pub use subscriptions::LastPublished;
pub use websub::{CallbackSubscription, Housekeeping};

use super::admission::{Admission, Limiter};
use super::error::FeedError;
use super::node::{NodeName, View};
use super::policy::{Action, Policy};
use super::ports::Store;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Milliseconds since the Unix epoch; injectable so tests can step the clock back.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(|| chrono::Utc::now().timestamp_millis())
}

/// The service over a store. Cloning is cheap: clones share the store, the policy and the
/// bounce counts.
#[derive(Clone)]
pub struct Service<S: Store> {
    store: S,
    policy: Arc<Policy>,
    clock: Clock,
    /// Permanent push failures in a row per JID (see [`fanout`]). A std mutex: never held
    /// across an await.
    bounces: Arc<Mutex<HashMap<String, u32>>>,
    /// Request rates per sender, one for every face (see [`Service::admit`]).
    admission: Arc<Limiter>,
    /// The state of each feed's source, for `list-feeds` (see [`source_status`]).
    sources: Arc<SourceBoard>,
}

impl<S: Store> Service<S> {
    pub fn new(store: S, policy: Arc<Policy>, clock: Clock) -> Self {
        let admission = Arc::new(Limiter::from_limits(&policy.limits));
        Service { store, policy, clock, bounces: Arc::default(), admission, sources: Arc::default() }
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// Asks the policy whether `actor` may do `action` on `feed`.
    pub fn may(&self, actor: &str, action: Action<'_>, feed: &str) -> Result<(), FeedError> {
        self.policy.may(actor, action, feed)
    }

    /// Whether a request may go ahead now, and after how long: `actor` is who asks (for the
    /// policy: admins are not limited), `sender` whose rate it counts against (the bare JID,
    /// or the client's address for an anonymous HTTP request). Both faces ask here, so one
    /// sender has one rate whichever way it comes.
    pub fn admit(&self, actor: &str, sender: &str) -> Admission {
        if self.policy.is_unlimited(actor) {
            return Admission::Unlimited;
        }
        self.admission.admit(sender, Instant::now())
    }

    /// Whether the store answers a read.
    pub async fn ready(&self) -> Result<(), FeedError> {
        self.store.read(|tx| Ok(tx.feeds(None, 1).map(|_| ())?)).await
    }

    /// Creates the configured feeds that the store does not have yet.
    pub async fn init(&self) -> Result<(), FeedError> {
        let names: Vec<String> = self.policy.feeds.keys().cloned().collect();
        self.store
            .write(move |tx| {
                for name in &names {
                    if tx.feed(name)?.is_none() {
                        tx.create_feed(name)?;
                    }
                }
                Ok(())
            })
            .await
    }

    /// Parses a node name into the view it means (the feed's default order filled in) and
    /// checks that `actor` may `action` it. No store access: the caller reads the feed in
    /// the same snapshot as everything else it needs.
    fn view(&self, actor: &str, node: &str, action: Action<'_>) -> Result<View, FeedError> {
        let name = NodeName::parse(node)?;
        self.may(actor, action, &name.feed)?;
        Ok(self.resolve(name))
    }

    /// The view `name` means, which `actor` may read: the one check a face makes per
    /// request before its reads of the view ([`Service::pull_view`],
    /// [`Generations::get`](crate::generations::Generations::get)), which ask no more.
    pub fn readable(&self, actor: &str, name: NodeName) -> Result<Readable, FeedError> {
        self.may(actor, Action::Read, &name.feed)?;
        Ok(Readable(self.resolve(name)))
    }

    /// [`readable`](Self::readable) for a node name as written.
    pub fn readable_node(&self, actor: &str, node: &str) -> Result<Readable, FeedError> {
        self.readable(actor, NodeName::parse(node)?)
    }

    /// The view a node name means: its feed's default order filled in where it gives none.
    /// Every face resolves views here, so a view is the same whichever way it is asked for.
    pub fn resolve(&self, name: NodeName) -> View {
        let order = self.policy.feed(&name.feed).order;
        name.resolve(order)
    }

    /// A page size asked for (or none), clamped to `[limits]`.
    pub fn page_size(&self, asked: Option<u64>) -> u64 {
        let limits = &self.policy.limits;
        asked.unwrap_or(limits.default_page).min(limits.max_page)
    }
}

/// `item-not-found` for a feed the store does not have.
fn no_feed(name: &str) -> FeedError {
    FeedError::NodeNotFound(format!("no such feed: {name}"))
}
