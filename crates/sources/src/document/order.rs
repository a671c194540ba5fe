//! The order a fetch publishes its new entries in (SPEC §13): oldest first, so the created
//! view follows the source's chronology.

/// Indices of a document's entries (given their published-else-updated times, in document
/// order) in publishing order: by time, oldest first, entries of equal time in reverse
/// document order (feeds list newest first). When any entry has no time at all, times
/// cannot order the document, and it is reverse document order throughout.
pub fn publishing_order<T: Ord>(when: &[Option<T>]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..when.len()).rev().collect();
    if when.iter().all(Option::is_some) {
        // A stable sort of the reversed indices keeps reverse document order among equals.
        idx.sort_by_key(|&i| &when[i]);
    }
    idx
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn examples() {
        assert_eq!(publishing_order(&[Some(3), Some(2), Some(1)]), [2, 1, 0]);
        assert_eq!(publishing_order(&[Some(1), Some(3), Some(2)]), [0, 2, 1]);
        assert_eq!(publishing_order(&[Some(1), Some(1), Some(0)]), [2, 1, 0]);
        assert_eq!(publishing_order(&[Some(1), None, Some(5)]), [2, 1, 0]);
        assert!(publishing_order::<i64>(&[]).is_empty());
    }

    proptest! {
        #[test]
        fn a_permutation_with_times_never_going_back(when in proptest::collection::vec(proptest::option::weighted(0.9, 0i64..20), 0..40)) {
            let order = publishing_order(&when);
            let mut sorted = order.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..when.len()).collect::<Vec<_>>());
            if when.iter().all(Option::is_some) {
                for pair in order.windows(2) {
                    prop_assert!(when[pair[0]] < when[pair[1]] || (when[pair[0]] == when[pair[1]] && pair[0] > pair[1]));
                }
            } else {
                prop_assert_eq!(order, (0..when.len()).rev().collect::<Vec<_>>());
            }
        }
    }
}
