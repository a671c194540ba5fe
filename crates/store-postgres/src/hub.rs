//! WebSub subscriptions and the outbox as SQL (see [`feed::outbox`]); the
//! [`ReadTx`](feed::ports::ReadTx) and [`WriteTx`](feed::ports::WriteTx)
//! methods of the same names delegate here.

use super::read::PgTx;
use feed::Cursor;
use feed::outbox::{HubSubscription, OutboxEntry, OutboxStats};
use feed::ports::{StoreError, StoreResult};
use tokio_postgres::Row;

const SUB_COLUMNS: &str = "id, feed, view, topic, callback, secret, expires, delivered";

impl PgTx<'_> {
    fn hub_sub(&self, r: &Row) -> StoreResult<HubSubscription> {
        Ok(HubSubscription {
            id: self.get(r, 0)?,
            feed: self.get(r, 1)?,
            view: self.get(r, 2)?,
            topic: self.get(r, 3)?,
            callback: self.get(r, 4)?,
            secret: self.get(r, 5)?,
            expires: self.get(r, 6)?,
            delivered: self.get(r, 7)?,
        })
    }

    fn hub_subs(&self, rows: Vec<Row>) -> StoreResult<Vec<HubSubscription>> {
        rows.iter().map(|r| self.hub_sub(r)).collect()
    }

    fn cursor_at(&self, r: &Row, i: usize) -> StoreResult<Option<Cursor>> {
        let text: Option<String> = self.get(r, i)?;
        text.map(|t| Cursor::parse(&t).ok_or_else(|| StoreError::Corrupt(format!("malformed outbox cursor {t:?}"))))
            .transpose()
    }

    fn outbox_entry(&self, r: &Row) -> StoreResult<OutboxEntry> {
        let payload = super::payload::from_columns(self.get(r, 5)?, self.get(r, 6)?, self.get(r, 7)?, "hub_outbox")?;
        Ok(OutboxEntry {
            seq: self.get(r, 0)?,
            feed: self.get(r, 1)?,
            view: self.get(r, 2)?,
            item_id: self.get(r, 3)?,
            modified: self.get(r, 4)?,
            payload,
            count: self.get::<i64>(r, 8)?.max(0) as u64,
            previous: self.cursor_at(r, 9)?,
            last: self.cursor_at(r, 10)?.ok_or_else(|| StoreError::Corrupt("an outbox row without a cursor".into()))?,
            at: self.get(r, 11)?,
        })
    }

    pub(crate) fn hub_views_sql(&self, feed: i64) -> StoreResult<Vec<String>> {
        let rows = self.query("SELECT DISTINCT view FROM hub_subscriptions WHERE feed = $1 ORDER BY view", &[&feed])?;
        rows.iter().map(|r| self.get(r, 0)).collect()
    }

    pub(crate) fn hub_subscriptions_sql(&self, after: i64, limit: usize) -> StoreResult<Vec<HubSubscription>> {
        let sql = format!("SELECT {SUB_COLUMNS} FROM hub_subscriptions WHERE id > $1 ORDER BY id LIMIT $2");
        let rows = self.query(&sql, &[&after, &(limit.min(i64::MAX as usize) as i64)])?;
        self.hub_subs(rows)
    }

    pub(crate) fn hub_subscribers_sql(&self, feed: i64) -> StoreResult<Vec<HubSubscription>> {
        let sql = format!("SELECT {SUB_COLUMNS} FROM hub_subscriptions WHERE feed = $1 ORDER BY view, callback");
        let rows = self.query(&sql, &[&feed])?;
        self.hub_subs(rows)
    }

    pub(crate) fn outbox_sql(&self, feed: i64, view: &str, after: i64, limit: usize) -> StoreResult<Vec<OutboxEntry>> {
        let rows = self.query(
            "SELECT seq, feed, view, item_id, modified, deleted, when_ms, payload, count, previous, last, at
             FROM hub_outbox WHERE feed = $1 AND view = $2 AND seq > $3 ORDER BY seq LIMIT $4",
            &[&feed, &view, &after, &(limit.min(i64::MAX as usize) as i64)],
        )?;
        rows.iter().map(|r| self.outbox_entry(r)).collect()
    }

    pub(crate) fn outbox_stats_sql(&self) -> StoreResult<OutboxStats> {
        let row = self.query_one("SELECT COUNT(*), MIN(at) FROM hub_outbox", &[])?;
        Ok(OutboxStats { rows: self.get::<i64>(&row, 0)?.max(0) as u64, oldest: self.get(&row, 1)? })
    }

    pub(crate) fn put_hub_subscription_sql(&self, sub: &HubSubscription) -> StoreResult<HubSubscription> {
        let sql = format!(
            "INSERT INTO hub_subscriptions(feed, view, callback, topic, secret, expires, delivered)
             VALUES ($1, $2, $3, $4, $5, $6,
                     COALESCE((SELECT MAX(seq) FROM hub_outbox WHERE feed = $1 AND view = $2), 0))
             ON CONFLICT (feed, view, callback) DO UPDATE
             SET topic = excluded.topic, secret = excluded.secret, expires = excluded.expires
             RETURNING {SUB_COLUMNS}"
        );
        let row =
            self.query_one(&sql, &[&sub.feed, &sub.view, &sub.callback, &sub.topic, &sub.secret, &sub.expires])?;
        self.hub_sub(&row)
    }

    pub(crate) fn delete_hub_subscription_sql(&self, feed: i64, view: &str, callback: &str) -> StoreResult<bool> {
        let n = self.execute(
            "DELETE FROM hub_subscriptions WHERE feed = $1 AND view = $2 AND callback = $3",
            &[&feed, &view, &callback],
        )?;
        Ok(n > 0)
    }

    pub(crate) fn expire_hub_subscriptions_sql(&self, now: i64) -> StoreResult<Vec<i64>> {
        let rows = self.query("DELETE FROM hub_subscriptions WHERE expires <= $1 RETURNING id", &[&now])?;
        rows.iter().map(|r| self.get(r, 0)).collect()
    }

    pub(crate) fn hub_delivered_sql(&self, id: i64, upto: i64) -> StoreResult<bool> {
        let n = self
            .execute("UPDATE hub_subscriptions SET delivered = GREATEST(delivered, $2) WHERE id = $1", &[&id, &upto])?;
        Ok(n > 0)
    }

    pub(crate) fn append_outbox_sql(&self, e: &OutboxEntry) -> StoreResult<i64> {
        let (deleted, when, payload) = super::payload::columns(&e.payload);
        let row = self.query_one(
            "INSERT INTO hub_outbox(feed, view, item_id, modified, deleted, when_ms, payload, count, previous, last, at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING seq",
            &[
                &e.feed,
                &e.view,
                &e.item_id,
                &e.modified,
                &deleted,
                &when,
                &payload,
                &(e.count.min(i64::MAX as u64) as i64),
                &e.previous.map(|c| c.to_string()),
                &e.last.to_string(),
                &e.at,
            ],
        )?;
        self.get(&row, 0)
    }

    /// Per view, one lookup of the slowest subscription's mark and one index range delete:
    /// a correlated `MIN` per outbox row would cost rows × subscriptions.
    pub(crate) fn prune_outbox_sql(&self, keep: u64) -> StoreResult<u64> {
        let marks = self.query("SELECT feed, view, MIN(delivered) FROM hub_subscriptions GROUP BY feed, view", &[])?;
        let mut n = 0u64;
        for r in &marks {
            let (feed, view, mark): (i64, String, i64) = (self.get(r, 0)?, self.get(r, 1)?, self.get(r, 2)?);
            n += self.execute(
                "DELETE FROM hub_outbox WHERE feed = $1 AND view = $2 AND seq <= $3",
                &[&feed, &view, &mark],
            )?;
        }
        n += self.execute(
            "DELETE FROM hub_outbox o WHERE NOT EXISTS
                (SELECT 1 FROM hub_subscriptions s WHERE s.feed = o.feed AND s.view = o.view)",
            &[],
        )?;
        n += self.execute(
            "DELETE FROM hub_outbox WHERE seq IN (
                SELECT seq FROM (SELECT seq, ROW_NUMBER() OVER (PARTITION BY feed, view ORDER BY seq DESC) AS rn
                                 FROM hub_outbox) AS ranked
                WHERE rn > $1)",
            &[&(keep.min(i64::MAX as u64) as i64)],
        )?;
        Ok(n)
    }
}
