//! T+O+C cursors: `{T}_{O}_{C}`.
//!
//! `T` is the item's ordering time in Unix milliseconds, `O` its offset among the view's
//! items with that same `T` (from 0, in tie order), and `C` the CRC32 of the UTF-8 ids of
//! those items from offset 0 through `O`, joined with `_`, in decimal. The checksum lets the
//! service notice that the items at `T` changed since the cursor was handed out, and fall
//! back to `time:T` rather than resume at a wrong place.

use std::fmt;

/// A decoded T+O+C cursor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cursor {
    pub t: i64,
    pub o: u64,
    pub c: u32,
}

/// CRC32 (IEEE) of the ids joined with `_`, without building the joined string.
pub fn checksum<'a>(ids: impl IntoIterator<Item = &'a str>) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for (i, id) in ids.into_iter().enumerate() {
        if i > 0 {
            h.update(b"_");
        }
        h.update(id.as_bytes());
    }
    h.finalize()
}

impl Cursor {
    /// The cursor of the last of `tie_ids`: the ids of the view's items at time `t`, in tie
    /// order, from offset 0 through the item itself.
    pub fn of<'a>(t: i64, tie_ids: impl IntoIterator<Item = &'a str>) -> Cursor {
        let mut n = 0u64;
        let c = checksum(tie_ids.into_iter().inspect(|_| n += 1));
        Cursor { t, o: n.saturating_sub(1), c }
    }

    /// Whether this cursor still points at the item it was made for, given the view's ids at
    /// time `t` from offset 0 (at least `o + 1` of them when it does).
    pub fn verify<'a>(&self, tie_ids: impl IntoIterator<Item = &'a str>) -> bool {
        let ids: Vec<&str> = tie_ids.into_iter().take(self.o as usize + 1).collect();
        ids.len() as u64 == self.o + 1 && checksum(ids) == self.c
    }

    /// Parses `T_O_C`; `None` when it is not three decimal numbers in range.
    pub fn parse(s: &str) -> Option<Cursor> {
        let mut parts = s.split('_');
        let t = parts.next()?;
        let o = parts.next()?;
        let c = parts.next()?;
        if parts.next().is_some() || [t, o, c].iter().any(|p| p.starts_with('+')) {
            return None;
        }
        Some(Cursor { t: t.parse().ok()?, o: o.parse().ok()?, c: c.parse().ok()? })
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}_{}", self.t, self.o, self.c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn checksum_is_crc32_of_ids_joined_by_underscore() {
        assert_eq!(checksum(["a", "bc"]), crc32fast::hash(b"a_bc"));
        assert_eq!(checksum(["only"]), crc32fast::hash(b"only"));
        let c = Cursor::of(1_700_000_000_000, ["x", "y", "z"]);
        assert_eq!(c, Cursor { t: 1_700_000_000_000, o: 2, c: crc32fast::hash(b"x_y_z") });
        assert_eq!(c.to_string(), format!("1700000000000_2_{}", crc32fast::hash(b"x_y_z")));
    }

    #[test]
    fn ties_get_offsets_and_verify_against_the_same_ties() {
        let ties = ["a", "b", "c"];
        for o in 0..3 {
            let c = Cursor::of(5, ties[..=o].iter().copied());
            assert_eq!(c.o, o as u64);
            assert!(c.verify(ties));
        }
        // An item inserted before the cursor's item at the same T breaks the checksum.
        let c = Cursor::of(5, ["a", "b"]);
        assert!(!c.verify(["a", "new", "b"]));
        // Fewer items at T than the offset needs: no match.
        assert!(!c.verify(["a"]));
    }

    #[test]
    fn parse_rejects_garbage() {
        for bad in ["", "1_2", "1_2_3_4", "a_0_1", "1_-1_2", "1_0_4294967296", "1_0_+5", "+1_0_5"] {
            assert_eq!(Cursor::parse(bad), None, "{bad}");
        }
        assert_eq!(Cursor::parse("-5_0_7"), Some(Cursor { t: -5, o: 0, c: 7 }));
    }

    proptest! {
        #[test]
        fn display_parse_round_trip(t in any::<i64>(), o in any::<u64>(), c in any::<u32>()) {
            let cur = Cursor { t, o, c };
            prop_assert_eq!(Cursor::parse(&cur.to_string()), Some(cur));
        }
    }
}
