//! How an [`Item`] maps onto a row of `items` (and an [`OutboxEntry`] onto one of
//! `hub_outbox`), and back; a shared statement's parameters as rusqlite takes them; rusqlite's
//! failures as the core's kinds.

use feed::outbox::OutboxEntry;
use feed::ports::StoreError;
use feed::{Cursor, Item, Key, Payload};
use rusqlite::Row;
use store_sql::dialect::Arg;

/// Reads an item from a row selected with [`store_sql::reads::ITEM_COLUMNS`].
pub(crate) fn item_from_row(row: &Row<'_>) -> rusqlite::Result<Item> {
    let categories: String = row.get(7)?;
    let categories = decode_categories(&categories).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(7, rusqlite::types::Type::Text, "malformed categories".into())
    })?;
    let deleted: bool = row.get(8)?;
    let payload: String = row.get(10)?;
    let payload = if deleted {
        let when: Option<i64> = row.get(9)?;
        let when = when.ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(9, rusqlite::types::Type::Null, "tombstone without a time".into())
        })?;
        Payload::Tombstone { atom_ref: payload, when }
    } else {
        Payload::Entry(payload)
    };
    Ok(Item {
        id: row.get(0)?,
        created: Key { seq: row.get(1)?, t: row.get(2)? },
        modified: Key { seq: row.get(3)?, t: row.get(4)? },
        author: row.get(5)?,
        atom_id: row.get(6)?,
        categories,
        payload,
    })
}

fn cursor(r: &Row<'_>, i: usize) -> rusqlite::Result<Option<Cursor>> {
    let text: Option<String> = r.get(i)?;
    match text {
        None => Ok(None),
        Some(t) => Cursor::parse(&t).map(Some).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, "malformed cursor".into())
        }),
    }
}

/// Reads an outbox row from a row selected with
/// [`store_sql::reads::OUTBOX_COLUMNS`].
pub(crate) fn outbox_entry_from_row(r: &Row<'_>) -> rusqlite::Result<OutboxEntry> {
    let deleted: bool = r.get(5)?;
    let payload: String = r.get(7)?;
    let payload = if deleted {
        let when: Option<i64> = r.get(6)?;
        Payload::Tombstone { atom_ref: payload, when: when.unwrap_or(0) }
    } else {
        Payload::Entry(payload)
    };
    let last = cursor(r, 10)?.ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(10, rusqlite::types::Type::Null, "no last cursor".into())
    })?;
    Ok(OutboxEntry {
        seq: r.get(0)?,
        feed: r.get(1)?,
        view: r.get(2)?,
        item_id: r.get(3)?,
        modified: r.get(4)?,
        payload,
        count: r.get::<_, i64>(8)?.max(0) as u64,
        previous: cursor(r, 9)?,
        last,
        at: r.get(11)?,
    })
}

/// A shared statement's parameter as rusqlite takes it.
pub(crate) fn param<'a>(a: &'a Arg<'_>) -> &'a dyn rusqlite::ToSql {
    match a {
        Arg::Int(v) => v,
        Arg::Text(v) => v,
        Arg::OptText(v) => v,
    }
}

/// The payload's columns: `(deleted, when_ms, payload)`. A tombstone's `payload` column holds
/// its `ref`; the `<deleted-entry/>` element is rebuilt by the XMPP glue, not stored.
pub(crate) fn payload_columns(payload: &Payload) -> (bool, Option<i64>, &str) {
    match payload {
        Payload::Entry(xml) => (false, None, xml),
        Payload::Tombstone { atom_ref, when } => (true, Some(*when), atom_ref),
    }
}

/// Encodes terms as `LEN:TERM` repeated (LEN in bytes, decimal). Unlike a separator, this
/// cannot be confused by any character a term may hold, and keeps order and duplicates.
pub(crate) fn encode_categories(terms: &[String]) -> String {
    let mut out = String::with_capacity(terms.iter().map(|t| t.len() + 4).sum());
    for t in terms {
        out.push_str(&t.len().to_string());
        out.push(':');
        out.push_str(t);
    }
    out
}

/// The inverse of [`encode_categories`]; `None` when the text is not in that form.
pub(crate) fn decode_categories(mut s: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    while !s.is_empty() {
        let (len, rest) = s.split_once(':')?;
        let len: usize = len.parse().ok()?;
        let term = rest.get(..len)?;
        out.push(term.to_string());
        s = &rest[len..];
    }
    Some(out)
}

/// SQLite's failures by what an operator does about them: wait (busy, locked), free space
/// (full), restore (corrupt, not a database); everything else is a backend error.
pub(crate) fn store_error(e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode::*;
    let text = e.to_string();
    match e.sqlite_error_code() {
        Some(DatabaseBusy | DatabaseLocked) => StoreError::Busy(text),
        Some(DiskFull) => StoreError::Full(text),
        Some(DatabaseCorrupt | NotADatabase) => StoreError::Corrupt(text),
        _ => StoreError::Backend(text),
    }
}

/// rusqlite's results as the core's: `.db()?`. (The core's error cannot implement `From`
/// for a driver's error here: neither type belongs to this crate.)
pub(crate) trait Db<T> {
    fn db(self) -> feed::ports::StoreResult<T>;
}

impl<T> Db<T> for rusqlite::Result<T> {
    fn db(self) -> feed::ports::StoreResult<T> {
        self.map_err(store_error)
    }
}
