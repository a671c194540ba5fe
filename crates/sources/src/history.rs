//! History (SPEC §13, RFC 5005 and the Simplefeed consumer): the entries a fetch imports,
//! completed from the source's archives when the fetched document alone is not enough.
//!
//! - While the feed is empty, the first fetch follows `prev-archive` back (until
//!   `max_history` entries are gathered, the first archive, or a link seen before) and
//!   imports the whole history, oldest document first.
//! - Afterwards, when none of the fetched document's entries is held yet (a burst pushed
//!   every imported entry out of it), the fetch walks back until a document holds one.
//! - A paged feed (a smartfeeds view named by its feed URL: `next` pages and `fo:total`)
//!   is walked the same way through its `next` pages, until `fo:total` entries are
//!   gathered (a page past the end of an ascending view would be a long-poll). Its pages
//!   are put newest first by their entries' times, whichever way the view pages.
//!
//! The rule needs no memory of earlier fetches: "holds an entry already imported" is asked
//! of the store, so it survives restarts and holds on whichever instance fetches.

use crate::config::Location;
use crate::document::{Document, parse};
use crate::fetch::{Answer, FetchError, Fetcher};
use feed::ports::Store;
use feed::service::{Incoming, Service};
use std::collections::{HashMap, HashSet};
use url::Url;

/// Why a fetch's history could not be completed.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("archive {url}: {err}")]
    Fetch { url: String, err: FetchError },
    #[error("archive {url}: {err}")]
    Parse { url: String, err: crate::document::ParseError },
    #[error("archive {url} answered no document")]
    NoDocument { url: String },
    #[error("{0}")]
    Store(#[from] feed::FeedError),
}

/// Parses on a blocking thread: a large document is CPU work that must not hold up an
/// async worker (other sources, pulls, pushes).
pub async fn parse_off_thread(body: Vec<u8>) -> Result<Document, crate::document::ParseError> {
    tokio::task::spawn_blocking(move || parse(&body))
        .await
        .unwrap_or_else(|e| Err(crate::document::ParseError::NotAFeed(format!("the parser failed: {e}"))))
}

/// The entries to import for `first`, fetched from `url`, into `feed`: `first`'s own, or
/// with those of the archives (or pages) before it when the rules above say so, oldest
/// first.
pub async fn complete<S: Store>(
    svc: &Service<S>,
    feed: &str,
    fetcher: &Fetcher,
    first: Document,
    url: &Url,
    max_history: usize,
) -> Result<Vec<Incoming>, HistoryError> {
    let paged = first.prev_archive.is_none();
    let Some(mut back) = before(&first) else { return Ok(first.entries) };
    let (items, held) = svc.source_holds(feed, first.ids()).await?;
    let empty = items == 0;
    if !empty && (first.entries.is_empty() || held.contains(&true)) {
        return Ok(first.entries);
    }
    let total = first.total.and_then(|t| usize::try_from(t).ok()).filter(|_| paged);
    let mut gathered = first.entries.len();
    let mut docs = vec![first];
    let mut base = url.clone();
    let mut seen = HashSet::from([url.to_string()]);
    loop {
        if (empty && gathered >= max_history) || total.is_some_and(|t| gathered >= t) {
            break;
        }
        let Ok(next) = base.join(&back) else { break };
        if !seen.insert(next.to_string()) {
            break;
        }
        let location = match next.to_file_path() {
            Ok(path) if next.scheme() == "file" => Location::File(path),
            _ => Location::Web(next.clone()),
        };
        let fetched =
            fetcher.fetch(&location, None).await.map_err(|err| HistoryError::Fetch { url: next.to_string(), err })?;
        let Answer::Document(got) = fetched.answer else {
            return Err(HistoryError::NoDocument { url: next.to_string() });
        };
        let (body, url) = (got.body, got.url);
        let doc = parse_off_thread(body).await.map_err(|err| HistoryError::Parse { url: next.to_string(), err })?;
        let found = if empty { false } else { svc.source_holds(feed, doc.ids()).await?.1.contains(&true) };
        gathered += doc.entries.len();
        let then = if paged && doc.entries.is_empty() { None } else { before(&doc) };
        docs.push(doc);
        base = url;
        match then {
            Some(link) if !found && (empty || gathered < max_history) => back = link,
            _ => break,
        }
    }
    if paged {
        newest_first(&mut docs);
    }
    let mut entries = merge(docs);
    if empty && entries.len() > max_history {
        entries.drain(..entries.len() - max_history);
    }
    Ok(entries)
}

/// The link to the document that comes before `doc` in the source's history: its
/// `prev-archive`, else, in a paged feed, its `next` page.
fn before(doc: &Document) -> Option<String> {
    doc.prev_archive.clone().or_else(|| doc.total.and(doc.next.clone()))
}

/// A paged feed's pages, as walked, put newest first by their newest entries (a view in
/// ascending order pages forward in time): unchanged when a page has an entry without a
/// time.
fn newest_first(pages: &mut [Document]) {
    if pages.iter().all(|p| p.newest.is_some() || p.entries.is_empty()) {
        pages.sort_by_key(|p| std::cmp::Reverse(p.newest));
    }
}

/// The entries of documents given newest first, as one list oldest first: documents from
/// the oldest, each in its own publishing order. An entry in several documents takes the
/// place of its oldest appearance and the value of its newest (archives may hold older
/// versions).
pub fn merge(docs: Vec<Document>) -> Vec<Incoming> {
    let mut out: Vec<Incoming> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for doc in docs.into_iter().rev() {
        for e in doc.entries {
            match at.get(&e.id) {
                Some(&i) => out[i] = e,
                None => {
                    at.insert(e.id.clone(), out.len());
                    out.push(e);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use feed::service::IncomingChange;

    fn doc(ids: &[&str], version: &str) -> Document {
        let entries = ids
            .iter()
            .map(|id| Incoming {
                id: id.to_string(),
                change: IncomingChange::Entry(feed::Entry {
                    xml: version.to_string(),
                    atom_id: None,
                    author: None,
                    categories: vec![],
                }),
            })
            .collect();
        Document { entries, ..Document::default() }
    }

    #[test]
    fn archives_merge_oldest_first_with_the_newest_values() {
        let merged = merge(vec![doc(&["e", "f"], "new"), doc(&["c", "d", "e"], "mid"), doc(&["a", "b"], "old")]);
        let ids: Vec<&str> = merged.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c", "d", "e", "f"]);
        assert!(matches!(&merged[4].change, IncomingChange::Entry(e) if e.xml == "new"));
        assert!(matches!(&merged[2].change, IncomingChange::Entry(e) if e.xml == "mid"));
    }

    #[test]
    fn pages_walked_forward_in_time_are_merged_oldest_first() {
        let page = |ids: &[&str], newest: i64| Document { newest: Some((newest, 0)), ..doc(ids, "v") };
        let mut pages = vec![page(&["a", "b"], 2), page(&["c", "d"], 4), page(&["e"], 5)];
        newest_first(&mut pages);
        let ids: Vec<String> = merge(pages).into_iter().map(|e| e.id).collect();
        assert_eq!(ids, ["a", "b", "c", "d", "e"]);
        let mut untimed = vec![doc(&["c", "d"], "v"), doc(&["a", "b"], "v")];
        newest_first(&mut untimed);
        assert_eq!(merge(untimed).into_iter().map(|e| e.id).collect::<Vec<_>>(), ["a", "b", "c", "d"]);
    }

    #[test]
    fn a_paged_feed_goes_back_through_next_an_archived_one_through_prev_archive() {
        let paged = Document { next: Some("?since=x".into()), total: Some(9), ..doc(&["a"], "v") };
        assert_eq!(before(&paged).as_deref(), Some("?since=x"));
        let unpaged = Document { next: Some("?page=2".into()), ..doc(&["a"], "v") };
        assert_eq!(before(&unpaged), None, "a next page without fo:total is not walked");
        let archived = Document { prev_archive: Some("archive/3".into()), ..paged };
        assert_eq!(before(&archived).as_deref(), Some("archive/3"));
    }
}
