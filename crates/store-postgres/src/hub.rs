//! WebSub subscriptions and the outbox as PostgreSQL keeps them, where that differs from
//! SQLite (see [`HubStatements`]): an upsert that returns the row, `GREATEST`, an identity
//! `seq` returned by the insert, the payload as bytes ([`crate::payload`]).

use crate::connection::PgConn;
use crate::payload;
use feed::outbox::{HubSubscription, OutboxEntry};
use feed::ports::StoreResult;
use store_sql::driver::HubStatements;
use store_sql::reads::HUB_SUBSCRIPTION_COLUMNS;
use store_sql::transaction::hub_subscription;

impl HubStatements for PgConn<'_> {
    const DELETE_UNFOLLOWED_OUTBOX: &'static str = "DELETE FROM hub_outbox o WHERE NOT EXISTS
                (SELECT 1 FROM hub_subscriptions s WHERE s.feed = o.feed AND s.view = o.view)";
    const DELETE_OUTBOX_BEYOND: &'static str = "DELETE FROM hub_outbox WHERE seq IN (
                SELECT seq FROM (SELECT seq, ROW_NUMBER() OVER (PARTITION BY feed, view ORDER BY seq DESC) AS rn
                                 FROM hub_outbox) AS ranked
                WHERE rn > $1)";

    fn upsert_hub_subscription(&self, sub: &HubSubscription) -> StoreResult<HubSubscription> {
        let sql = format!(
            "INSERT INTO hub_subscriptions(feed, view, callback, topic, secret, expires, delivered)
             VALUES ($1, $2, $3, $4, $5, $6,
                     COALESCE((SELECT MAX(seq) FROM hub_outbox WHERE feed = $1 AND view = $2), 0))
             ON CONFLICT (feed, view, callback) DO UPDATE
             SET topic = excluded.topic, secret = excluded.secret, expires = excluded.expires
             RETURNING {HUB_SUBSCRIPTION_COLUMNS}"
        );
        let row =
            self.query_one(&sql, &[&sub.feed, &sub.view, &sub.callback, &sub.topic, &sub.secret, &sub.expires])?;
        hub_subscription(&self.columns(&row))
    }

    fn raise_delivered(&self, id: i64, upto: i64) -> StoreResult<bool> {
        let n =
            self.exec("UPDATE hub_subscriptions SET delivered = GREATEST(delivered, $2) WHERE id = $1", &[&id, &upto])?;
        Ok(n > 0)
    }

    fn insert_outbox(&self, e: &OutboxEntry) -> StoreResult<i64> {
        let (deleted, when, payload) = payload::columns(&e.payload);
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
}
