//! PostgreSQL's failures as the core's [`StoreError`] kinds, by what an operator or a caller
//! does about them.

use deadpool_postgres::PoolError;
use feed::ports::StoreError;
use tokio_postgres::error::SqlState;

/// Whether a failure is worth a retry *before* any caller's closure has run (getting a
/// connection, `BEGIN`): a lost or refused connection, a server restarting, too many
/// connections. Closures are `FnOnce` and may have side effects on the caller's state, so a
/// transaction that has run one is never replayed: its callers get [`StoreError::Busy`].
pub(crate) fn retryable(e: &StoreError) -> bool {
    matches!(e, StoreError::Busy(_))
}

/// The kind of a SQLSTATE: wait and try again (serialization failure, deadlock, a lock
/// timeout, the connection or the server going away), free space (disk full), restore
/// (data or index corrupted); everything else is a backend error.
pub(crate) fn kind_of(code: &SqlState, text: String) -> StoreError {
    let busy = [
        SqlState::T_R_SERIALIZATION_FAILURE,
        SqlState::T_R_DEADLOCK_DETECTED,
        SqlState::LOCK_NOT_AVAILABLE,
        SqlState::TOO_MANY_CONNECTIONS,
        SqlState::ADMIN_SHUTDOWN,
        SqlState::CRASH_SHUTDOWN,
        SqlState::CANNOT_CONNECT_NOW,
        SqlState::IDLE_SESSION_TIMEOUT,
    ];
    if busy.contains(code) || code.code().starts_with("08") {
        StoreError::Busy(text)
    } else if *code == SqlState::DISK_FULL {
        StoreError::Full(text)
    } else if *code == SqlState::DATA_CORRUPTED || *code == SqlState::INDEX_CORRUPTED {
        StoreError::Corrupt(text)
    } else {
        StoreError::Backend(text)
    }
}

/// A driver's failure as the core's kind.
pub(crate) fn store_error(e: tokio_postgres::Error) -> StoreError {
    {
        let text = match e.as_db_error() {
            Some(db) => format!("{} ({})", db.message(), db.code().code()),
            None => e.to_string(),
        };
        if let Some(code) = e.code() {
            return kind_of(code, text);
        }
        // No SQLSTATE: the client's side. A closed connection or an I/O failure is the
        // connection going away; anything else (a value that does not convert) is ours.
        let io = std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>());
        if e.is_closed() || io {
            StoreError::Busy(format!("the connection to PostgreSQL failed: {text}"))
        } else {
            StoreError::Backend(text)
        }
    }
}

/// Getting a pooled connection failed.
pub(crate) fn pool_error(e: PoolError) -> StoreError {
    {
        match e {
            PoolError::Backend(e) => store_error(e),
            PoolError::Timeout(t) => StoreError::Busy(format!("no PostgreSQL connection within the timeout ({t:?})")),
            PoolError::Closed => StoreError::Closed,
            other => StoreError::Backend(other.to_string()),
        }
    }
}

/// The drivers' results as the core's: `.db()?`. (The core's error cannot implement `From`
/// for a driver's error here: neither type belongs to this crate.)
pub(crate) trait Db<T> {
    fn db(self) -> Result<T, StoreError>;
}

impl<T> Db<T> for Result<T, tokio_postgres::Error> {
    fn db(self) -> Result<T, StoreError> {
        self.map_err(store_error)
    }
}

impl<T> Db<T> for Result<T, PoolError> {
    fn db(self) -> Result<T, StoreError> {
        self.map_err(pool_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_keep_their_kind() {
        let kind = |code: &str| kind_of(&SqlState::from_code(code), code.to_string());
        for busy in ["40001", "40P01", "55P03", "08006", "08001", "57P01", "53300"] {
            assert!(matches!(kind(busy), StoreError::Busy(_)), "{busy}");
        }
        assert!(matches!(kind("53100"), StoreError::Full(_)));
        assert!(matches!(kind("XX001"), StoreError::Corrupt(_)));
        assert!(matches!(kind("XX002"), StoreError::Corrupt(_)));
        for other in ["23505", "42P01", "22021", "XX000"] {
            assert!(matches!(kind(other), StoreError::Backend(_)), "{other}");
        }
    }
}
