//! A pull of a feed URL as parsed and resolved, made once per distinct request.
//!
//! Everything a pull is besides its validators follows from who asks, the URL's feed and
//! query, and `Accept`: the view (the policy's answer included: the policy does not change
//! while the service runs), the page's size and format, the long-poll's timeout, the key of
//! its kept answers and of its shared reads. Re-armed long-polls ask the very same line
//! thousands of times after each change (the same `since=cursor:…`), and pollers the same
//! URL over and over, so the parse, the view's resolution and the keys are made once and
//! shared ([`PreparedPulls`]). A request that is refused (400, 403, 404) is not kept.

use crate::answer_cache::{Answer, AnswerCache, Made};
use crate::auth::Actor;
use crate::errors::ApiError;
use crate::formats::Format;
use crate::query::FeedQuery;
use crate::resolve::resolve;
use crate::state::HttpState;
use feed::ports::Store;
use feed::service::{PullRequest, Readable};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// Distinct requests kept; past it the kept ones are forgotten and made again as asked.
const KEEP: usize = 4096;
/// The default long-poll, seconds (SPEC §9).
const DEFAULT_TIMEOUT: u64 = 55;

/// A pull, parsed and resolved; see the module docs.
pub struct Prepared {
    pub feed: String,
    /// The view's feed URL, as asked.
    pub url: String,
    pub view: Readable,
    /// The answer's key in the kept answers (see [`crate::answer_cache`]).
    pub key: String,
    pub max: u64,
    pub format: Format,
    pub callback: Option<String>,
    pub timeout: u64,
    /// Whether an empty answer is held (SPEC §9, long-poll) rather than sent.
    pub holds: bool,
    /// Who asks and the read it asks: the key of reads shared by held requests
    /// ([`crate::serving::single_flight`]).
    pub read: Arc<(String, PullRequest)>,
    /// The last answer given and its generation: what the requests woken by one change (and
    /// the pollers of one URL) take, without a look-up in the kept answers by key. Weak: the
    /// kept answers' bound holds (an answer they let go is gone here too, once given).
    last: Mutex<(i64, Weak<Answer>)>,
}

impl Prepared {
    /// The answer at `generation`: the last one given, or one kept in `answers`.
    pub fn answer(&self, answers: &AnswerCache, generation: i64) -> Option<Arc<Answer>> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(a) = last.1.upgrade().filter(|_| last.0 == generation) {
            return Some(a);
        }
        let kept = answers.get(&self.key, generation)?;
        *last = (generation, Arc::downgrade(&kept));
        Some(kept)
    }

    /// Keeps `made`, the answer at `generation`, in `answers` and as the last one given.
    pub fn keep(&self, answers: &AnswerCache, generation: i64, made: Made) -> Arc<Answer> {
        let answer = answers.put(self.key.clone(), generation, made);
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if last.0 <= generation {
            *last = (generation, Arc::downgrade(&answer));
        }
        answer
    }
}

/// Prepared pulls by request; see the module docs.
#[derive(Default)]
pub struct PreparedPulls {
    kept: Mutex<HashMap<String, Arc<Prepared>>>,
}

impl PreparedPulls {
    /// The pull `actor` asks with `query` and `accept` of `feed`: kept, or made and kept.
    pub fn get<S: Store>(
        &self,
        st: &HttpState<S>,
        actor: &Actor,
        feed: &str,
        query: Option<&str>,
        accept: &str,
    ) -> Result<Arc<Prepared>, ApiError> {
        let query = query.unwrap_or("");
        let who = actor.as_str();
        let mut key = String::with_capacity(who.len() + accept.len() + feed.len() + query.len() + 3);
        for part in [who, "\n", accept, "\n", feed, "\n", query] {
            key.push_str(part);
        }
        if let Some(p) = self.kept.lock().unwrap_or_else(PoisonError::into_inner).get(&key) {
            return Ok(p.clone());
        }
        let p = Arc::new(prepare(st, actor, feed, FeedQuery::parse(Some(query), crate::pull::PULL_PARAMS)?, accept)?);
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() >= KEEP {
            kept.clear();
        }
        kept.insert(key, p.clone());
        Ok(p)
    }
}

/// Makes the pull of `feed` that `q` and `accept` ask for `actor`.
fn prepare<S: Store>(
    st: &HttpState<S>,
    actor: &Actor,
    feed: &str,
    q: FeedQuery,
    accept: &str,
) -> Result<Prepared, ApiError> {
    let r = resolve(&st.svc, actor, &st.settings.base, feed, &q)?;
    let max = st.svc.page_size(q.max);
    let format = q.format.unwrap_or_else(|| Format::from_accept(accept, Format::Json));
    let timeout = q.timeout.unwrap_or(DEFAULT_TIMEOUT).min(st.settings.max_timeout);
    let holds = !r.view.view().order.descending && q.until.is_none() && max > 0 && timeout > 0;
    let key = format!("page\n{}\n{:?}\n{:?}\n{max}\n{format:?}\n{:?}", r.url, q.since, q.until, q.callback);
    let req = PullRequest { node: r.node, max: Some(max), after: q.since, before: q.until, ..PullRequest::default() };
    Ok(Prepared {
        feed: feed.to_string(),
        url: r.url,
        view: r.view,
        key,
        max,
        format,
        callback: q.callback,
        timeout,
        holds,
        read: Arc::new((actor.as_str().to_string(), req)),
        last: Mutex::new((i64::MIN, Weak::new())),
    })
}
