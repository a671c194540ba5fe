//! Which migrations a database still needs, the same rule in both stores: version N means
//! the first N entries of a store's list of migrations are applied. Each store reads and
//! writes its version its own way, and applies what is pending in one transaction, so a
//! crash mid-migration leaves the previous version intact.

use feed::ports::{StoreError, StoreResult};

/// The migrations to apply to a database at version `found`, out of `migrations` (all this
/// binary knows). A database whose version is above that is refused rather than misread.
pub fn pending<'m>(found: i64, migrations: &'m [&'m str]) -> StoreResult<&'m [&'m str]> {
    let known = migrations.len() as i64;
    if found > known {
        return Err(StoreError::TooNew { found, known });
    }
    let Ok(applied) = usize::try_from(found) else {
        return Err(StoreError::Backend(format!("database has a negative schema version ({found})")));
    };
    Ok(&migrations[applied..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_is_not_applied_yet_is_pending() {
        let all = ["a", "b", "c"];
        assert_eq!(pending(0, &all), Ok(&all[..]));
        assert_eq!(pending(2, &all), Ok(&all[2..]));
        assert_eq!(pending(3, &all), Ok(&all[3..]));
        assert_eq!(pending(4, &all), Err(StoreError::TooNew { found: 4, known: 3 }));
        assert!(matches!(pending(-1, &all), Err(StoreError::Backend(_))));
    }
}
