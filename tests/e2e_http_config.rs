//! `check-config` on `[http]` (SPEC §9), without any server: a usable table passes, a bad
//! address, a short token, a token given twice or a connection bound out of range exits 2
//! with the reason.

use std::process::Output;

use testkit::smartfeeds::{assert_accepted, assert_refused, check_config};

const TOP: &str = "[component]\njid = \"feeds.localhost\"\nsecret = \"secret\"\n\n";

/// `check-config` on a file of the component table and `tables`.
fn check(tables: &str) -> Output {
    check_config(&format!("{TOP}{tables}"), &[]).0
}

#[test]
fn check_config_validates_the_http_table() {
    let good = "[http]\nlisten = \"127.0.0.1:8080\"\nmax_connections = 20000\nheader_timeout = 5\n[[http.tokens]]\njid = \"bot@localhost\"\ntoken = \"0123456789abcdef\"\n";
    assert_accepted(&check(good));
    for (http, needle) in [
        ("[http]\nlisten = \"nowhere:80\"\n", "listen"),
        ("[http]\nlisten = \"127.0.0.1:99999\"\n", "listen"),
        ("[http]\nbase_url = \"ftp://x\"\n", "base_url"),
        ("[[http.tokens]]\njid = \"bot@localhost\"\ntoken = \"short\"\n", "shorter than 16"),
        ("[[http.tokens]]\njid = \"not a jid@@\"\ntoken = \"0123456789abcdef\"\n", "jid"),
        (
            "[[http.tokens]]\njid = \"a@x\"\ntoken = \"0123456789abcdef\"\n\
             [[http.tokens]]\njid = \"b@x\"\ntoken = \"0123456789abcdef\"\n",
            "twice",
        ),
        ("[http]\nmax_timeout = 0\n", "max_timeout"),
        ("[http]\nmax_connections = 0\n", "max_connections"),
        ("[http]\nheader_timeout = 0\n", "header_timeout"),
        ("[http]\nheader_timeout = 301\n", "header_timeout"),
        ("[http]\nsurprise = 1\n", "surprise"),
    ] {
        let err = assert_refused(&check(http), &[needle]);
        assert!(!err.contains("0123456789abcdef"), "tokens are never printed: {err}");
    }
}

#[test]
fn check_config_validates_the_hub_table() {
    let good = "[http]\n[hub]\ndefault_lease = 7200\nmin_lease = 60\nmax_lease = 86400\nretry_initial = 0.5\n\
                retry_max = 30\nmax_attempts = 5\nallow_private_callbacks = true\nmax_backlog = 100\n";
    assert_accepted(&check(good));
    assert_accepted(&check("[hub]\n")); // every key has a default
    for method in ["sha1", "sha256", "sha384", "sha512"] {
        assert_accepted(&check(&format!("[hub]\nsignature = \"{method}\"\n")));
    }
    for (hub, needle) in [
        ("[hub]\nmin_lease = 0\n", "min_lease"),
        ("[hub]\nmin_lease = 100\nmax_lease = 10\n", "min_lease"),
        ("[hub]\ndefault_lease = 10\n", "default_lease"),
        ("[hub]\nretry_initial = 0\n", "retry_initial"),
        ("[hub]\nretry_initial = 10\nretry_max = 1\n", "retry_initial"),
        ("[hub]\nretry_initial = nan\n", "retry_initial"),
        ("[hub]\nmax_attempts = 0\n", "max_attempts"),
        ("[hub]\nmax_backlog = 0\n", "max_backlog"),
        ("[hub]\nmax_per_host = 10\nmax_concurrent = 5\n", "max_per_host"),
        ("[hub]\ntimeout = 0\n", "timeout"),
        ("[hub]\nallow_private_callbacks = \"yes\"\n", "allow_private_callbacks"),
        ("[hub]\nmax_lease = -1\n", "max_lease"),
        ("[hub]\nsurprise = 1\n", "surprise"),
        ("[hub]\nsignature = \"md5\"\n", "signature"),
        ("[hub]\nsignature = \"SHA1\"\n", "sha1, sha256, sha384 or sha512"),
    ] {
        assert_refused(&check(hub), &[needle]);
    }
}
