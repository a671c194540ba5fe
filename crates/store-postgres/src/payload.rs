//! A payload as columns, and back: every table that keeps an item's payload (`items`,
//! `hub_outbox`, `push_log`) keeps it the same way.

use feed::Payload;
use feed::ports::{StoreError, StoreResult};

/// The payload's columns: `(deleted, when_ms, payload)`. A tombstone's `payload` column holds
/// its `ref`; the `<deleted-entry/>` element is rebuilt by the faces, not stored.
pub(crate) fn columns(payload: &Payload) -> (bool, Option<i64>, &[u8]) {
    match payload {
        Payload::Entry(xml) => (false, None, xml.as_bytes()),
        Payload::Tombstone { atom_ref, when } => (true, Some(*when), atom_ref.as_bytes()),
    }
}

/// The payload those columns hold; `what` names the table for the error of a damaged row.
pub(crate) fn from_columns(deleted: bool, when: Option<i64>, bytes: Vec<u8>, what: &str) -> StoreResult<Payload> {
    let text = String::from_utf8(bytes).map_err(|_| StoreError::Corrupt(format!("{what}: a payload is not UTF-8")))?;
    if !deleted {
        return Ok(Payload::Entry(text));
    }
    let when = when.ok_or_else(|| StoreError::Corrupt(format!("{what}: a tombstone without a time")))?;
    Ok(Payload::Tombstone { atom_ref: text, when })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_come_back_as_they_went_in() {
        for p in [
            Payload::Entry("<entry xmlns='http://www.w3.org/2005/Atom'>\u{0}é</entry>".into()),
            Payload::Tombstone { atom_ref: "urn:x".into(), when: 1_700_000_000_123 },
        ] {
            let (deleted, when, bytes) = columns(&p);
            assert_eq!(from_columns(deleted, when, bytes.to_vec(), "t").unwrap(), p);
        }
        assert!(matches!(from_columns(true, None, b"urn:x".to_vec(), "t"), Err(StoreError::Corrupt(_))));
        assert!(matches!(from_columns(false, None, vec![0xff], "t"), Err(StoreError::Corrupt(_))));
    }
}
