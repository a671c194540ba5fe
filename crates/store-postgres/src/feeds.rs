//! Feeds and items as PostgreSQL keeps them, where that differs from SQLite (see
//! [`FeedStatements`]): every statement here runs inside the batch transaction and the
//! closure's savepoint, and is undone if the closure fails.
//!
//! Failures a caller may provoke on purpose (a feed or item that exists, a feed or item
//! that does not) are found without a failing statement, so they do not abort the
//! savepoint; a closure may go on after them, as it can on the other stores.

use crate::connection::{Owned, PgConn, RowInsert, owned};
use crate::payload;
use feed::ports::{FeedRow, StoreError, StoreResult};
use feed::{Change, Item};
use std::sync::LazyLock;
use store_sql::batch_kept::Kept;
use store_sql::dialect::{Arg, Statement};
use store_sql::driver::{Columns, Expect, FeedStatements, Statements};
use store_sql::group_commit::{Busy, Targets};
use store_sql::reads::{FEED_COLUMNS, ITEM_COLUMNS};
use store_sql::transaction::{feed_row, followed};
use tokio_postgres::Row;

impl FeedStatements for PgConn<'_> {
    /// `FOR NO KEY UPDATE`: publishers of this feed, in this process or another, queue here
    /// until this transaction ends, so each stamps from the counters the previous one
    /// committed and commit order is cursor order. Subscriptions, whose foreign key takes a
    /// `KEY SHARE` lock on the row, do not wait for it.
    const LOCK_FEED: &'static str = " FOR NO KEY UPDATE";

    fn feeds_after(after: Option<&str>, limit: i64) -> Statement<'_> {
        match after {
            Some(after) => Statement::written(
                Self::DIALECT,
                "SELECT id, name, items, last_t, last_mseq FROM feeds WHERE name > $1 ORDER BY name LIMIT $2",
                &[Arg::Text(after), Arg::Int(limit)],
            ),
            None => Statement::written(
                Self::DIALECT,
                "SELECT id, name, items, last_t, last_mseq FROM feeds ORDER BY name LIMIT $1",
                &[Arg::Int(limit)],
            ),
        }
    }

    fn insert_feed(&self, name: &str) -> StoreResult<i64> {
        let row =
            self.query_opt("INSERT INTO feeds(name) VALUES ($1) ON CONFLICT (name) DO NOTHING RETURNING id", &[&name])?;
        match row {
            Some(r) => self.get(&r, 0),
            None => Err(StoreError::Backend(format!("feed {name:?} exists"))),
        }
    }

    fn insert_item_row(&self, feed: i64, item: &Item) -> StoreResult<()> {
        let (created, modified) = (item.created, item.modified);
        let mut params = owned![feed, item.id.clone(), created.seq, created.t, modified.seq, modified.t];
        params.extend(version_columns(item));
        self.defer_row(&ITEM_ROW, params, Expect::One(format!("item {:?} or one of its seqs exists", item.id)));
        Ok(())
    }

    fn update_item_row(&self, feed: i64, cseq: i64, new: &Item) -> StoreResult<()> {
        let mut params = owned![feed, cseq, new.modified.seq, new.modified.t];
        params.extend(version_columns(new));
        self.defer(
            "UPDATE items SET mseq = $3, mtime = $4, author = $5, atom_id = $6, categories = $7, deleted = $8,
                 when_ms = $9, payload = $10
             WHERE feed = $1 AND cseq = $2",
            params,
            Expect::Any,
        );
        Ok(())
    }

    fn index_categories(&self, feed: i64, item: &Item, terms: &[&str]) -> StoreResult<()> {
        if terms.is_empty() {
            return Ok(());
        }
        let terms: Vec<String> = terms.iter().map(|t| t.to_string()).collect();
        self.defer(
            "INSERT INTO item_categories(feed, cseq, term, ctime, mtime, mseq)
             SELECT $1, $2, t, $3, $4, $5 FROM unnest($6::text[]) AS t",
            owned![feed, item.created.seq, item.created.t, item.modified.t, item.modified.seq, terms],
            Expect::Any,
        );
        Ok(())
    }

    /// Also logs the change for the instance that pushes its feed (see [`crate::push_shards`]),
    /// in this transaction: a change is owed to subscribers exactly when it is committed. A
    /// failure to log fails the closure, like any failed statement.
    fn emitted(&self, change: &Change) {
        if !change.views.is_empty() {
            self.log_push(change);
        }
    }

    /// Owed in the writer's batch: written once for all its publishes to the feed, before
    /// its next read or its COMMIT ([`PgConn::pay_owed`]).
    fn save_feed_row(&self, feed: &FeedRow) -> StoreResult<()> {
        match self.kept() {
            Some(kept) => kept.borrow_mut().owe(feed.id).saved = Some(feed.clone()),
            None => self.write_feed(feed, 0),
        }
        Ok(())
    }

    /// Owed in the writer's batch, as [`save_feed_row`](Self::save_feed_row).
    fn count_item(&self, feed: i64) -> StoreResult<()> {
        match self.kept() {
            Some(kept) => kept.borrow_mut().owe(feed).items += 1,
            None => self.add_items(feed, 1),
        }
        Ok(())
    }

    /// The writer's batch keeps the feeds' rows (it holds their locks until its COMMIT) and
    /// the views that follow them: later publishes to a feed in the batch read neither.
    fn kept(&self) -> Option<&Kept> {
        PgConn::kept(self)
    }
}

/// An item's row: a batch's publishes to a feed insert theirs in one statement.
static ITEM_ROW: RowInsert = RowInsert {
    head: "INSERT INTO items(feed, id, cseq, ctime, mseq, mtime, author, atom_id, categories, deleted, when_ms, payload)",
    tail: "ON CONFLICT DO NOTHING",
    width: 12,
};

/// What an item's version says, as `items` keeps it: author, atom id, categories, and the
/// payload's columns.
fn version_columns(item: &Item) -> Vec<Owned> {
    let (deleted, when, payload) = payload::columns(&item.payload);
    owned![item.author.clone(), item.atom_id.clone(), item.categories.clone(), deleted, when, payload.to_vec()]
}

/// Locks the rows of the feeds named in `$1` in name order (the order the statement returns
/// and locks them in), `then` saying what to do with rows another transaction holds
/// (nothing: wait).
fn lock_rows(then: &str) -> String {
    format!("SELECT {FEED_COLUMNS} FROM feeds WHERE name = ANY($1) ORDER BY name FOR NO KEY UPDATE{then}")
}

/// The items named (feed names `$1`, item ids `$2`, pairwise), with their feed's id after
/// [`ITEM_COLUMNS`]. One index lookup per id, whatever the statistics: `i.id = ANY(…)` or a
/// plain join may be planned (once, for the cached statement) as a scan of the feed's rows.
static ITEMS_OF_FEEDS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {ITEM_COLUMNS}, i.feed FROM unnest($1::text[], $2::text[]) AS wanted(feed, id)
         CROSS JOIN LATERAL (SELECT * FROM items i
             WHERE i.feed = (SELECT id FROM feeds WHERE name = wanted.feed) AND i.id = wanted.id LIMIT 1) i"
    )
});

/// The views that follow the feeds named in `$1`: (feed id, view, whether by WebSub).
const VIEWS_OF_FEEDS: &str = "SELECT feed, view, false FROM subscriptions
        WHERE feed IN (SELECT id FROM feeds WHERE name = ANY($1))
    UNION SELECT feed, view, true FROM hub_subscriptions
        WHERE feed IN (SELECT id FROM feeds WHERE name = ANY($1))
    ORDER BY 1, 3, 2";

impl PgConn<'_> {
    /// Writes a feed's counters and adds `items` to its count of item rows. (The counts are
    /// `BIGINT`; the core's `u64` count of items never nears `i64::MAX`.)
    fn write_feed(&self, feed: &FeedRow, items: i64) {
        self.defer(
            "UPDATE feeds SET items = $2, last_t = $3, last_mseq = $4, n_items = n_items + $5 WHERE id = $1",
            owned![feed.id, feed.items.min(i64::MAX as u64) as i64, feed.last_t, feed.last_mseq, items],
            Expect::One(format!("no feed with id {}", feed.id)),
        );
    }

    /// Adds `items` to the feed's count of item rows.
    fn add_items(&self, feed: i64, items: i64) {
        self.defer(
            "UPDATE feeds SET n_items = n_items + $2 WHERE id = $1",
            owned![feed, items],
            Expect::One(format!("no feed with id {feed}")),
        );
    }

    /// Writes what the batch owes its feeds ([`store_sql::batch_kept::Owed`]), a statement
    /// or two per feed, to go out ahead of the next read or the COMMIT.
    pub(crate) fn pay_owed(&self) {
        let Some(kept) = self.kept() else { return };
        let owed = kept.borrow_mut().take_owed();
        for (feed, owed) in owed {
            match &owed.saved {
                Some(row) => self.write_feed(row, owed.items),
                None if owed.items != 0 => self.add_items(feed, owed.items),
                None => {}
            }
            self.write_modified(feed, &owed.modified);
        }
    }

    /// Locks the rows of the feeds a batch's jobs name and reads the items they name and the
    /// views that follow them, all kept for the batch's closures (the absent items as
    /// absent): four statements in one round trip, whatever the number of feeds, and one
    /// more round trip when some are busy. Returns the feeds another instance holds, which
    /// it does not wait for.
    ///
    /// Why not wait for them: two instances writing the same feeds would then take turns for
    /// whole batches; this way each goes on with the feeds the other does not hold. A batch
    /// first waits, in name order, for the feeds the last one found busy (so their jobs wait
    /// one batch at most), then takes those of the others that are free, never waiting: every
    /// wait happens while it holds only feeds named before the one waited for, as in any
    /// order of locking, so two instances' batches never wait on each other in a cycle. When
    /// it would lock nothing at all, it waits for all its feeds in name order.
    pub(crate) fn lock_and_read(&self, targets: &Targets<'_>, wait: &Busy) -> StoreResult<Busy> {
        let Some(kept) = self.kept() else { return Ok(Busy::new()) };
        if targets.is_empty() {
            return Ok(Busy::new());
        }
        let (waited, others): (Vec<&str>, Vec<&str>) = targets.keys().partition(|f| wait.contains(**f));
        let (mut item_feeds, mut item_ids): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
        for (feed, ids) in targets {
            item_feeds.extend(std::iter::repeat_n(*feed, ids.len()));
            item_ids.extend(ids.iter().copied());
        }
        let names: Vec<&str> = targets.keys().copied().collect();
        // Rows are locked in the order the statement returns them: by name. The reads run
        // after the locks (the statements run in order), so they see what the locks protect.
        let (lock_waiting, lock_free) = (lock_rows(""), lock_rows(" SKIP LOCKED"));
        let [waited_rows, free_rows, items, views]: [Vec<Row>; 4] = self
            .queries(&[
                (&lock_waiting, &[&waited]),
                (&lock_free, &[&others]),
                (&ITEMS_OF_FEEDS, &[&item_feeds, &item_ids]),
                (VIEWS_OF_FEEDS, &[&names]),
            ])?
            .try_into()
            .map_err(|_| StoreError::Backend("four answers expected".into()))?;
        let feed_rows = |rows: &[Row]| rows.iter().map(|r| feed_row(&self.columns(r))).collect::<StoreResult<Vec<_>>>();
        let (mut feeds, free) = (feed_rows(&waited_rows)?, feed_rows(&free_rows)?);
        let mut busy = Busy::new();
        if free.len() < others.len() {
            if feeds.is_empty() && free.is_empty() {
                // Nothing else to do meanwhile, and nothing held: wait for them all (and read
                // again what their locks protect).
                let all = names.iter().map(|f| f.to_string()).collect();
                return self.lock_and_read(targets, &all);
            }
            let locked: Vec<&str> = free.iter().map(|f| f.name.as_str()).collect();
            let missing: Vec<&str> = others.iter().copied().filter(|f| !locked.contains(f)).collect();
            // A feed not returned is busy, or absent (a publish may create it).
            let existing = self.query("SELECT name FROM feeds WHERE name = ANY($1)", &[&missing])?;
            busy = existing.iter().map(|r| self.get::<String>(r, 0)).collect::<StoreResult<_>>()?;
        }
        feeds.extend(free);
        let views: Vec<(i64, String, bool)> = views
            .iter()
            .map(|r| Ok((self.get(r, 0)?, self.get(r, 1)?, self.get(r, 2)?)))
            .collect::<StoreResult<_>>()?;
        // The feed's id comes after the item's columns.
        let feed_column = ITEM_COLUMNS.split(',').count();
        let mut kept = kept.borrow_mut();
        for feed in &feeds {
            for id in targets.get(feed.name.as_str()).into_iter().flatten() {
                kept.keep_item(feed.id, id, None);
            }
        }
        for row in &items {
            let feed: i64 = self.get(row, feed_column)?;
            // Items of feeds not locked (busy) are left: they may change before their turn.
            if feeds.iter().any(|f| f.id == feed) {
                let item = self.columns(row).item()?;
                kept.keep_item(feed, &item.id.clone(), Some(item));
            }
        }
        for feed in &feeds {
            let rows = views.iter().filter(|(of, ..)| *of == feed.id).map(|(_, view, hub)| (view.clone(), *hub));
            kept.keep_feed(feed);
            kept.keep_followed(feed.id, &followed(rows.collect()));
        }
        Ok(busy)
    }

    /// Appends a change to `push_log`, in its feed's shard.
    fn log_push(&self, change: &Change) {
        let (deleted, when, payload) = payload::columns(&change.item.payload);
        let views: Vec<String> = change.views.iter().map(|v| v.view.clone()).collect();
        let counts: Vec<i64> = change.views.iter().map(|v| v.count.min(i64::MAX as u64) as i64).collect();
        let previous: Vec<Option<String>> = change.views.iter().map(|v| v.previous.map(|c| c.to_string())).collect();
        let last: Vec<String> = change.views.iter().map(|v| v.last.to_string()).collect();
        self.defer(
            "INSERT INTO push_log(feed, shard, item_id, created, modified, deleted, when_ms, payload,
                                  views, counts, previous, last)
             SELECT id, (id % $12)::int, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 FROM feeds WHERE name = $1",
            owned![
                change.feed.clone(),
                change.item.id.clone(),
                change.created,
                change.item.modified.t,
                deleted,
                when,
                payload.to_vec(),
                views,
                counts,
                previous,
                last,
                i64::from(crate::push_shards::SHARDS),
            ],
            Expect::Some(format!("cannot log a push: no feed {:?}", change.feed)),
        );
    }
}
