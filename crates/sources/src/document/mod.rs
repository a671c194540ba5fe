//! A fetched document, read (SPEC §13): its entries as the delta takes them (item id,
//! Atom payload or deletion) in publishing order, and the links the fetcher follows
//! (`prev-archive`, a paged feed's `next`, `hub`). Pure: bytes in, values out, never a panic on bad input.
//!
//! Atom documents are read with minidom, so each entry is kept as the source wrote it
//! ([`atom`]); anything else (RSS 0.9x/1.0/2.0, JSON Feed, and an Atom document minidom
//! cannot read) goes through feed-rs and its entries are written as Atom ([`written`]).
//! An XML document must be well-formed ([`wellformed`]); every entry read is given the id,
//! title and updated time it lacks ([`complete`]).

mod atom;
mod complete;
mod order;
mod wellformed;
mod written;

use feed::service::{Incoming, IncomingChange};

/// One document of a source.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Document {
    /// Entries in publishing order: oldest first, deletions after them.
    pub entries: Vec<Incoming>,
    /// Entries the document had that could not be kept (an Atom entry that cannot be
    /// written back).
    pub skipped: usize,
    /// RFC 5005 `prev-archive`, as written (relative to the document's URL).
    pub prev_archive: Option<String>,
    /// Its `next` page, as written: with [`total`](Self::total), a paged feed (a smartfeeds
    /// view) whose pages the history walks like archives.
    pub next: Option<String>,
    /// The number of entries of the whole paged feed (`fo:total`), when it says.
    pub total: Option<u64>,
    /// The place in time of its newest entry, when every entry has one: how pages walked in
    /// either direction are put newest first.
    pub newest: Option<When>,
    /// The WebSub hub it advertises, as written.
    pub hub: Option<String>,
    /// Its `self` link, as written: the topic to subscribe to at its hub.
    pub self_link: Option<String>,
}

impl Document {
    /// The item ids of the document's entries (deletions included).
    pub fn ids(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.id.clone()).collect()
    }
}

/// Why a document cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("not a feed document (Atom, RSS or JSON Feed): {0}")]
    NotAFeed(String),
    #[error("not well-formed XML, so not imported: {0}")]
    Malformed(String),
}

/// An entry's place in the source's time: its published, else updated, time (Unix ms) and
/// 0; or, in a smartfeeds document, its `fo:cursor`'s time and tie order, which are the
/// order its entries entered the source's view (entries written in one second, or with the
/// same date, keep it too).
pub type When = (i64, u64);

/// One source entry before ordering: its key, its time, what it says.
struct Parsed {
    key: String,
    when: Option<When>,
    change: IncomingChange,
}

/// Reads a document of any supported format, fetched now.
pub fn parse(bytes: &[u8]) -> Result<Document, ParseError> {
    read(bytes, chrono::Utc::now())
}

/// Reads a document fetched at `now` (the `updated` time of entries that have no time).
fn read(bytes: &[u8], now: chrono::DateTime<chrono::Utc>) -> Result<Document, ParseError> {
    let json = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes).trim_ascii_start().starts_with(b"{");
    if !json {
        wellformed::check(bytes).map_err(ParseError::Malformed)?;
    }
    match atom::parse(bytes, now) {
        Some(doc) => Ok(doc),
        None => written::parse(bytes, now),
    }
}

/// The key of an entry with neither an id nor a link: a digest of what it says, so that the
/// same entry gets the same key on every fetch (and an edited one is a new entry).
/// The digest is of the entry's names, attributes and text, in document order.
fn content_key(entry: &minidom::Element) -> String {
    use sha2::{Digest, Sha256};
    fn feed(h: &mut Sha256, e: &minidom::Element) {
        h.update(format!("<{} {}", e.ns(), e.name()));
        for ((ns, name), v) in e.attrs() {
            h.update(format!(" {ns:?}:{name}={v:?}"));
        }
        for node in e.nodes() {
            match node {
                minidom::Node::Element(c) => feed(h, c),
                minidom::Node::Text(t) => h.update(format!("{t:?}")),
            }
        }
        h.update(">");
    }
    let mut h = Sha256::new();
    feed(&mut h, entry);
    format!("urn:sha256:{}", h.finalize().iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// The newest of the parsed entries' times, when every one has a time.
fn newest(parsed: &[Parsed]) -> Option<When> {
    parsed.iter().map(|p| p.when).collect::<Option<Vec<When>>>()?.into_iter().max()
}

/// Orders parsed entries (see [`order::publishing_order`]) and derives their item ids.
fn finish(parsed: Vec<Parsed>, deleted: Vec<String>) -> Vec<Incoming> {
    let when: Vec<Option<When>> = parsed.iter().map(|p| p.when).collect();
    let mut slots: Vec<Option<Parsed>> = parsed.into_iter().map(Some).collect();
    let mut out: Vec<Incoming> = order::publishing_order(&when)
        .into_iter()
        .filter_map(|i| slots.get_mut(i).and_then(Option::take))
        .map(|p| Incoming { id: crate::item_id(&p.key), change: p.change })
        .collect();
    out.extend(deleted.iter().map(|key| Incoming { id: crate::item_id(key), change: IncomingChange::Deleted }));
    out
}
