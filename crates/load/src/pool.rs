//! Runs numbered operations `0..total` with at most `in_flight` at once, until done or the
//! run's deadline, and tallies their outcomes.
//!
//! All operations are futures polled by the calling task (`buffer_unordered`), not spawned
//! tasks: each one only formats a request and waits for its reply, so one task keeps up,
//! and nothing outlives the call.

use std::future::{Future, ready};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};

use crate::report::Tally;

/// Runs `op(i)` for `i` in `0..total`, `in_flight` at a time; no new `i` starts after
/// `deadline`. `op` returns the latency of a success or the kind of a failure.
pub async fn run_indexed<F, Fut>(total: u64, in_flight: u32, deadline: Instant, op: F) -> Tally
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = Result<Duration, String>>,
{
    run_each(futures::stream::iter(0..total).take_while(|_| ready(Instant::now() < deadline)), in_flight, op).await
}

/// Runs `op(item)` for each of `items`, `in_flight` at a time, and tallies the outcomes.
pub async fn run_each<S, F, Fut>(items: S, in_flight: u32, op: F) -> Tally
where
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: Future<Output = Result<Duration, String>>,
{
    items
        .map(op)
        .buffer_unordered(in_flight as usize)
        .fold(Tally::default(), |mut tally, outcome| {
            match outcome {
                Ok(latency) => tally.ok(latency),
                Err(kind) => tally.error(kind),
            }
            ready(tally)
        })
        .await
}
