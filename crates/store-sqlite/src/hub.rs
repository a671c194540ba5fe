//! WebSub subscriptions and the outbox as SQLite keeps them, where that differs from
//! PostgreSQL (see [`HubStatements`]): an upsert then a read of the row, `MAX` of two values,
//! the rowid of an insert.

use crate::codec::{Db, payload_columns};
use crate::connection::SqliteConn;
use feed::outbox::{HubSubscription, OutboxEntry};
use feed::ports::StoreResult;
use rusqlite::params;
use store_sql::dialect::{Arg, Statement};
use store_sql::driver::{HubStatements, Statements};
use store_sql::reads::HUB_SUBSCRIPTION_COLUMNS;
use store_sql::transaction::hub_subscription;

impl HubStatements for SqliteConn<'_> {
    const DELETE_UNFOLLOWED_OUTBOX: &'static str = "DELETE FROM hub_outbox WHERE NOT EXISTS
                (SELECT 1 FROM hub_subscriptions s WHERE s.feed = hub_outbox.feed AND s.view = hub_outbox.view)";
    const DELETE_OUTBOX_BEYOND: &'static str = "DELETE FROM hub_outbox WHERE seq IN (
                SELECT seq FROM (SELECT seq, ROW_NUMBER() OVER (PARTITION BY feed, view ORDER BY seq DESC) AS rn
                                 FROM hub_outbox)
                WHERE rn > ?1)";

    fn upsert_hub_subscription(&self, sub: &HubSubscription) -> StoreResult<HubSubscription> {
        let mut st = self
            .0
            .prepare_cached(
                "INSERT INTO hub_subscriptions(feed, view, callback, topic, secret, expires, delivered)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6,
                     COALESCE((SELECT MAX(seq) FROM hub_outbox WHERE feed = ?1 AND view = ?2), 0))
             ON CONFLICT(feed, view, callback) DO UPDATE
             SET topic = excluded.topic, secret = excluded.secret, expires = excluded.expires",
            )
            .db()?;
        st.execute(params![sub.feed, sub.view, sub.callback, sub.topic, sub.secret, sub.expires]).db()?;
        let sql = format!(
            "SELECT {HUB_SUBSCRIPTION_COLUMNS} FROM hub_subscriptions WHERE feed = ?1 AND view = ?2 AND callback = ?3"
        );
        let args = [Arg::Int(sub.feed), Arg::Text(&sub.view), Arg::Text(&sub.callback)];
        let stored = self.rows(&Statement::written(Self::DIALECT, &sql, &args), hub_subscription)?;
        stored.into_iter().next().ok_or_else(|| crate::codec::store_error(rusqlite::Error::QueryReturnedNoRows))
    }

    /// Without `RETURNING`: SQLite runs a statement with one as a multi-row write, opening
    /// and releasing a statement journal for each of the thousands of updates in a batch
    /// (a tenth of the hub's CPU at 10,000 subscribers); the count of changed rows says as
    /// much.
    fn raise_delivered(&self, id: i64, upto: i64) -> StoreResult<bool> {
        let mut st =
            self.0.prepare_cached("UPDATE hub_subscriptions SET delivered = MAX(delivered, ?2) WHERE id = ?1").db()?;
        Ok(st.execute(params![id, upto]).db()? > 0)
    }

    fn insert_outbox(&self, e: &OutboxEntry) -> StoreResult<i64> {
        let (deleted, when, payload) = payload_columns(&e.payload);
        let mut st = self.0.prepare_cached(
            "INSERT INTO hub_outbox(feed, view, item_id, modified, deleted, when_ms, payload, count, previous, last, at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        ).db()?;
        let (previous, last) = (e.previous.map(|c| c.to_string()), e.last.to_string());
        let count = e.count as i64;
        st.execute(params![e.feed, e.view, e.item_id, e.modified, deleted, when, payload, count, previous, last, e.at])
            .db()?;
        Ok(self.0.last_insert_rowid())
    }
}
