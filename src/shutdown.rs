//! Shutdown in stages, each one signal and one completion channel (tokio's mini-redis
//! pattern): the stage's tasks watch the signal, each holds a clone of the completion
//! sender, and the stage is over when the last clone is dropped.
//!
//! Two stages, because their order is what loses nothing: first every request-taking task
//! (the XMPP dispatcher, the HTTP face, the WebSub hub) stops taking work and finishes what
//! it holds; only then the pushes, since a request still in flight may commit a change that
//! must still be fanned out. The link closes last, once both have written their stanzas.

use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// One stage: its signal and its completion channel.
pub struct Stage {
    signal: watch::Sender<bool>,
    done_tx: mpsc::Sender<()>,
    done_rx: mpsc::Receiver<()>,
}

impl Default for Stage {
    fn default() -> Self {
        Self::new()
    }
}

impl Stage {
    pub fn new() -> Stage {
        let (done_tx, done_rx) = mpsc::channel(1);
        Stage { signal: watch::channel(false).0, done_tx, done_rx }
    }

    /// What a task of this stage watches: true once the stage is ending.
    pub fn signal(&self) -> watch::Receiver<bool> {
        self.signal.subscribe()
    }

    /// A completion token: the stage waits until every token is dropped.
    pub fn token(&self) -> mpsc::Sender<()> {
        self.done_tx.clone()
    }

    /// Sets the signal and waits, at most `limit`, for every token to be dropped; false
    /// when some task was still running at the limit.
    pub async fn end(self, limit: Duration) -> bool {
        let Stage { signal, done_tx, mut done_rx } = self;
        signal.send_replace(true);
        drop(done_tx);
        tokio::time::timeout(limit, done_rx.recv()).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stage_ends_when_its_last_task_has_finished() {
        let stage = Stage::new();
        let (mut signal, token) = (stage.signal(), stage.token());
        let task = tokio::spawn(async move {
            let _token = token;
            let _ = signal.wait_for(|s| *s).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        });
        let started = std::time::Instant::now();
        assert!(stage.end(Duration::from_secs(5)).await, "the task finished within the limit");
        assert!(started.elapsed() >= Duration::from_millis(50), "end waited for the task");
        task.await.unwrap();
    }

    #[tokio::test]
    async fn a_task_that_does_not_finish_is_reported_at_the_limit() {
        let stage = Stage::new();
        let token = stage.token();
        assert!(!stage.end(Duration::from_millis(50)).await);
        drop(token);
    }
}
