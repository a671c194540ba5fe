//! The per-bucket counts of modified seqs ([`store_sql::modified_counts`]) as PostgreSQL
//! keeps them: every statement is a round trip, so a rank is one statement (the four levels'
//! sums and the count inside the level-1 bucket, added up by the server) and a bump is one
//! too. Buckets that empty are kept (at n = 0): every walk is bounded by the bucket ranges,
//! not by the rows.

use crate::connection::{PgConn, owned};
use feed::ports::StoreResult;
use std::collections::BTreeMap;
use store_sql::driver::{Expect, ModifiedCounts};
use store_sql::modified_counts::{SHIFTS, bucket_start, buckets_below};

/// The sum of every level's buckets below `mseq`'s within its parent (at the top: all),
/// plus the items of `mseq`'s level-1 bucket below it.
const COUNT_BELOW_SQL: &str = "SELECT (
    (SELECT COALESCE(SUM(n), 0) FROM modified_counts WHERE feed = $1 AND level = 4 AND bucket < $2)
  + (SELECT COALESCE(SUM(n), 0) FROM modified_counts WHERE feed = $1 AND level = 3 AND bucket >= $3 AND bucket < $4)
  + (SELECT COALESCE(SUM(n), 0) FROM modified_counts WHERE feed = $1 AND level = 2 AND bucket >= $5 AND bucket < $6)
  + (SELECT COALESCE(SUM(n), 0) FROM modified_counts WHERE feed = $1 AND level = 1 AND bucket >= $7 AND bucket < $8)
  + (SELECT COUNT(*) FROM items WHERE feed = $1 AND mseq >= $9 AND mseq < $10)
)::bigint";

impl ModifiedCounts for PgConn<'_> {
    fn count_modified_below(&self, feed: i64, mseq: i64) -> StoreResult<u64> {
        let [(_, _, top), (_, l3, e3), (_, l2, e2), (_, l1, e1)] = buckets_below(mseq);
        let inside = bucket_start(mseq);
        let row = self.query_one(COUNT_BELOW_SQL, &[&feed, &top, &l3, &e3, &l2, &e2, &l1, &e1, &inside, &mseq])?;
        Ok(self.get::<i64>(&row, 0)?.max(0) as u64)
    }

    /// Owed to the feed in the writer's batch, which writes a feed's changes in one
    /// statement before its next read or its COMMIT ([`PgConn::pay_owed`]); in one statement
    /// of its own otherwise.
    fn move_modified(&self, feed: i64, add: Option<i64>, remove: Option<i64>) -> StoreResult<()> {
        let mut changes = BTreeMap::new();
        for (i, shift) in SHIFTS.into_iter().enumerate() {
            for (seq, delta) in [(add, 1i64), (remove, -1)] {
                if let Some(seq) = seq {
                    *changes.entry((i as i64 + 1, seq >> shift)).or_insert(0) += delta;
                }
            }
        }
        match self.kept() {
            Some(kept) => {
                let mut kept = kept.borrow_mut();
                let owed = &mut kept.owe(feed).modified;
                for (bucket, delta) in changes {
                    *owed.entry(bucket).or_insert(0) += delta;
                }
            }
            None => self.write_modified(feed, &changes),
        }
        Ok(())
    }
}

impl PgConn<'_> {
    /// Adds `changes` to the feed's modified counts, in one statement. Changes that cancel
    /// are left out (an upsert may not touch a row twice, and none is).
    pub(crate) fn write_modified(&self, feed: i64, changes: &BTreeMap<(i64, i64), i64>) {
        let (mut levels, mut buckets, mut deltas) = (Vec::new(), Vec::new(), Vec::new());
        for (&(level, bucket), &delta) in changes.iter().filter(|(_, d)| **d != 0) {
            levels.push(level);
            buckets.push(bucket);
            deltas.push(delta);
        }
        if levels.is_empty() {
            return;
        }
        self.defer(
            "INSERT INTO modified_counts(feed, level, bucket, n)
         SELECT $1, l, b, d FROM unnest($2::bigint[], $3::bigint[], $4::bigint[]) AS u(l, b, d)
         ON CONFLICT (feed, level, bucket) DO UPDATE SET n = modified_counts.n + excluded.n",
            owned![feed, levels, buckets, deltas],
            Expect::Any,
        );
    }
}
