//! Arbitrary bodies through the WebSub hub's request form reader (the body of
//! `POST BASE/hub`): every field, the topic's feed and view, the callback's form, the lease
//! and the secret. Nothing may panic; what is accepted must be what the hub promises to
//! check: an http(s) callback with a host and no credentials, a lease within the bounds, a
//! secret under 200 bytes.
#![no_main]

use http::hub::config::HubConfig;
use http::hub::request::read_form;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let config = HubConfig::default();
    if let Ok(asked) = read_form(data, "http://h:1", &config) {
        assert!(matches!(asked.callback.scheme(), "http" | "https"));
        assert!(asked.callback.host_str().is_some_and(|h| !h.is_empty()));
        assert!(asked.callback.username().is_empty() && asked.callback.password().is_none());
        assert!((config.min_lease..=config.max_lease).contains(&asked.lease));
        assert!(asked.secret.as_ref().is_none_or(|s| s.len() < 200));
        assert!(!asked.feed.is_empty());
        let _ = asked.query.node(&asked.feed);
    }
});
