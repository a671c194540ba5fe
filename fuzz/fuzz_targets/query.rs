//! Arbitrary query strings through the HTTP face's query parser (every parameter a pull
//! allows), and arbitrary text through the position-spec parser it uses for `since` and
//! `until`. Nothing may panic, and a view that is accepted names a node the core either
//! reads or refuses with an error (never a panic).
#![no_main]

use feed::Position;
use http::query::FeedQuery;
use libfuzzer_sys::fuzz_target;

const ALL: &[&str] = &["order", "author", "category", "since", "until", "max", "timeout", "callback", "format"];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = Position::parse(text);
    if let Ok(q) = FeedQuery::parse(Some(text), ALL) {
        let _ = q.node("f");
        let _ = q.view_query();
    }
});
