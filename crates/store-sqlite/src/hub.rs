//! WebSub subscriptions and the outbox as SQL (see [`feed::outbox`]); the
//! [`ReadTx`](feed::ports::ReadTx) and [`WriteTx`](feed::ports::WriteTx)
//! methods of the same names delegate here.

use super::codec::payload_columns;
use super::read::SqlTx;
use crate::codec::Db;
use feed::outbox::{HubSubscription, OutboxEntry, OutboxStats};
use feed::ports::StoreResult;
use feed::{Cursor, Payload};
use rusqlite::{OptionalExtension, params};

const SUB_COLUMNS: &str = "id, feed, view, topic, callback, secret, expires, delivered";

fn sub_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<HubSubscription> {
    Ok(HubSubscription {
        id: r.get(0)?,
        feed: r.get(1)?,
        view: r.get(2)?,
        topic: r.get(3)?,
        callback: r.get(4)?,
        secret: r.get(5)?,
        expires: r.get(6)?,
        delivered: r.get(7)?,
    })
}

fn cursor(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Option<Cursor>> {
    let text: Option<String> = r.get(i)?;
    match text {
        None => Ok(None),
        Some(t) => Cursor::parse(&t).map(Some).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, "malformed cursor".into())
        }),
    }
}

fn entry_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<OutboxEntry> {
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

impl SqlTx<'_> {
    pub(crate) fn hub_views_sql(&self, feed: i64) -> StoreResult<Vec<String>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT DISTINCT view FROM hub_subscriptions WHERE feed = ?1 ORDER BY view")
            .db()?;
        let rows = st.query_map([feed], |r| r.get(0)).db()?;
        rows.collect::<Result<_, _>>().db()
    }

    pub(crate) fn hub_subscriptions_sql(&self, after: i64, limit: usize) -> StoreResult<Vec<HubSubscription>> {
        let mut st = self
            .conn
            .prepare_cached(&format!("SELECT {SUB_COLUMNS} FROM hub_subscriptions WHERE id > ?1 ORDER BY id LIMIT ?2"))
            .db()?;
        let rows = st.query_map(params![after, limit as i64], sub_from_row).db()?;
        rows.collect::<Result<_, _>>().db()
    }

    pub(crate) fn hub_subscribers_sql(&self, feed: i64) -> StoreResult<Vec<HubSubscription>> {
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "SELECT {SUB_COLUMNS} FROM hub_subscriptions WHERE feed = ?1 ORDER BY view, callback"
            ))
            .db()?;
        let rows = st.query_map([feed], sub_from_row).db()?;
        rows.collect::<Result<_, _>>().db()
    }

    pub(crate) fn outbox_sql(&self, feed: i64, view: &str, after: i64, limit: usize) -> StoreResult<Vec<OutboxEntry>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT seq, feed, view, item_id, modified, deleted, when_ms, payload, count, previous, last, at
             FROM hub_outbox WHERE feed = ?1 AND view = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4",
            )
            .db()?;
        let rows = st.query_map(params![feed, view, after, limit as i64], entry_from_row).db()?;
        rows.collect::<Result<_, _>>().db()
    }

    pub(crate) fn outbox_stats_sql(&self) -> StoreResult<OutboxStats> {
        let mut st = self.conn.prepare_cached("SELECT COUNT(*), MIN(at) FROM hub_outbox").db()?;
        let (rows, oldest): (i64, Option<i64>) = st.query_row([], |r| Ok((r.get(0)?, r.get(1)?))).db()?;
        Ok(OutboxStats { rows: rows.max(0) as u64, oldest })
    }

    pub(crate) fn put_hub_subscription_sql(&self, sub: &HubSubscription) -> StoreResult<HubSubscription> {
        let mut st = self
            .conn
            .prepare_cached(
                "INSERT INTO hub_subscriptions(feed, view, callback, topic, secret, expires, delivered)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6,
                     COALESCE((SELECT MAX(seq) FROM hub_outbox WHERE feed = ?1 AND view = ?2), 0))
             ON CONFLICT(feed, view, callback) DO UPDATE
             SET topic = excluded.topic, secret = excluded.secret, expires = excluded.expires",
            )
            .db()?;
        st.execute(params![sub.feed, sub.view, sub.callback, sub.topic, sub.secret, sub.expires]).db()?;
        let mut get = self
            .conn
            .prepare_cached(&format!(
                "SELECT {SUB_COLUMNS} FROM hub_subscriptions WHERE feed = ?1 AND view = ?2 AND callback = ?3"
            ))
            .db()?;
        get.query_row(params![sub.feed, sub.view, sub.callback], sub_from_row).db()
    }

    pub(crate) fn delete_hub_subscription_sql(&self, feed: i64, view: &str, callback: &str) -> StoreResult<bool> {
        let mut st = self
            .conn
            .prepare_cached("DELETE FROM hub_subscriptions WHERE feed = ?1 AND view = ?2 AND callback = ?3")
            .db()?;
        Ok(st.execute(params![feed, view, callback]).db()? > 0)
    }

    pub(crate) fn expire_hub_subscriptions_sql(&self, now: i64) -> StoreResult<Vec<i64>> {
        let mut st = self.conn.prepare_cached("DELETE FROM hub_subscriptions WHERE expires <= ?1 RETURNING id").db()?;
        let rows = st.query_map([now], |r| r.get(0)).db()?;
        rows.collect::<Result<_, _>>().db()
    }

    pub(crate) fn hub_delivered_sql(&self, id: i64, upto: i64) -> StoreResult<bool> {
        let mut st = self
            .conn
            .prepare_cached("UPDATE hub_subscriptions SET delivered = MAX(delivered, ?2) WHERE id = ?1 RETURNING id")
            .db()?;
        let found: Option<i64> = st.query_row(params![id, upto], |r| r.get(0)).optional().db()?;
        Ok(found.is_some())
    }

    pub(crate) fn append_outbox_sql(&self, e: &OutboxEntry) -> StoreResult<i64> {
        let (deleted, when, payload) = payload_columns(&e.payload);
        let mut st = self.conn.prepare_cached(
            "INSERT INTO hub_outbox(feed, view, item_id, modified, deleted, when_ms, payload, count, previous, last, at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        ).db()?;
        st.execute(params![
            e.feed,
            e.view,
            e.item_id,
            e.modified,
            deleted,
            when,
            payload,
            e.count as i64,
            e.previous.map(|c| c.to_string()),
            e.last.to_string(),
            e.at,
        ])
        .db()?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Per view, one lookup of the slowest subscription's mark and one index range delete:
    /// a correlated `MIN` per outbox row would cost rows × subscriptions.
    pub(crate) fn prune_outbox_sql(&self, keep: u64) -> StoreResult<u64> {
        let mut marks = self
            .conn
            .prepare_cached("SELECT feed, view, MIN(delivered) FROM hub_subscriptions GROUP BY feed, view")
            .db()?;
        let marks: Vec<(i64, String, i64)> =
            marks.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).db()?.collect::<Result<_, _>>().db()?;
        let mut passed =
            self.conn.prepare_cached("DELETE FROM hub_outbox WHERE feed = ?1 AND view = ?2 AND seq <= ?3").db()?;
        let mut n = 0u64;
        for (feed, view, mark) in &marks {
            n += passed.execute(params![feed, view, mark]).db()? as u64;
        }
        let mut orphans = self
            .conn
            .prepare_cached(
                "DELETE FROM hub_outbox WHERE NOT EXISTS
                (SELECT 1 FROM hub_subscriptions s WHERE s.feed = hub_outbox.feed AND s.view = hub_outbox.view)",
            )
            .db()?;
        n += orphans.execute([]).db()? as u64;
        let mut over = self
            .conn
            .prepare_cached(
                "DELETE FROM hub_outbox WHERE seq IN (
                SELECT seq FROM (SELECT seq, ROW_NUMBER() OVER (PARTITION BY feed, view ORDER BY seq DESC) AS rn
                                 FROM hub_outbox)
                WHERE rn > ?1)",
            )
            .db()?;
        n += over.execute([keep.min(i64::MAX as u64) as i64]).db()? as u64;
        Ok(n)
    }
}
