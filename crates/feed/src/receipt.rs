//! What the pusher takes, in order: committed changes, and now and then a [`Receipt`] to
//! sign once every push of the changes before it has been written out. A source that can
//! hand changes again (the shared push log on PostgreSQL) forgets a change only when its
//! receipt is signed; a receipt dropped unsigned (the link broke, the process is stopping)
//! means "not known to be written": the source hands the changes again, in order.

use crate::Change;

/// One thing on the pusher's queue.
#[derive(Debug)]
pub enum ToPush {
    /// A committed change: its pushes go out after those of every change before it.
    Change(Change),
    /// Signed once the pushes of every change queued before it were written to the server.
    Receipt(Receipt),
}

/// Told, at most once, that everything queued before it was written.
pub struct Receipt(Box<dyn FnOnce() + Send>);

impl Receipt {
    /// A receipt that calls `signed` when signed (never if dropped unsigned).
    pub fn new(signed: impl FnOnce() + Send + 'static) -> Receipt {
        Receipt(Box::new(signed))
    }

    /// Everything before it was written.
    pub fn sign(self) {
        (self.0)()
    }
}

impl std::fmt::Debug for Receipt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Receipt")
    }
}
