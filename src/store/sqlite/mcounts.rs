//! Counts of items per range of modified seqs: rank and position in modified order without
//! scanning the feed.
//!
//! In created order, seqs are dense from 1, so an item's rank is its seq minus one. In
//! modified order an update gives the item a fresh seq and frees its old one, so seqs have
//! holes. `mcounts` counts the live seqs per bucket at two levels: level 1 buckets hold 2^10
//! seqs, level 2 buckets 2^20 (1024 level-1 buckets). The number of items with an mseq below
//! `m` is then the sum of the level-2 buckets below `m`'s (one row per million seqs), plus
//! the level-1 buckets below `m`'s within its level-2 bucket (at most 1023 rows), plus the
//! items of `m`'s own level-1 bucket below `m` (at most 1023 index entries).
//!
//! Every rank here relies on the store's one ordering invariant: within a feed, modified
//! times never decrease as seqs grow, so `(mtime, mseq)` order is `mseq` order.

use crate::store::StoreResult;
use rusqlite::{Connection, OptionalExtension, params};

const SHIFT1: u32 = 10;
const SHIFT2: u32 = 20;
/// Level-1 buckets per level-2 bucket, minus one: the mask of a level-1 bucket within its parent.
const SPAN1: i64 = (1 << (SHIFT2 - SHIFT1)) - 1;

/// Adds `delta` (+1 or -1) to the buckets of `mseq`; empty buckets are deleted so rank and
/// position walks never visit them.
pub(crate) fn bump(conn: &Connection, feed: i64, mseq: i64, delta: i64) -> StoreResult<()> {
    let mut upsert = conn.prepare_cached(
        "INSERT INTO mcounts(feed, level, bucket, n) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(feed, level, bucket) DO UPDATE SET n = n + excluded.n",
    )?;
    let mut prune =
        conn.prepare_cached("DELETE FROM mcounts WHERE feed = ?1 AND level = ?2 AND bucket = ?3 AND n = 0")?;
    for (level, shift) in [(1, SHIFT1), (2, SHIFT2)] {
        let bucket = mseq >> shift;
        upsert.execute(params![feed, level, bucket, delta])?;
        if delta < 0 {
            prune.execute(params![feed, level, bucket])?;
        }
    }
    Ok(())
}

/// How many items of the feed have an mseq below `mseq`.
pub(crate) fn count_below(conn: &Connection, feed: i64, mseq: i64) -> StoreResult<u64> {
    let b1 = mseq >> SHIFT1;
    let b2 = mseq >> SHIFT2;
    let mut sum = conn.prepare_cached(
        "SELECT COALESCE(SUM(n), 0) FROM mcounts WHERE feed = ?1 AND level = ?2 AND bucket >= ?3 AND bucket < ?4",
    )?;
    let whole: i64 = sum.query_row(params![feed, 2, i64::MIN, b2], |r| r.get(0))?;
    let partial: i64 = sum.query_row(params![feed, 1, b2 << (SHIFT2 - SHIFT1), b1], |r| r.get(0))?;
    let mut inside = conn.prepare_cached("SELECT COUNT(*) FROM items WHERE feed = ?1 AND mseq >= ?2 AND mseq < ?3")?;
    let own: i64 = inside.query_row(params![feed, b1 << SHIFT1, mseq], |r| r.get(0))?;
    Ok((whole + partial + own).max(0) as u64)
}

/// The `(mtime, mseq)` of the item at ascending position `index` in modified order.
/// `None` when the counts hold fewer items than that.
pub(crate) fn nth(conn: &Connection, feed: i64, index: u64) -> StoreResult<Option<(i64, i64)>> {
    let mut rem = index;
    let mut level2 =
        conn.prepare_cached("SELECT bucket, n FROM mcounts WHERE feed = ?1 AND level = 2 ORDER BY bucket")?;
    let Some(b2) = walk(level2.query(params![feed])?, &mut rem)? else { return Ok(None) };
    let mut level1 = conn.prepare_cached(
        "SELECT bucket, n FROM mcounts WHERE feed = ?1 AND level = 1 AND bucket BETWEEN ?2 AND ?3 ORDER BY bucket",
    )?;
    let first = b2 << (SHIFT2 - SHIFT1);
    let Some(b1) = walk(level1.query(params![feed, first, first | SPAN1])?, &mut rem)? else { return Ok(None) };
    let mut item = conn.prepare_cached(
        "SELECT mtime, mseq FROM items WHERE feed = ?1 AND mseq >= ?2 ORDER BY mseq LIMIT 1 OFFSET ?3",
    )?;
    // `rem` is below the bucket's count, itself at most 1024: the offset is bounded.
    Ok(item.query_row(params![feed, b1 << SHIFT1, rem as i64], |r| Ok((r.get(0)?, r.get(1)?))).optional()?)
}

/// Walks `(bucket, n)` rows, subtracting counts from `rem` until the bucket holding position
/// `rem` is found.
fn walk(mut rows: rusqlite::Rows<'_>, rem: &mut u64) -> StoreResult<Option<i64>> {
    while let Some(row) = rows.next()? {
        let bucket: i64 = row.get(0)?;
        let n: i64 = row.get(1)?;
        let n = n.max(0) as u64;
        if *rem < n {
            return Ok(Some(bucket));
        }
        *rem -= n;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::{Item, Key, Payload};
    use crate::store::WriteTx;
    use crate::store::sqlite::read::SqlTx;

    fn db() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::store::sqlite::schema::migrate(&mut conn).unwrap();
        conn
    }

    fn item(n: i64, mseq: i64) -> Item {
        Item {
            id: format!("i{n}"),
            created: Key { t: n, seq: n },
            modified: Key { t: mseq, seq: mseq },
            author: None,
            categories: vec![],
            atom_id: None,
            payload: Payload::Entry(String::new()),
        }
    }

    /// Seqs on both sides of both bucket sizes, then moves that empty and refill buckets.
    #[test]
    fn counts_and_positions_match_brute_force_across_bucket_edges() {
        let conn = db();
        let mut tx = SqlTx::new(&conn);
        let f = tx.create_feed("f").unwrap().id;
        let mut seqs = vec![1, 2, 1023, 1024, 1025, 2047, 2048, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 5 << 20];
        let mut items: Vec<Item> = seqs.iter().enumerate().map(|(n, &m)| item(n as i64 + 1, m)).collect();
        for it in &items {
            tx.insert_item(f, it).unwrap();
        }
        let check = |seqs: &[i64]| {
            let mut sorted = seqs.to_vec();
            sorted.sort();
            for (i, &m) in sorted.iter().enumerate() {
                assert_eq!(count_below(&conn, f, m).unwrap(), i as u64, "below {m}");
                assert_eq!(nth(&conn, f, i as u64).unwrap(), Some((m, m)), "nth {i}");
                assert_eq!(count_below(&conn, f, m + 1).unwrap(), i as u64 + 1);
            }
            assert_eq!(nth(&conn, f, sorted.len() as u64).unwrap(), None);
            assert_eq!(count_below(&conn, f, i64::MAX).unwrap(), sorted.len() as u64);
        };
        check(&seqs);
        // Move the items of the low buckets to the end: their buckets empty and go.
        for (k, at) in [0usize, 2, 3, 7].into_iter().enumerate() {
            let new =
                Item { modified: Key { t: (6 << 20) + k as i64, seq: (6 << 20) + k as i64 }, ..items[at].clone() };
            tx.update_item(f, &items[at], &new).unwrap();
            seqs[at] = new.modified.seq;
            items[at] = new;
        }
        check(&seqs);
        let rows: i64 = conn.query_row("SELECT COUNT(*) FROM mcounts WHERE n = 0", [], |r| r.get(0)).unwrap();
        assert_eq!(rows, 0, "empty buckets are deleted");
    }

    #[test]
    fn bucket_queries_search_their_indexes() {
        let conn = db();
        let sqls = [
            "SELECT COALESCE(SUM(n), 0) FROM mcounts WHERE feed = 1 AND level = 1 AND bucket >= 0 AND bucket < 9",
            "SELECT bucket, n FROM mcounts WHERE feed = 1 AND level = 2 ORDER BY bucket",
            "SELECT bucket, n FROM mcounts WHERE feed = 1 AND level = 1 AND bucket BETWEEN 0 AND 1023 ORDER BY bucket",
            "SELECT COUNT(*) FROM items WHERE feed = 1 AND mseq >= 1024 AND mseq < 2000",
            "SELECT mtime, mseq FROM items WHERE feed = 1 AND mseq >= 1024 ORDER BY mseq LIMIT 1 OFFSET 5",
        ];
        for sql in sqls {
            let plan: String = conn.query_row(&format!("EXPLAIN QUERY PLAN {sql}"), [], |r| r.get(3)).unwrap();
            assert!(plan.starts_with("SEARCH") && !plan.contains("TEMP"), "{sql}: {plan}");
        }
    }
}
