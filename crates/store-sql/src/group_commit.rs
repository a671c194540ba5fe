//! Group commit, as both SQL stores' writer threads run it.
//!
//! One thread owns the write connection. It blocks for a job, then takes whatever else is
//! already queued (up to [`MAX_BATCH`]), and runs them all in one transaction: one COMMIT
//! (one fsync) for the whole batch, which is what makes many concurrent durable writes
//! fast. Each closure runs inside its own savepoint, so one that fails (or panics) is rolled
//! back alone. After the commit the batch's changes go to the [`ChangeSink`] in one call, in
//! order, and only then is every caller answered: an answer always means "committed".
//!
//! How a database begins, keeps savepoints, commits and gives up is its store's
//! ([`BatchTransaction`]); the order of those steps, and who is told what, is here.

use crate::batch::WriteJob;
use feed::Change;
use feed::ports::{ChangeSink, CommitObserver, StoreError};
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;
use tokio::sync::mpsc::Receiver;

/// The most jobs one transaction takes. Bounds the latency a batch adds to its first caller
/// and the memory its changes hold; at this size the fsync is long amortised.
pub const MAX_BATCH: usize = 1024;

/// Blocks for a job, then takes whatever else is queued, up to [`MAX_BATCH`] in all. `None`
/// once every sender is gone and the queue is empty: queued work is always finished, which
/// is what a graceful shutdown relies on.
pub fn next_batch<J>(jobs: &mut Receiver<J>) -> Option<Vec<J>> {
    next_batch_after(Vec::new(), jobs)
}

/// [`next_batch`] after the jobs `first` (put off by the last batch: [`GroupCommit::run`]),
/// which come first and are not waited for.
pub fn next_batch_after<J>(first: Vec<J>, jobs: &mut Receiver<J>) -> Option<Vec<J>> {
    let mut batch = first;
    if batch.is_empty() {
        batch.push(jobs.blocking_recv()?);
    }
    while batch.len() < MAX_BATCH {
        match jobs.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
    Some(batch)
}

/// One batch's transaction, as its database runs it.
pub trait BatchTransaction {
    /// Begins the transaction.
    fn begin(&mut self) -> Result<(), StoreError>;
    /// Locks the rows of the feeds the batch's jobs said they lock first (`targets`, by
    /// feed name, with the items the jobs then read) before any job runs, where other
    /// processes write the same database: so every batch takes its feeds' locks in one order
    /// (the map's), and two processes' batches never wait on each other in a cycle (which the
    /// database would break by failing one). A store may read the items with them.
    ///
    /// It may leave out feeds another process holds now (`Busy`): their jobs are put off to
    /// the next batch, which must then wait for them (`wait`). A store that leaves feeds out
    /// waits for them before any other lock, in name order, and leaves out none when it
    /// would lock nothing else.
    fn lock_feeds(&mut self, _targets: &Targets<'_>, _wait: &Busy) -> Result<Busy, StoreError> {
        Ok(Busy::new())
    }
    /// Runs one job in its own savepoint: the changes it emitted when it succeeded, `None`
    /// when it failed (its savepoint rolled back, the others' work kept), an error when the
    /// whole transaction is lost.
    fn run(&mut self, job: &mut dyn WriteJob) -> Result<Option<Vec<Change>>, StoreError>;
    /// Commits; `changes` are what the batch's successful jobs emitted.
    fn commit(&mut self, changes: &[Change]) -> Result<(), StoreError>;
    /// Ends a transaction that failed (at any step), if it is still open.
    fn roll_back(&mut self);
}

/// The feeds a batch's jobs lock first, in name order, each with the items they read.
pub type Targets<'a> = BTreeMap<&'a str, Vec<&'a str>>;

/// Feeds another process held when a batch would have locked them.
pub type Busy = BTreeSet<String>;

/// What became of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tally {
    /// Jobs in the batch.
    pub jobs: usize,
    /// Jobs whose closure succeeded; committed only if the batch was.
    pub succeeded: usize,
    pub committed: bool,
}

/// Where a writer's commits are announced: the change sink and the commit observer. Both
/// run on the writer thread between COMMIT and the answers, so they must be quick and must
/// not wait on the store.
pub struct GroupCommit {
    sink: Option<ChangeSink>,
    observer: Option<CommitObserver>,
    /// The feeds whose jobs the last batch put off: the next waits for them.
    wait: Busy,
}

impl GroupCommit {
    pub fn new(sink: Option<ChangeSink>, observer: Option<CommitObserver>) -> GroupCommit {
        GroupCommit { sink, observer, wait: Busy::new() }
    }

    /// Runs `jobs` in one transaction of `db`, announces the commit, and answers every job
    /// but those whose feeds another process held (see [`BatchTransaction::lock_feeds`]):
    /// those are returned, in order, for the next batch to take first. `settled` learns what
    /// became of the batch before any caller is answered.
    pub fn run(
        &mut self,
        db: &mut impl BatchTransaction,
        mut jobs: Vec<Box<dyn WriteJob>>,
        settled: impl FnOnce(Tally),
    ) -> Vec<Box<dyn WriteJob>> {
        let started = Instant::now();
        let mut changes = Vec::new();
        let mut succeeded = 0;
        let mut targets = Targets::new();
        for (feed, item) in jobs.iter().filter_map(|j| j.target()) {
            targets.entry(feed).or_default().push(item);
        }
        let wait = std::mem::take(&mut self.wait);
        let mut put_off = Vec::new();
        let locked = db.begin().and_then(|()| db.lock_feeds(&targets, &wait));
        drop(targets);
        let outcome = locked.and_then(|busy| {
            if !busy.is_empty() {
                let (later, now) = jobs.drain(..).partition(|j| j.target().is_some_and(|(f, _)| busy.contains(f)));
                (put_off, jobs) = (later, now);
                self.wait = busy;
            }
            for job in jobs.iter_mut() {
                if let Some(emitted) = db.run(job.as_mut())? {
                    succeeded += 1;
                    changes.extend(emitted);
                }
            }
            db.commit(&changes)
        });
        if outcome.is_err() {
            db.roll_back();
        }
        let n = jobs.len();
        settled(Tally { jobs: n, succeeded, committed: outcome.is_ok() });
        match &outcome {
            Ok(()) => {
                if let Some(observe) = &self.observer {
                    observe(n, started.elapsed());
                }
                if !changes.is_empty()
                    && let Some(sink) = self.sink.as_mut()
                    && catch_unwind(AssertUnwindSafe(|| sink(changes))).is_err()
                {
                    tracing::error!("the change sink panicked; the writer carries on");
                }
            }
            Err(e) => tracing::error!(error = %e, jobs = n, "a write batch failed; all its callers get an error"),
        }
        for job in jobs {
            job.answer(outcome.clone());
        }
        put_off
    }
}
