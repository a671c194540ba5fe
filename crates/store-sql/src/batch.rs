//! A write closure waiting in a store's batch, the same in every store with a writer thread
//! and group commit (SQLite, PostgreSQL): the writer runs each closure at most once, inside
//! its own savepoint, and answers every caller once the whole batch's fate is known.

use feed::FeedError;
use feed::ports::{StoreError, WriteTx};
use std::panic::{AssertUnwindSafe, catch_unwind};
use tokio::sync::oneshot;

/// The error a caller gets when its closure panicked: the panic itself goes to the log.
pub fn internal() -> FeedError {
    FeedError::Store(StoreError::Backend("internal error".into()))
}

/// A write closure and its caller, with the types erased.
pub trait WriteJob: Send {
    /// Runs the closure (at most once); whether it succeeded.
    fn run(&mut self, tx: &mut dyn WriteTx) -> bool;
    /// The closure succeeded, but the store saw one of its statements fail (and has rolled
    /// its savepoint back): the caller gets `e`.
    fn fail(&mut self, e: FeedError);
    /// Answers the caller once the batch's fate is known.
    fn answer(self: Box<Self>, batch: Result<(), StoreError>);
    /// The feed whose row the closure locks first and the item it then reads, when its
    /// caller said so (`Store::write_to`): the batch may lock and read them before any
    /// closure runs.
    fn target(&self) -> Option<(&str, &str)> {
        None
    }
}

/// A typed write closure awaiting its turn, then its answer.
pub struct Pending<T, F> {
    f: Option<F>,
    result: Option<Result<T, FeedError>>,
    reply: oneshot::Sender<Result<T, FeedError>>,
    target: Option<(String, String)>,
}

impl<T, F> Pending<T, F> {
    pub fn new(f: F, reply: oneshot::Sender<Result<T, FeedError>>) -> Pending<T, F> {
        Pending { f: Some(f), result: None, reply, target: None }
    }

    /// The same, for a closure that locks `feed`'s row first and then reads its item `item`
    /// ([`WriteJob::target`]).
    pub fn locking(mut self, feed: String, item: String) -> Pending<T, F> {
        self.target = Some((feed, item));
        self
    }
}

impl<T, F> WriteJob for Pending<T, F>
where
    T: Send + 'static,
    F: FnOnce(&mut dyn WriteTx) -> Result<T, FeedError> + Send + 'static,
{
    fn run(&mut self, tx: &mut dyn WriteTx) -> bool {
        let Some(f) = self.f.take() else { return false };
        // AssertUnwindSafe: after a panic the closure's state is dropped unused and its
        // statements are undone by the savepoint; nothing it touched is observed again.
        let result = catch_unwind(AssertUnwindSafe(|| f(tx))).unwrap_or_else(|_| {
            tracing::error!("a store write closure panicked; its savepoint is rolled back");
            Err(internal())
        });
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn fail(&mut self, e: FeedError) {
        self.result = Some(Err(e));
    }

    fn answer(self: Box<Self>, batch: Result<(), StoreError>) {
        let out = match (self.result, batch) {
            // A closure's own error wins: it was rolled back whatever the batch did.
            (Some(Err(e)), _) => Err(e),
            (Some(Ok(v)), Ok(())) => Ok(v),
            (_, Err(e)) => Err(e.into()),
            (None, Ok(())) => Err(internal()),
        };
        // The caller may have stopped waiting; the write stands either way.
        let _ = self.reply.send(out);
    }

    fn target(&self) -> Option<(&str, &str)> {
        self.target.as_ref().map(|(feed, item)| (feed.as_str(), item.as_str()))
    }
}
