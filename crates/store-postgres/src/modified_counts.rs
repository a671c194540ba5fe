//! Counts of items per range of modified seqs: rank and position in modified order without
//! scanning the feed. The same scheme as the SQLite store's (see its `modified_counts`): in created
//! order seqs are dense from 1, so a rank is a seq minus one; in modified order an update
//! frees the item's old seq, so seqs have holes, and `modified_counts` counts the live seqs per
//! bucket at four levels, each bucket holding 64 buckets of the level below.
//!
//! Here a rank is one statement (the four levels' sums and the count inside the level-1
//! bucket, added up by the server) and a position is a walk of five: each round trip is
//! bounded by the bucket ranges, so both cost the same at the end of a million-item feed as
//! at its start.

use super::read::PgTx;
use feed::Key;
use feed::ports::StoreResult;

/// log2 of the number of seqs per bucket, per level (level `l` is `SHIFTS[l - 1]`).
const SHIFTS: [u32; 4] = [6, 12, 18, 24];
/// log2 of the children a bucket has in the level below.
const FANOUT: u32 = 6;

/// Adds `+1` to the buckets of `add` and `-1` to those of `remove`, in one statement. Where
/// both touch one bucket the changes cancel (an upsert may not touch a row twice).
pub(crate) fn bump(tx: &PgTx<'_>, feed: i64, add: Option<i64>, remove: Option<i64>) -> StoreResult<()> {
    let (mut levels, mut buckets, mut deltas) = (Vec::new(), Vec::new(), Vec::new());
    for (i, shift) in SHIFTS.into_iter().enumerate() {
        let plus = add.map(|m| m >> shift);
        let minus = remove.map(|m| m >> shift);
        if plus == minus {
            continue;
        }
        for (bucket, delta) in [(plus, 1i64), (minus, -1)] {
            if let Some(bucket) = bucket {
                levels.push(i as i64 + 1);
                buckets.push(bucket);
                deltas.push(delta);
            }
        }
    }
    if levels.is_empty() {
        return Ok(());
    }
    tx.execute(
        "INSERT INTO modified_counts(feed, level, bucket, n)
         SELECT $1, l, b, d FROM unnest($2::bigint[], $3::bigint[], $4::bigint[]) AS u(l, b, d)
         ON CONFLICT (feed, level, bucket) DO UPDATE SET n = modified_counts.n + excluded.n",
        &[&feed, &levels, &buckets, &deltas],
    )?;
    Ok(())
}

/// The sum of every level's buckets below `mseq`'s within its parent (at the top: all),
/// plus the items of `mseq`'s level-1 bucket below it.
const COUNT_BELOW_SQL: &str = "SELECT (
    (SELECT COALESCE(SUM(n), 0) FROM modified_counts WHERE feed = $1 AND level = 4 AND bucket < $2)
  + (SELECT COALESCE(SUM(n), 0) FROM modified_counts WHERE feed = $1 AND level = 3 AND bucket >= $3 AND bucket < $4)
  + (SELECT COALESCE(SUM(n), 0) FROM modified_counts WHERE feed = $1 AND level = 2 AND bucket >= $5 AND bucket < $6)
  + (SELECT COALESCE(SUM(n), 0) FROM modified_counts WHERE feed = $1 AND level = 1 AND bucket >= $7 AND bucket < $8)
  + (SELECT COUNT(*) FROM items WHERE feed = $1 AND mseq >= $9 AND mseq < $10)
)::bigint";

/// How many items of the feed have an mseq below `mseq`.
pub(crate) fn count_below(tx: &PgTx<'_>, feed: i64, mseq: i64) -> StoreResult<u64> {
    // For levels 3, 2, 1: the first bucket within the parent, and mseq's own.
    let range = |shift: u32| ((mseq >> (shift + FANOUT)) << FANOUT, mseq >> shift);
    let (l3, l2, l1) = (range(SHIFTS[2]), range(SHIFTS[1]), range(SHIFTS[0]));
    let top = mseq >> SHIFTS[3];
    let inside = (mseq >> SHIFTS[0]) << SHIFTS[0];
    let row =
        tx.query_one(COUNT_BELOW_SQL, &[&feed, &top, &l3.0, &l3.1, &l2.0, &l2.1, &l1.0, &l1.1, &inside, &mseq])?;
    Ok(tx.get::<i64>(&row, 0)?.max(0) as u64)
}

/// The key of the item at ascending position `index` in modified order; `None` when the
/// counts hold fewer items than that.
pub(crate) fn nth(tx: &PgTx<'_>, feed: i64, index: u64) -> StoreResult<Option<Key>> {
    let mut rem = index;
    // Down from the top level, each time into the children of the bucket found.
    let (mut first, mut last) = (i64::MIN, i64::MAX);
    let mut found = 0;
    for level in (1..=SHIFTS.len() as i64).rev() {
        let rows = tx.query(
            "SELECT bucket, n FROM modified_counts WHERE feed = $1 AND level = $2 AND bucket BETWEEN $3 AND $4 ORDER BY bucket",
            &[&feed, &level, &first, &last],
        )?;
        let mut hit = None;
        for row in &rows {
            let n = tx.get::<i64>(row, 1)?.max(0) as u64;
            if rem < n {
                hit = Some(tx.get::<i64>(row, 0)?);
                break;
            }
            rem -= n;
        }
        let Some(bucket) = hit else { return Ok(None) };
        (first, last, found) = (bucket << FANOUT, (bucket << FANOUT) | ((1 << FANOUT) - 1), bucket);
    }
    // `rem` is below the level-1 bucket's count, itself at most 64: the offset is bounded.
    let row = tx.query_opt(
        "SELECT mtime, mseq FROM items WHERE feed = $1 AND mseq >= $2 ORDER BY mseq LIMIT 1 OFFSET $3",
        &[&feed, &(found << SHIFTS[0]), &(rem as i64)],
    )?;
    row.map(|r| Ok(Key { t: tx.get(&r, 0)?, seq: tx.get(&r, 1)? })).transpose()
}
