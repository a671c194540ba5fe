//! The per-bucket counts of modified seqs ([`store_sql::modified_counts`]) as SQLite keeps
//! them: one row per bucket, changed a level at a time, and empty buckets deleted so rank
//! and position walks never visit them. A rank sums each level's buckets in its own
//! statement: cheap here, where a statement is a function call, not a round trip.

use crate::codec::Db;
use crate::connection::SqliteConn;
use feed::ports::StoreResult;
use rusqlite::params;
use store_sql::driver::ModifiedCounts;
use store_sql::modified_counts::{bucket_start, buckets, buckets_below};

impl SqliteConn<'_> {
    /// Adds `delta` (+1 or -1) to the buckets of `mseq`; empty buckets are deleted.
    fn bump(&self, feed: i64, mseq: i64, delta: i64) -> StoreResult<()> {
        let mut upsert = self
            .0
            .prepare_cached(
                "INSERT INTO modified_counts(feed, level, bucket, n) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(feed, level, bucket) DO UPDATE SET n = n + excluded.n",
            )
            .db()?;
        let mut prune = self
            .0
            .prepare_cached("DELETE FROM modified_counts WHERE feed = ?1 AND level = ?2 AND bucket = ?3 AND n = 0")
            .db()?;
        for (level, bucket) in buckets(mseq) {
            upsert.execute(params![feed, level, bucket, delta]).db()?;
            if delta < 0 {
                prune.execute(params![feed, level, bucket]).db()?;
            }
        }
        Ok(())
    }
}

impl ModifiedCounts for SqliteConn<'_> {
    fn count_modified_below(&self, feed: i64, mseq: i64) -> StoreResult<u64> {
        let mut sum = self.0.prepare_cached(
            "SELECT COALESCE(SUM(n), 0) FROM modified_counts WHERE feed = ?1 AND level = ?2 AND bucket >= ?3 AND bucket < ?4",
        ).db()?;
        let mut total: i64 = 0;
        for (level, first, end) in buckets_below(mseq) {
            total += sum.query_row(params![feed, level, first, end], |r| r.get::<_, i64>(0)).db()?;
        }
        let mut inside =
            self.0.prepare_cached("SELECT COUNT(*) FROM items WHERE feed = ?1 AND mseq >= ?2 AND mseq < ?3").db()?;
        total += inside.query_row(params![feed, bucket_start(mseq), mseq], |r| r.get::<_, i64>(0)).db()?;
        Ok(total.max(0) as u64)
    }

    fn move_modified(&self, feed: i64, add: Option<i64>, remove: Option<i64>) -> StoreResult<()> {
        if add == remove {
            return Ok(());
        }
        if let Some(mseq) = remove {
            self.bump(feed, mseq, -1)?;
        }
        if let Some(mseq) = add {
            self.bump(feed, mseq, 1)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use feed::ports::WriteTx;
    use feed::{Item, Key, Payload};
    use rusqlite::Connection;
    use store_sql::modified_counts::{SHIFTS, nth};
    use store_sql::transaction::SqlTx;

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

    /// The brute-force answers, for every live mseq of the feed.
    fn check(db: SqliteConn<'_>, f: i64, seqs: &[i64]) {
        let mut sorted = seqs.to_vec();
        sorted.sort();
        for (i, &m) in sorted.iter().enumerate() {
            assert_eq!(db.count_modified_below(f, m).unwrap(), i as u64, "below {m}");
            assert_eq!(nth(&db, f, i as u64).unwrap(), Some(Key { t: m, seq: m }), "nth {i}");
            assert_eq!(db.count_modified_below(f, m + 1).unwrap(), i as u64 + 1);
        }
        assert_eq!(nth(&db, f, sorted.len() as u64).unwrap(), None);
        assert_eq!(db.count_modified_below(f, i64::MAX).unwrap(), sorted.len() as u64);
    }

    /// Seqs on both sides of both bucket sizes, then moves that empty and refill buckets.
    #[test]
    fn counts_and_positions_match_brute_force_across_bucket_edges() {
        let conn = db();
        let mut tx = SqlTx::new(SqliteConn(&conn, None));
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
        check(SqliteConn(&conn, None), f, &seqs);
        // Move the items of the low buckets to the end: their buckets empty and go.
        for (k, at) in [0usize, 2, 3, 7].into_iter().enumerate() {
            let new =
                Item { modified: Key { t: (6 << 24) + k as i64, seq: (6 << 24) + k as i64 }, ..items[at].clone() };
            tx.update_item(f, &items[at], &new).unwrap();
            seqs[at] = new.modified.seq;
            items[at] = new;
        }
        check(SqliteConn(&conn, None), f, &seqs);
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

    /// A version-3 database keeps its counts through version 4's rename, both as released
    /// (the table called `mcounts`) and as made by the build that already called it
    /// `modified_counts` at version 3.
    #[test]
    fn version_4_keeps_the_counts_of_either_version_3() {
        for name in ["mcounts", "modified_counts"] {
            let mut conn = Connection::open_in_memory().unwrap();
            let v3: Vec<String> = crate::schema::MIGRATIONS[..3].iter().map(|m| m.replace("mcounts", name)).collect();
            let v3: Vec<&str> = v3.iter().map(String::as_str).collect();
            crate::schema::migrate_with(&mut conn, &v3).unwrap();
            conn.execute_batch(&format!(
                "INSERT INTO feeds(id, name) VALUES (1, 'f');
                 INSERT INTO {name}(feed, level, bucket, n) VALUES (1, 1, 0, 7), (1, 2, 0, 7);"
            ))
            .unwrap();
            crate::schema::migrate(&mut conn).unwrap();
            let n: i64 = conn.query_row("SELECT SUM(n) FROM modified_counts", [], |r| r.get(0)).unwrap();
            assert_eq!(n, 14, "{name}");
            let old: i64 =
                conn.query_row("SELECT COUNT(*) FROM sqlite_master WHERE name = 'mcounts'", [], |r| r.get(0)).unwrap();
            assert_eq!(old, 0, "{name}");
        }
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
                    "INSERT INTO mcounts(feed, level, bucket, n) VALUES (1, ?1, ?2, 1)
                     ON CONFLICT(feed, level, bucket) DO UPDATE SET n = n + 1",
                    params![level, m >> shift],
                )
                .unwrap();
            }
        }
        crate::schema::migrate(&mut conn).unwrap();
        let db = SqliteConn(&conn, None);
        for (i, &m) in mseqs.iter().enumerate() {
            assert_eq!(db.count_modified_below(1, m).unwrap(), i as u64, "below {m}");
            assert_eq!(nth(&db, 1, i as u64).unwrap(), Some(Key { t: m, seq: m }), "nth {i}");
        }
        assert_eq!(nth(&db, 1, mseqs.len() as u64).unwrap(), None);
    }
}
