//! Pushes shared by several instances on one database (SPEC §12): every change is pushed
//! once, by one instance, in commit order per feed, whichever instance committed it.
//!
//! - **The log is the queue.** A write that emits a change with subscribed views appends it
//!   to `push_log` in its own transaction (`WriteTx::emit`), so a change is owed exactly
//!   when it is committed, and every commit is announced (`commit_notices`).
//!   Rows of one feed are numbered in commit order (the feed's row is locked first), so
//!   reading a shard's rows by number gives each feed's changes in order.
//! - **Shards.** Feeds are spread over [`SHARDS`] shards (feed id modulo). An instance owns a
//!   shard while its session holds the shard's advisory lock; only the owner pushes the
//!   shard's changes. Instances whose XMPP link is up also hold a *presence* lock, so each
//!   can count the live instances and own about its share: a new instance gets shards
//!   within a tick, and when one dies (its session ends, its locks with it) the others take
//!   its shards within a tick or two. Each takes back the shards it held last first, and
//!   after a lost session gives the others a tick to reappear: when the database restarts,
//!   every instance gets its own shards back and finishes its own batch in flight. A shard
//!   taken from another instance is first pushed after [`HANDOVER`], so that its pushes
//!   do not overtake the last ones the other instance wrote.
//! - **Progress.** The owner reads a batch, hands it to the pusher with a [`Receipt`]
//!   behind it, and waits until the link has written the batch's pushes to the XMPP
//!   server's socket (the receipt is signed). Only then are the batch's rows deleted: a row
//!   leaves the log after its pushes left. A receipt dropped unsigned (the link broke), a
//!   read or a delete that fails (the database restarting, the connection lost) ends the
//!   session: its shards are let go, and whoever takes them next (this instance again, or
//!   another) starts from the rows left, in commit order, never past a change that has
//!   not gone out. Rows whose pushes left but whose delete failed are remembered and
//!   deleted first thing in the next session (only an instance that took their shard in
//!   between pushes them again: the batch in flight).
//! - **Fencing.** With each delete the owner checks, under a share lock, that each
//!   shard's epoch is still the one it raised when it took the shard. A taker raises the
//!   epoch, so an instance that lost a shard (its session ended, its lock taken) fails that
//!   check and stops after at most the batch in hand. Around a crash, only the batch in
//!   flight (read, not yet deleted) may be pushed again by the new owner; nothing is
//!   skipped.
//! - **Wake-ups.** Every instance listens; a notification of a commit that logged changes
//!   wakes the relay at once (one that logged none, most writes to feeds nobody follows,
//!   does not: `commit_notices`), and a poll every [`TICK`] covers notifications lost with a
//!   connection.
//!
//! An instance whose link to the XMPP server is down owns nothing (a hot standby, or one
//! whose server went away), so its shards go to instances that can deliver.

use crate::error::Db;
use feed::ports::{ChangeSink, Share, StoreError, StoreResult};
use feed::{Change, Cursor, Item, Receipt, ToPush, ViewChange};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, mpsc, watch};
use tokio_postgres::{AsyncMessage, Client, NoTls, Row};

/// Shards the feeds are spread over; `push_shards` has a row for each (schema version 3).
pub const SHARDS: i32 = 16;
/// Changes read and handed over per round; also the most that may be pushed twice around
/// a crash, so the pusher's own queue of changes should be no longer than this.
pub const BATCH: usize = 64;
/// How often shares are rebalanced and the log polled without a notification.
pub const TICK: Duration = Duration::from_secs(1);
/// How long a shard taken from another instance waits before its first push. The other
/// instance wrote its last pushes to its own connection, and the XMPP server may still be
/// routing them (one connection's stanzas are not ordered with another's): pushing the
/// next changes at once through this connection could overtake them.
pub const HANDOVER: Duration = Duration::from_secs(1);

/// Advisory lock classes (the first key of the two-key form): "sfpr" and "sfsh".
const PRESENCE_CLASS: i32 = 0x7366_7072;
const SHARD_CLASS: i32 = 0x7366_7368;

/// The sessions holding a presence lock (`$1`: [`PRESENCE_CLASS`], as an oid): the live
/// instances. Two-key advisory locks show their first key as `classid`, with `objsubid` 2.
const COUNT_LIVE: &str = "SELECT count(*) FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = $1
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";

const PENDING: &str = "SELECT l.seq, l.shard, f.name, l.item_id, l.created, l.modified, l.deleted, l.when_ms,
        l.payload, l.views, l.counts, l.previous, l.last
    FROM push_log l JOIN feeds f ON f.id = l.feed
    WHERE l.shard = ANY($1) ORDER BY l.seq LIMIT $2";

/// Moves logged changes of the shards this instance owns to its pusher.
pub struct Relay {
    config: tokio_postgres::Config,
    /// Written into `push_shards.owner`, for operators.
    me: String,
    out: mpsc::Sender<ToPush>,
    /// Rows whose pushes were written but whose delete failed: deleted first in the next
    /// session.
    written: Vec<i64>,
    /// Shards taken from another instance, and when pushing them may start (see
    /// [`HANDOVER`]).
    quiet: BTreeMap<i32, tokio::time::Instant>,
    /// Whether the XMPP link is up: an instance owns shards only then.
    linked: watch::Receiver<bool>,
    /// The shards held, for the WebSub hub, which delivers for the same feeds.
    share: watch::Sender<Share>,
    /// Also told of every change handed over (the WebSub hub's wake-ups).
    also: Option<std::sync::Mutex<ChangeSink>>,
}

/// Why a session ended.
enum End {
    /// The pusher is gone: the process is stopping.
    Stopped,
    /// The link went down: every shard is let go until it is back.
    Unlinked,
}

/// How a round of relaying ended.
enum Drained {
    /// Nothing left in the owned shards.
    Empty,
    /// More is waiting; shares are due for a look first.
    More,
    /// The session should end.
    End(End),
}

impl Relay {
    /// A relay for the database at `url` (as `[store] url`), handing changes to `out`.
    pub fn new(url: &str, out: mpsc::Sender<ToPush>, linked: watch::Receiver<bool>) -> Result<Relay, String> {
        let config = super::parse_url(url)?;
        let share = watch::Sender::new(Share { shards: Default::default(), of: SHARDS });
        let me = format!("pid {}", std::process::id());
        Ok(Relay { config, me, out, written: Vec::new(), quiet: BTreeMap::new(), linked, share, also: None })
    }

    /// Also hands every relayed batch to `sink`, after the pusher.
    pub fn also(mut self, sink: ChangeSink) -> Relay {
        self.also = Some(std::sync::Mutex::new(sink));
        self
    }

    /// The shards this relay holds, as they change.
    pub fn share(&self) -> watch::Receiver<Share> {
        self.share.subscribe()
    }

    fn publish_share(&self, owned: &BTreeMap<i32, i64>) {
        let shards = owned.keys().copied().collect();
        self.share.send_if_modified(|s| {
            let changed = s.shards != shards;
            s.shards = shards;
            changed
        });
    }

    /// Runs until the pusher's queue closes: a session while the link is up, again after a
    /// lost connection.
    pub async fn run(mut self) {
        let mut rejoin = false;
        loop {
            if self.out.is_closed() {
                return;
            }
            if !*self.linked.borrow() {
                tokio::select! {
                    _ = self.linked.wait_for(|up| *up) => {}
                    _ = self.out.closed() => return,
                }
                continue;
            }
            let ended = self.session(rejoin).await;
            rejoin = ended.is_err();
            self.publish_share(&BTreeMap::new());
            match ended {
                Ok(End::Stopped) => return,
                Ok(End::Unlinked) => tracing::info!("push relay: the link is down; shards let go"),
                Err(e) => {
                    tracing::warn!(error = %e, "push relay: lost the database session; shards let go");
                    // Rows already pushed are deleted first thing in the next session: the
                    // sooner, the less likely another instance takes them for unpushed.
                    tokio::time::sleep(if self.written.is_empty() { TICK } else { TICK / 10 }).await;
                }
            }
        }
    }

    /// One database session: presence, shards and relaying, until it fails or ends; `rejoin`
    /// after a session lost to a failure. Dropping the session's connection releases every
    /// lock it took.
    async fn session(&mut self, rejoin: bool) -> StoreResult<End> {
        let (mut client, mut conn) = self.config.connect(NoTls).await.db()?;
        let wake = Arc::new(Notify::new());
        let woken = wake.clone();
        let driver = tokio::spawn(async move {
            while let Some(msg) = std::future::poll_fn(|cx| conn.poll_message(cx)).await {
                match msg {
                    Ok(AsyncMessage::Notification(n)) if super::commit_notices::wakes_relay(n.payload()) => {
                        woken.notify_one()
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(error = %e, "push relay: connection ended");
                        break;
                    }
                }
            }
            // Whatever waits learns at its next statement that the session is gone.
            woken.notify_one();
        });
        let _driver = AbortOnDrop(driver);
        client.batch_execute(&format!("LISTEN {}", super::commit_notices::CHANNEL)).await.db()?;
        if !self.written.is_empty() {
            client.execute("DELETE FROM push_log WHERE seq = ANY($1)", &[&self.written]).await.db()?;
            self.written.clear();
        }
        take_presence(&client).await?;
        if rejoin {
            // Instances that lost the database together (a restart) come back at about the
            // same time: a moment for the others to show their presence before shares are
            // counted, so that each takes back its own shards instead of the first taking
            // them all (and pushing again what another had in flight).
            tokio::select! {
                _ = tokio::time::sleep(TICK) => {}
                _ = self.out.closed() => return Ok(End::Stopped),
            }
        }
        let mut owned: BTreeMap<i32, i64> = BTreeMap::new();
        loop {
            if self.out.is_closed() {
                return Ok(End::Stopped);
            }
            if !*self.linked.borrow() {
                return Ok(End::Unlinked);
            }
            self.balance(&client, &mut owned).await?;
            self.publish_share(&owned);
            match self.drain(&mut client, &mut owned).await? {
                Drained::End(end) => return Ok(end),
                Drained::More => continue,
                Drained::Empty => {}
            }
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep(TICK) => {}
                _ = self.linked.changed() => {}
                _ = self.out.closed() => {}
            }
        }
    }

    /// Owns about `SHARDS / live instances`: lets the surplus go, tries free shards when short.
    async fn balance(&mut self, client: &Client, owned: &mut BTreeMap<i32, i64>) -> StoreResult<()> {
        let live: i64 = client.query_one(COUNT_LIVE, &[&(PRESENCE_CLASS as u32)]).await.db()?.get(0);
        let target = (SHARDS as usize).div_ceil(live.max(1) as usize);
        let mut released = Vec::new();
        while owned.len() > target {
            let Some((shard, _)) = owned.pop_last() else { break };
            client.execute("SELECT pg_advisory_unlock($1, $2)", &[&SHARD_CLASS, &shard]).await.db()?;
            released.push(shard);
        }
        if !released.is_empty() {
            tracing::info!(?released, live, "push relay: shards handed over to other instances");
        }
        let mut taken = Vec::new();
        // The shards this process held last first (after a lost session, they are most
        // likely still its own to finish); then from where the instances are unlikely to
        // collide.
        let mut candidates: Vec<i32> = Vec::with_capacity(SHARDS as usize);
        if owned.len() < target {
            const MINE: &str = "SELECT shard FROM push_shards WHERE owner = $1 ORDER BY shard";
            for row in client.query(MINE, &[&self.me]).await.db()? {
                candidates.push(row.try_get(0).db()?);
            }
        }
        let start = (std::process::id() % SHARDS as u32) as i32;
        candidates.extend((0..SHARDS).map(|i| (start + i) % SHARDS));
        for shard in candidates {
            if owned.len() >= target {
                break;
            }
            if owned.contains_key(&shard) {
                continue;
            }
            let got: bool =
                client.query_one("SELECT pg_try_advisory_lock($1, $2)", &[&SHARD_CLASS, &shard]).await.db()?.get(0);
            if got {
                let before: Option<String> =
                    client.query_one("SELECT owner FROM push_shards WHERE shard = $1", &[&shard]).await.db()?.get(0);
                if before.is_some_and(|b| b != self.me) {
                    self.quiet.insert(shard, tokio::time::Instant::now() + HANDOVER);
                }
                let epoch: i64 = client
                    .query_one(
                        "UPDATE push_shards SET epoch = epoch + 1, owner = $2 WHERE shard = $1 RETURNING epoch",
                        &[&shard, &self.me],
                    )
                    .await
                    .db()?
                    .get(0);
                owned.insert(shard, epoch);
                taken.push(shard);
            }
        }
        if !taken.is_empty() {
            tracing::info!(?taken, held = owned.len(), live, "push relay: shards taken");
        }
        Ok(())
    }

    /// Relays batches until the owned shards have nothing left, or for about a [`TICK`]
    /// (so that shares keep being balanced while changes keep coming). Each batch's rows
    /// are deleted once its pushes were written.
    async fn drain(&mut self, client: &mut Client, owned: &mut BTreeMap<i32, i64>) -> StoreResult<Drained> {
        let started = tokio::time::Instant::now();
        loop {
            if started.elapsed() >= TICK {
                return Ok(Drained::More);
            }
            let now = tokio::time::Instant::now();
            self.quiet.retain(|shard, until| *until > now && owned.contains_key(shard));
            let shards: Vec<i32> = owned.keys().filter(|s| !self.quiet.contains_key(s)).copied().collect();
            if shards.is_empty() {
                return Ok(Drained::Empty);
            }
            let rows = client.query(PENDING, &[&shards, &(BATCH as i64)]).await.db()?;
            if rows.is_empty() {
                return Ok(Drained::Empty);
            }
            let mut done: Vec<i64> = Vec::with_capacity(rows.len());
            let mut relayed = Vec::with_capacity(rows.len());
            for row in &rows {
                let seq: i64 = row.try_get(0).db()?;
                match change(row) {
                    Ok(c) => {
                        if self.also.is_some() {
                            relayed.push(c.clone());
                        }
                        if let Some(end) = self.hand(ToPush::Change(c)).await {
                            return Ok(Drained::End(end));
                        }
                    }
                    // Never retried: a damaged row would stop its shard for good.
                    Err(e) => tracing::error!(seq, error = %e, "push relay: a logged change cannot be read; skipped"),
                }
                done.push(seq);
            }
            if let Some(also) = self.also.as_mut() {
                (also.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner))(relayed);
            }
            let (signed, written) = tokio::sync::oneshot::channel();
            if let Some(end) = self.hand(ToPush::Receipt(Receipt::new(move || _ = signed.send(())))).await {
                return Ok(Drained::End(end));
            }
            tokio::select! {
                w = written => if w.is_err() {
                    // The link broke before the batch was written: the next session reads
                    // it again from the log.
                    tracing::info!("push relay: a batch was not written; relaying again from the log");
                    return Ok(Drained::End(End::Unlinked));
                },
                _ = self.linked.wait_for(|up| !*up) => return Ok(Drained::End(End::Unlinked)),
                _ = self.out.closed() => return Ok(Drained::End(End::Stopped)),
            }
            self.written.extend(done);
            self.settle(client, owned).await?;
            self.publish_share(owned);
        }
    }

    /// Hands one thing to the pusher; why the session ends if it cannot.
    async fn hand(&mut self, what: ToPush) -> Option<End> {
        tokio::select! {
            sent = self.out.send(what) => sent.is_err().then_some(End::Stopped),
            _ = self.linked.wait_for(|up| !*up) => Some(End::Unlinked),
        }
    }

    /// Deletes the rows whose pushes were written (whichever shard they belong to now:
    /// they need no pushing again), and forgets the shards another instance has taken.
    async fn settle(&mut self, client: &mut Client, owned: &mut BTreeMap<i32, i64>) -> StoreResult<()> {
        let shards: Vec<i32> = owned.keys().copied().collect();
        let tx = client.transaction().await.db()?;
        let epochs =
            tx.query("SELECT shard, epoch FROM push_shards WHERE shard = ANY($1) FOR SHARE", &[&shards]).await.db()?;
        let mut lost = Vec::new();
        for r in epochs {
            let (shard, epoch): (i32, i64) = (r.try_get(0).db()?, r.try_get(1).db()?);
            if owned.get(&shard) != Some(&epoch) {
                tracing::warn!(shard, epoch, "push relay: another instance took this shard; stopped pushing it");
                owned.remove(&shard);
                lost.push(shard);
            }
        }
        tx.execute("DELETE FROM push_log WHERE seq = ANY($1)", &[&self.written]).await.db()?;
        tx.commit().await.db()?;
        self.written.clear();
        for shard in lost {
            client.execute("SELECT pg_advisory_unlock($1, $2)", &[&SHARD_CLASS, &shard]).await.db()?;
        }
        Ok(())
    }
}

/// Takes this session's presence lock, under a key no other live session holds.
async fn take_presence(client: &Client) -> StoreResult<()> {
    let base = std::process::id() as i32;
    for i in 0..64i32 {
        let key = base.wrapping_add(i.wrapping_mul(7919));
        let got: bool =
            client.query_one("SELECT pg_try_advisory_lock($1, $2)", &[&PRESENCE_CLASS, &key]).await.db()?.get(0);
        if got {
            return Ok(());
        }
    }
    Err(StoreError::Busy("no free presence key".into()))
}

/// A logged change as the pusher takes it. An item in a push needs only its id and payload.
fn change(row: &Row) -> StoreResult<Change> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("push_log: {what}"));
    let payload =
        super::payload::from_columns(row.try_get(6).db()?, row.try_get(7).db()?, row.try_get(8).db()?, "push_log")?;
    let views: Vec<String> = row.try_get(9).db()?;
    let counts: Vec<i64> = row.try_get(10).db()?;
    let previous: Vec<Option<String>> = row.try_get(11).db()?;
    let last: Vec<String> = row.try_get(12).db()?;
    if counts.len() != views.len() || previous.len() != views.len() || last.len() != views.len() {
        return Err(corrupt("views and their headers differ in number"));
    }
    let cursor = |t: &str| Cursor::parse(t).ok_or_else(|| corrupt("a malformed cursor"));
    let mut out = Vec::with_capacity(views.len());
    for (((view, count), previous), last) in views.into_iter().zip(counts).zip(previous).zip(last) {
        out.push(ViewChange {
            view,
            count: count.max(0) as u64,
            previous: previous.as_deref().map(cursor).transpose()?,
            last: cursor(&last)?,
        });
    }
    Ok(Change {
        feed: row.try_get(2).db()?,
        item: Item::bare(row.try_get(3).db()?, row.try_get(5).db()?, payload),
        created: row.try_get(4).db()?,
        views: out,
    })
}

/// Aborts a task when dropped: the session's connection goes with the session.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
