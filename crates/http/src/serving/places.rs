//! How many requests may be held at once (`[http] max_held`): long-polls while they wait
//! and event streams. Each holds a connection place for as long as it is held, so without
//! a bound of their own readers could take every place `max_connections` allows, and a
//! publisher's or a puller's connection would wait in the backlog behind them for good.
//! Past the bound a request that would be held is refused (503 with `Retry-After`), and
//! the places left over stay for requests that are answered at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The places for held requests.
#[derive(Debug)]
pub struct HeldPlaces {
    max: usize,
    taken: AtomicUsize,
}

/// A place taken: given back when dropped (the request answered, or its client gone).
#[derive(Debug)]
pub struct Place(Arc<HeldPlaces>);

impl HeldPlaces {
    pub fn new(max: usize) -> Arc<HeldPlaces> {
        Arc::new(HeldPlaces { max, taken: AtomicUsize::new(0) })
    }

    /// A place, if one is free.
    pub fn take(self: &Arc<Self>) -> Option<Place> {
        self.taken.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.max).then_some(n + 1)).ok()?;
        Some(Place(self.clone()))
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.0.taken.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The default bound for `max_connections` places: all but a tenth of them (at least one)
/// kept for requests answered at once.
pub fn default_max_held(max_connections: usize) -> usize {
    max_connections.saturating_sub((max_connections / 10).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_taken_up_to_the_bound_and_given_back() {
        let places = HeldPlaces::new(2);
        let a = places.take().expect("a first place");
        let _b = places.take().expect("a second place");
        assert!(places.take().is_none(), "no third");
        drop(a);
        assert!(places.take().is_some(), "a place given back is taken again");
    }

    #[test]
    fn a_tenth_of_the_connections_is_kept_for_answers_at_once() {
        assert_eq!(default_max_held(10_000), 9_000);
        assert_eq!(default_max_held(8), 7);
        assert_eq!(default_max_held(1), 0);
    }
}
