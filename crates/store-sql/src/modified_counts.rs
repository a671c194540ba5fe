//! Counts of items per range of modified seqs: rank and position in modified order without
//! scanning the feed, the same scheme in both stores.
//!
//! In created order, seqs are dense from 1, so an item's rank is its seq minus one. In
//! modified order an update gives the item a fresh seq and frees its old one, so seqs have
//! holes. `modified_counts` counts the live seqs per bucket at four levels: a level-`l`
//! bucket holds 2^(6·l) seqs, so each holds 64 buckets of the level below. The number of
//! items with an mseq below `m` is the sum of the top-level buckets below `m`'s (one row per
//! 2^24 seqs), plus, at each lower level, the buckets below `m`'s within its parent (at most
//! 63 rows each), plus the items of `m`'s own level-1 bucket below `m` (at most 63 index
//! entries). A position is found the other way down: into the bucket that holds it, level by
//! level, then at most 63 index entries into its level-1 bucket.
//!
//! Every rank here relies on the stores' one ordering invariant: within a feed, modified
//! times never decrease as seqs grow, so `(mtime, mseq)` order is `mseq` order.
//!
//! How a store keeps the counts and sums a rank is its own (see
//! [`ModifiedCounts`](crate::driver::ModifiedCounts)); the bucket arithmetic and the walk to
//! a position are here.

use crate::dialect::Statement;
use crate::driver::Statements;
use feed::Key;
use feed::ports::StoreResult;

/// log2 of the number of seqs per bucket, per level (level `l` is `SHIFTS[l - 1]`).
pub const SHIFTS: [u32; 4] = [6, 12, 18, 24];
/// log2 of the children a bucket has in the level below.
const FANOUT: u32 = 6;

/// The level numbers, bottom up, with their shifts.
fn levels() -> impl DoubleEndedIterator<Item = (i64, u32)> {
    SHIFTS.into_iter().enumerate().map(|(i, shift)| (i as i64 + 1, shift))
}

/// The bucket of `mseq` at each level, bottom up: `(level, bucket)`.
pub fn buckets(mseq: i64) -> impl DoubleEndedIterator<Item = (i64, i64)> {
    levels().map(move |(level, shift)| (level, mseq >> shift))
}

/// The buckets whose counts add up to the items below `mseq`, top level first: `(level,
/// first, end)`, `end` excluded. At the top every bucket below `mseq`'s; below, those below
/// `mseq`'s within its bucket of the level above.
pub fn buckets_below(mseq: i64) -> [(i64, i64, i64); 4] {
    let mut out = [(0, 0, 0); 4];
    for (slot, (level, shift)) in out.iter_mut().zip(levels().rev()) {
        let first = if level == SHIFTS.len() as i64 { i64::MIN } else { (mseq >> (shift + FANOUT)) << FANOUT };
        *slot = (level, first, mseq >> shift);
    }
    out
}

/// The first mseq of `mseq`'s level-1 bucket: the items from there to `mseq` are counted in
/// the `items` index, not in a bucket.
pub fn bucket_start(mseq: i64) -> i64 {
    (mseq >> SHIFTS[0]) << SHIFTS[0]
}

const BUCKETS: &str =
    "SELECT bucket, n FROM modified_counts WHERE feed = ?1 AND level = ?2 AND bucket BETWEEN ?3 AND ?4 ORDER BY bucket";
const NTH_FROM: &str = "SELECT mtime, mseq FROM items WHERE feed = ?1 AND mseq >= ?2 ORDER BY mseq LIMIT 1 OFFSET ?3";

/// The key of the item at ascending position `index` in modified order; `None` when the
/// counts hold fewer items than that.
pub fn nth<S: Statements>(db: &S, feed: i64, index: u64) -> StoreResult<Option<Key>> {
    let mut rem = index;
    // Down from the top level, each time into the children of the bucket found.
    let (mut first, mut last) = (i64::MIN, i64::MAX);
    let mut found = 0;
    for (level, _) in levels().rev() {
        let buckets = Statement::written(S::DIALECT, BUCKETS, &[feed.into(), level.into(), first.into(), last.into()]);
        let counts = db.rows(&buckets, |r| Ok((r.int(0)?, r.int(1)?.max(0) as u64)))?;
        let Some(bucket) = walk(counts, &mut rem) else { return Ok(None) };
        (first, last, found) = (bucket << FANOUT, (bucket << FANOUT) | ((1 << FANOUT) - 1), bucket);
    }
    // `rem` is below the level-1 bucket's count, itself at most 64: the offset is bounded.
    let item =
        Statement::written(S::DIALECT, NTH_FROM, &[feed.into(), (found << SHIFTS[0]).into(), (rem as i64).into()]);
    let keys = db.rows(&item, |r| Ok(Key { t: r.int(0)?, seq: r.int(1)? }))?;
    Ok(keys.into_iter().next())
}

/// Walks `(bucket, n)` counts, taking each from `rem` until the bucket holding position
/// `rem` is found.
fn walk(counts: Vec<(i64, u64)>, rem: &mut u64) -> Option<i64> {
    for (bucket, n) in counts {
        if *rem < n {
            return Some(bucket);
        }
        *rem -= n;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buckets_below_cover_every_lower_seq_once() {
        let m = (5 << 24) + (7 << 18) + (3 << 12) + (9 << 6) + 17;
        // 5, 7, 3 and 9 buckets in, at levels 4 to 1: each level's buckets below, within its parent.
        let below = [(4, i64::MIN, 5), (3, 320, 327), (2, 20_928, 20_931), (1, 1_339_584, 1_339_593)];
        assert_eq!(buckets_below(m), below);
        assert_eq!(bucket_start(m), m - 17);
        assert_eq!(buckets(m).collect::<Vec<_>>(), [(1, m >> 6), (2, m >> 12), (3, m >> 18), (4, 5)]);
    }
}
