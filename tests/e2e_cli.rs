//! The command line (SPEC §8), without any server: `smartfeeds check-config --config FILE`
//! exits 0 for a usable file and 2 with a clear reason on stderr otherwise, never panicking.

use testkit::smartfeeds::{assert_accepted, assert_refused, check_config, run_bin};

const GOOD: &str = r#"admins = ["admin@localhost"]
autocreate = true

[component]
jid = "feeds.localhost"
secret = "secret"
server = "127.0.0.1:5347"

[store]
path = "smartfeeds.db"

[limits]
default_page = 50
max_page = 500
max_payload_bytes = 65536

[[feeds]]
name = "comments"
title = "Comments"
publishers = ["bot@localhost"]
default_order = "-created"
access = "open"

[[feeds]]
name = "staff"
access = "whitelist"
allowed = ["bob@localhost", "*@example.net"]
"#;

#[test]
fn a_good_config_passes() {
    let (out, dir) = check_config(GOOD, &[]);
    assert_accepted(&out);
    assert!(!dir.path().join("smartfeeds.db").exists(), "checking the config does not create the database");

    // The shortest usable file: a domain and a secret.
    let (out, _dir) = check_config("[component]\njid = \"feeds.example.com\"\nsecret = \"s\"\n", &[]);
    assert_accepted(&out);

    // SMARTFEEDS_SECRET supplies the secret.
    let (out, _dir) =
        check_config("[component]\njid = \"feeds.example.com\"\n", &[("SMARTFEEDS_SECRET", "from-the-environment")]);
    assert_accepted(&out);
}

#[test]
fn a_missing_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_bin(dir.path(), &["check-config", "--config", "does-not-exist.toml"], &[]);
    assert_refused(&out, &["does-not-exist.toml"]);
    // Running the component with it fails the same way.
    let out = run_bin(dir.path(), &["--config", "does-not-exist.toml"], &[]);
    assert_refused(&out, &["does-not-exist.toml"]);
}

#[test]
fn a_toml_syntax_error_gives_its_line() {
    let text = GOOD.replace("autocreate = true", "autocreate = tru");
    let (out, _dir) = check_config(&text, &[]);
    assert_refused(&out, &["line 2"]);
    let text = GOOD.replace("[limits]", "[limits");
    let line = GOOD.lines().position(|l| l == "[limits]").unwrap() + 1;
    let (out, _dir) = check_config(&text, &[]);
    assert_refused(&out, &[&format!("line {line}")]);
}

#[test]
fn invalid_jids_are_named() {
    for (from, to, needle) in [
        ("jid = \"feeds.localhost\"", "jid = \"not a jid@@\"", "component.jid"),
        ("jid = \"feeds.localhost\"", "jid = \"someone@feeds.localhost\"", "component.jid"),
        ("admins = [\"admin@localhost\"]", "admins = [\"admin@@localhost\"]", "admin@@localhost"),
        ("publishers = [\"bot@localhost\"]", "publishers = [\"bot@local host/x\"]", "publishers"),
        ("\"bob@localhost\", \"*@example.net\"", "\"bob@localhost\", \"*@\"", "allowed"),
    ] {
        let text = GOOD.replace(from, to);
        assert_ne!(text, GOOD);
        let (out, _dir) = check_config(&text, &[]);
        assert_refused(&out, &[needle]);
    }
}

#[test]
fn unknown_keys_and_bad_values_are_named() {
    for (from, to, needles) in [
        ("autocreate = true", "autocreat = true", &["autocreat"][..]),
        ("publishers = [\"bot@localhost\"]", "publisher = [\"bot@localhost\"]", &["publisher"][..]),
        ("max_page = 500", "max_pages = 500", &["max_pages"][..]),
        ("default_order = \"-created\"", "default_order = \"sideways\"", &["default_order", "sideways"][..]),
        ("access = \"open\"", "access = \"members\"", &["members"][..]),
        ("default_page = 50", "default_page = 900", &["default_page"][..]),
        ("name = \"comments\"", "name = \"bad?name\"", &["bad?name"][..]),
        ("name = \"staff\"", "name = \"comments\"", &["comments"][..]),
    ] {
        let text = GOOD.replace(from, to);
        assert_ne!(text, GOOD);
        let (out, _dir) = check_config(&text, &[]);
        assert_refused(&out, needles);
    }
    // A config without its [component] table.
    let (out, _dir) = check_config("admins = []\n", &[]);
    assert_refused(&out, &["component"]);
    // An empty secret and no SMARTFEEDS_SECRET.
    let (out, _dir) = check_config(&GOOD.replace("secret = \"secret\"", "secret = \"\""), &[]);
    assert_refused(&out, &["secret"]);
}
