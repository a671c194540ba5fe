//! Item ids for source entries: the same entry gets the same id on every fetch, after a
//! restart and on every instance, and the id is safe anywhere an id goes (a URL path
//! segment, an `id:` position spec, an XMPP item id) whatever the source wrote as its key.

use sha2::{Digest, Sha256};

/// The item id of the source entry whose key (Atom `id`, RSS `guid`, JSON Feed `id`, else
/// its link) is `key`: the first 128 bits of its SHA-256, in lowercase hex. Keys are
/// trimmed first, as feed readers compare them.
pub fn item_id(key: &str) -> String {
    let digest = Sha256::digest(key.trim().as_bytes());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_key() {
        assert_eq!(item_id("urn:uuid:1"), item_id("  urn:uuid:1\n"));
        assert_eq!(item_id("abc").len(), 32);
        assert_ne!(item_id("a"), item_id("b"));
    }

    proptest! {
        #[test]
        fn ids_are_stable_url_safe_and_32_hex_digits(key in ".*") {
            let id = item_id(&key);
            prop_assert_eq!(&id, &item_id(&key));
            prop_assert_eq!(id.len(), 32);
            prop_assert!(id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        }
    }
}
