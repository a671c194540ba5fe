//! The thread a SQL store's writes run on, and the queue to it: what both stores' handles
//! hold. Their drivers block, so writes never run on an async worker: they go over a
//! bounded channel to the writer thread and come back on a oneshot.
//!
//! Closing (or dropping the last handle) stops taking jobs; the thread finishes every job
//! already queued, then exits.

use crate::batch::{Pending, WriteJob};
use crate::group_commit::MAX_BATCH;
use feed::FeedError;
use feed::ports::{StoreError, StoreResult, WriteTx};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{JoinHandle, ThreadId};
use tokio::sync::{mpsc, oneshot};

/// Jobs waiting for the writer: a few full batches. When the writer falls behind, writers
/// wait for room instead of piling up memory.
const QUEUE: usize = 4 * MAX_BATCH;

/// A running writer thread and the sending side of its queue of `J`s.
pub struct WriterThread<J> {
    /// `None` once closed. A std mutex: held only to clone the sender, never across an
    /// await.
    jobs: Mutex<Option<mpsc::Sender<J>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    id: ThreadId,
}

impl<J: Send + 'static> WriterThread<J> {
    /// Starts a thread named `name` serving the queue with `serve`, which returns once the
    /// queue is closed and empty.
    pub fn spawn(name: &str, serve: impl FnOnce(mpsc::Receiver<J>) + Send + 'static) -> StoreResult<WriterThread<J>> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || serve(rx))
            .map_err(|e| StoreError::Backend(format!("cannot start the writer thread: {e}")))?;
        Ok(WriterThread { jobs: Mutex::new(Some(tx)), id: thread.thread().id(), thread: Mutex::new(Some(thread)) })
    }

    /// Queues a job, waiting for room.
    pub async fn submit(&self, job: J) -> Result<(), StoreError> {
        let sender = self.jobs.lock().unwrap_or_else(PoisonError::into_inner).clone().ok_or(StoreError::Closed)?;
        sender.send(job).await.map_err(|_| StoreError::Closed)
    }

    /// Queues a job now, in call order, failing rather than waiting when the queue is full
    /// (tests line jobs up behind a held writer this way).
    pub fn submit_now(&self, job: J) -> Result<(), StoreError> {
        let jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        let sender = jobs.as_ref().ok_or(StoreError::Closed)?;
        sender.try_send(job).map_err(|_| StoreError::Closed)
    }

    /// Queues the write closure `f` and waits for its answer. Queued when the future is first
    /// polled; once queued it runs even if the future is dropped: a write cannot be
    /// recalled, only its answer ignored.
    pub async fn write<T, F>(self: Arc<Self>, f: F) -> Result<T, FeedError>
    where
        J: From<Box<dyn WriteJob>>,
        T: Send + 'static,
        F: FnOnce(&mut dyn WriteTx) -> Result<T, FeedError> + Send + 'static,
    {
        self.write_job(|tx| Pending::new(f, tx)).await
    }

    /// [`write`](Self::write) for a closure that locks `feed`'s row first and then reads
    /// its item `item` (`Store::write_to`).
    pub async fn write_to<T, F>(self: Arc<Self>, feed: String, item: String, f: F) -> Result<T, FeedError>
    where
        J: From<Box<dyn WriteJob>>,
        T: Send + 'static,
        F: FnOnce(&mut dyn WriteTx) -> Result<T, FeedError> + Send + 'static,
    {
        self.write_job(|tx| Pending::new(f, tx).locking(feed, item)).await
    }

    async fn write_job<T, F>(
        self: Arc<Self>,
        pending: impl FnOnce(oneshot::Sender<Result<T, FeedError>>) -> Pending<T, F>,
    ) -> Result<T, FeedError>
    where
        J: From<Box<dyn WriteJob>>,
        T: Send + 'static,
        F: FnOnce(&mut dyn WriteTx) -> Result<T, FeedError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Box<dyn WriteJob> = Box::new(pending(tx));
        self.submit(J::from(job)).await?;
        // A queued write does not keep the store open: the last handle's drop may shut the
        // writer down, which still finishes this job first.
        drop(self);
        rx.await.unwrap_or(Err(StoreError::Closed.into()))
    }
}

impl<J> WriterThread<J> {
    pub fn is_closed(&self) -> bool {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner).is_none()
    }

    /// Drops the sender (the thread drains the queue, then exits) and hands back the
    /// thread's handle, once.
    fn shut_down(&self) -> Option<JoinHandle<()>> {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner).take();
        self.thread.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// Stops taking jobs, lets the thread finish (and commit) everything already queued, and
    /// waits for it. Later jobs fail with [`StoreError::Closed`].
    pub async fn close(&self) {
        if let Some(handle) = self.shut_down()
            && handle.thread().id() != std::thread::current().id()
            && tokio::task::spawn_blocking(move || handle.join()).await.is_err()
        {
            tracing::error!("could not wait for the store's writer thread");
        }
    }
}

impl<J> Drop for WriterThread<J> {
    fn drop(&mut self) {
        let Some(handle) = self.shut_down() else { return };
        // Waiting inside a runtime would block one of its workers for up to a batch; there
        // the thread is left to finish the queue alone. A closure that held the last handle
        // would be dropped on the writer thread itself, which must not wait for itself.
        if tokio::runtime::Handle::try_current().is_err() && std::thread::current().id() != self.id {
            let _ = handle.join();
        }
    }
}
