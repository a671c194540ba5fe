//! Counts of items per range of modified seqs: rank and position in modified order without
//! scanning the feed.
//!
//! In created order, seqs are dense from 1, so an item's rank is its seq minus one. In
//! modified order an update gives the item a fresh seq and frees its old one, so seqs have
//! holes. `modified_counts` counts the live seqs per bucket at four levels (schema version 2): a
//! level-`l` bucket holds 2^(6·l) seqs, so each holds 64 buckets of the level below. The
//! number of items with an mseq below `m` is the sum of the top-level buckets below `m`'s
//! (one row per 2^24 seqs), plus, at each lower level, the buckets below `m`'s within its
//! parent (at most 63 rows each), plus the items of `m`'s own level-1 bucket below `m` (at
//! most 63 index entries).
//!
//! Every rank here relies on the store's one ordering invariant: within a feed, modified
//! times never decrease as seqs grow, so `(mtime, mseq)` order is `mseq` order.

use crate::codec::Db;
use feed::ports::StoreResult;
use rusqlite::{Connection, OptionalExtension, params};

/// log2 of the number of seqs per bucket, per level (level `l` is `SHIFTS[l - 1]`).
const SHIFTS: [u32; 4] = [6, 12, 18, 24];
/// log2 of the children a bucket has in the level below.
const FANOUT: u32 = 6;

/// The level numbers, bottom up, with their shifts.
fn levels() -> impl DoubleEndedIterator<Item = (i64, u32)> {
    SHIFTS.into_iter().enumerate().map(|(i, shift)| (i as i64 + 1, shift))
}

/// Adds `delta` (+1 or -1) to the buckets of `mseq`; empty buckets are deleted so rank and
/// position walks never visit them.
pub(crate) fn bump(conn: &Connection, feed: i64, mseq: i64, delta: i64) -> StoreResult<()> {
    let mut upsert = conn
        .prepare_cached(
            "INSERT INTO modified_counts(feed, level, bucket, n) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(feed, level, bucket) DO UPDATE SET n = n + excluded.n",
        )
        .db()?;
    let mut prune = conn
        .prepare_cached("DELETE FROM modified_counts WHERE feed = ?1 AND level = ?2 AND bucket = ?3 AND n = 0")
        .db()?;
    for (level, shift) in levels() {
        let bucket = mseq >> shift;
        upsert.execute(params![feed, level, bucket, delta]).db()?;
        if delta < 0 {
            prune.execute(params![feed, level, bucket]).db()?;
        }
    }
    Ok(())
}

/// How many items of the feed have an mseq below `mseq`.
pub(crate) fn count_below(conn: &Connection, feed: i64, mseq: i64) -> StoreResult<u64> {
    let mut sum = conn.prepare_cached(
        "SELECT COALESCE(SUM(n), 0) FROM modified_counts WHERE feed = ?1 AND level = ?2 AND bucket >= ?3 AND bucket < ?4",
    ).db()?;
    let mut total: i64 = 0;
    for (level, shift) in levels().rev() {
        // The buckets of this level below mseq's, within mseq's bucket of the level above
        // (at the top: all of them).
        let from = if shift == SHIFTS[SHIFTS.len() - 1] { i64::MIN } else { (mseq >> (shift + FANOUT)) << FANOUT };
        total += sum.query_row(params![feed, level, from, mseq >> shift], |r| r.get::<_, i64>(0)).db()?;
    }
    let mut inside =
        conn.prepare_cached("SELECT COUNT(*) FROM items WHERE feed = ?1 AND mseq >= ?2 AND mseq < ?3").db()?;
    total += inside.query_row(params![feed, (mseq >> SHIFTS[0]) << SHIFTS[0], mseq], |r| r.get::<_, i64>(0)).db()?;
    Ok(total.max(0) as u64)
}

/// The `(mtime, mseq)` of the item at ascending position `index` in modified order.
/// `None` when the counts hold fewer items than that.
pub(crate) fn nth(conn: &Connection, feed: i64, index: u64) -> StoreResult<Option<(i64, i64)>> {
    let mut rem = index;
    let mut buckets = conn.prepare_cached(
        "SELECT bucket, n FROM modified_counts WHERE feed = ?1 AND level = ?2 AND bucket BETWEEN ?3 AND ?4 ORDER BY bucket",
    ).db()?;
    // Down from the top level, each time into the children of the bucket found.
    let (mut first, mut last) = (i64::MIN, i64::MAX);
    let mut found = 0;
    for (level, _) in levels().rev() {
        let Some(bucket) = walk(buckets.query(params![feed, level, first, last]).db()?, &mut rem)? else {
            return Ok(None);
        };
        (first, last, found) = (bucket << FANOUT, (bucket << FANOUT) | ((1 << FANOUT) - 1), bucket);
    }
    let mut item = conn
        .prepare_cached("SELECT mtime, mseq FROM items WHERE feed = ?1 AND mseq >= ?2 ORDER BY mseq LIMIT 1 OFFSET ?3")
        .db()?;
    // `rem` is below the level-1 bucket's count, itself at most 64: the offset is bounded.
    item.query_row(params![feed, found << SHIFTS[0], rem as i64], |r| Ok((r.get(0)?, r.get(1)?))).optional().db()
}

/// Walks `(bucket, n)` rows, subtracting counts from `rem` until the bucket holding position
/// `rem` is found.
fn walk(mut rows: rusqlite::Rows<'_>, rem: &mut u64) -> StoreResult<Option<i64>> {
    while let Some(row) = rows.next().db()? {
        let bucket: i64 = row.get(0).db()?;
        let n: i64 = row.get(1).db()?;
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
    use crate::read::SqlTx;
    use feed::ports::WriteTx;
    use feed::{Item, Key, Payload};

    fn db() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::schema::migrate(&mut conn).unwrap();
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
        // Both sides of every level's bucket edge.
        let mut seqs: Vec<i64> = vec![1, 2, 3 << 24];
        for shift in SHIFTS {
            seqs.extend([(1 << shift) - 1, 1 << shift, (1 << shift) + 1, (3 << shift) + 5]);
        }
        seqs.sort();
        seqs.dedup();
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
                Item { modified: Key { t: (6 << 24) + k as i64, seq: (6 << 24) + k as i64 }, ..items[at].clone() };
            tx.update_item(f, &items[at], &new).unwrap();
            seqs[at] = new.modified.seq;
            items[at] = new;
        }
        check(&seqs);
        let rows: i64 = conn.query_row("SELECT COUNT(*) FROM modified_counts WHERE n = 0", [], |r| r.get(0)).unwrap();
        assert_eq!(rows, 0, "empty buckets are deleted");
    }

    #[test]
    fn bucket_queries_search_their_indexes() {
        let conn = db();
        let sqls = [
            "SELECT COALESCE(SUM(n), 0) FROM modified_counts WHERE feed = 1 AND level = 1 AND bucket >= 0 AND bucket < 9",
            "SELECT bucket, n FROM modified_counts WHERE feed = 1 AND level = 4 AND bucket BETWEEN -99 AND 99 ORDER BY bucket",
            "SELECT bucket, n FROM modified_counts WHERE feed = 1 AND level = 1 AND bucket BETWEEN 0 AND 63 ORDER BY bucket",
            "SELECT COUNT(*) FROM items WHERE feed = 1 AND mseq >= 64 AND mseq < 100",
            "SELECT mtime, mseq FROM items WHERE feed = 1 AND mseq >= 64 ORDER BY mseq LIMIT 1 OFFSET 5",
            "SELECT i.id FROM items i WHERE i.feed = 1 AND i.ctime = 5 AND i.cseq <= 9 ORDER BY i.ctime, i.cseq LIMIT 3",
        ];
        for sql in sqls {
            let plan: String = conn.query_row(&format!("EXPLAIN QUERY PLAN {sql}"), [], |r| r.get(3)).unwrap();
            assert!(plan.starts_with("SEARCH") && !plan.contains("TEMP"), "{sql}: {plan}");
        }
        // A cursor's checksum is checked from the ordering index alone.
        let plan: String = conn.query_row(&format!("EXPLAIN QUERY PLAN {}", sqls[5]), [], |r| r.get(3)).unwrap();
        assert!(plan.contains("COVERING INDEX items_created"), "{plan}");
    }

    /// A version-1 database (two levels of 1024) with items moved about: after the migration
    /// the four-level counts give exactly the brute-force ranks and positions.
    #[test]
    fn version_1_counts_are_rebuilt_by_the_migration() {
        let mut conn = Connection::open_in_memory().unwrap();
        let v1 = &crate::schema::MIGRATIONS[..1];
        crate::schema::migrate_with(&mut conn, v1).unwrap();
        conn.execute("INSERT INTO feeds(id, name) VALUES (1, 'f')", []).unwrap();
        let mut mseqs: Vec<i64> = (1..=3000).map(|n| n * 37 % 5003 + (n % 3) * 70_000).collect();
        mseqs.sort();
        mseqs.dedup();
        for (n, m) in mseqs.iter().enumerate() {
            conn.execute(
                "INSERT INTO items(feed, id, cseq, ctime, mseq, mtime, categories, deleted, payload)
                 VALUES (1, ?1, ?2, ?2, ?3, ?3, '', 0, '')",
                params![format!("i{n}"), n as i64 + 1, m],
            )
            .unwrap();
            for (level, shift) in [(1, 10), (2, 20)] {
                conn.execute(
                    "INSERT INTO modified_counts(feed, level, bucket, n) VALUES (1, ?1, ?2, 1)
                     ON CONFLICT(feed, level, bucket) DO UPDATE SET n = n + 1",
                    params![level, m >> shift],
                )
                .unwrap();
            }
        }
        crate::schema::migrate(&mut conn).unwrap();
        for (i, &m) in mseqs.iter().enumerate() {
            assert_eq!(count_below(&conn, 1, m).unwrap(), i as u64, "below {m}");
            assert_eq!(nth(&conn, 1, i as u64).unwrap(), Some((m, m)), "nth {i}");
        }
        assert_eq!(nth(&conn, 1, mseqs.len() as u64).unwrap(), None);
    }
}
