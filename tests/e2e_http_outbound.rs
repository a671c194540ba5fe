//! End to end, the requests smartfeeds makes to URLs others give it (WebSub callbacks; SPEC
//! §10): the real binary, a DNS server the test drives as its `[outbound] nameservers`
//! (`crates/testkit/src/dns.rs`) and real callback servers on loopback. A name that answers
//! a public address when the subscription is checked and 127.0.0.1 when the hub connects
//! (DNS rebinding) never reaches the callback; every spelling of a private address and of
//! `localhost` is refused with a 400 naming why; redirects are not followed.

use std::time::{Duration, Instant};
use testkit::dns::Dns;
use testkit::standalone::Standalone;
use testkit::websub::{Callback, request, subscribe};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The `[outbound]` table naming `dns` as the only name server, and `[hub]` with `hub`.
fn tables(dns: &Dns, hub: &str) -> String {
    format!("[outbound]\nnameservers = [\"{}\"]\n[hub]\ntimeout = 2.0\n{hub}", dns.addr)
}

/// The callback's URL with its host replaced by `host`.
fn with_host(cb: &Callback, host: &str) -> String {
    cb.url.replace("127.0.0.1", host)
}

/// Waits until `f` holds (10 s at most).
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "not within 10 s: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_rebinds_to_loopback_after_the_check_is_never_connected_to() {
    let dns = Dns::start().await;
    // Public when the subscription is checked, loopback at every lookup after.
    dns.answer("rebind.example", &["93.184.216.34", "127.0.0.1"]);
    let cb = Callback::start().await;
    let sf = Standalone::start("", &["f"], &tables(&dns, ""));
    let topic = format!("{}/feeds/f/", sf.base);

    let status = subscribe(&format!("{}/hub", sf.base), &topic, &with_host(&cb, "rebind.example"), &[]).await;
    assert_eq!(status, 202, "the check saw a public address");
    // The hub looked the name up again to connect, and got 127.0.0.1 …
    until("a second lookup of rebind.example", || dns.answered("rebind.example").len() >= 2).await;
    assert_eq!(dns.answered("rebind.example")[..2], ["93.184.216.34", "127.0.0.1"]);
    // … and gave up without connecting to it.
    until("the hub giving the verification up", || sf.log().contains("WebSub intent not verified")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(cb.verifications().is_empty(), "the loopback callback was reached: {:?}", cb.verifications());
    assert!(sf.log().contains("resolves to a private"), "the refusal is logged:\n{}", sf.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_private_callbacks_allowed_the_test_resolver_leads_to_the_callback() {
    // The control of the test above: the same binary, the same resolver, private addresses
    // allowed: the name is looked up through the test's server and the callback is reached.
    let dns = Dns::start().await;
    dns.answer("cb.example", &["127.0.0.1"]);
    let cb = Callback::start().await;
    let sf = Standalone::start("", &["f"], &tables(&dns, "allow_private_callbacks = true\n"));
    let topic = format!("{}/feeds/f/", sf.base);
    let status = subscribe(&format!("{}/hub", sf.base), &topic, &with_host(&cb, "cb.example"), &[]).await;
    assert_eq!(status, 202);
    let v = cb.wait_verifications(1).await;
    assert_eq!(v[0].get("hub.mode").map(String::as_str), Some("subscribe"));
    assert!(!dns.answered("cb.example").is_empty(), "the name was asked of the test's resolver");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_a_private_address_or_of_localhost_is_refused() {
    let dns = Dns::start().await;
    dns.answer("intranet.example", &["10.0.0.7"]);
    dns.answer("metadata.example", &["169.254.169.254"]);
    let cb = Callback::start().await;
    let sf = Standalone::start("", &["f"], &tables(&dns, ""));
    let hub = format!("{}/hub", sf.base);
    let topic = format!("{}/feeds/f/", sf.base);
    let port = cb.url.trim_start_matches("http://127.0.0.1:").split('/').next().unwrap().to_string();
    let cases = [
        ("127.0.0.1", "private"),
        ("2130706433", "private"), // decimal
        ("0177.0.0.1", "private"), // octal
        ("0x7f.0.0.1", "private"), // hex
        ("0x7f000001", "private"), // one hex number
        ("127.1", "private"),      // short form
        ("0.0.0.0", "private"),    // unspecified: the local host on Linux
        ("0", "private"),          // the same, as one number
        ("[::]", "private"),
        ("[::1]", "private"),
        ("[::ffff:127.0.0.1]", "private"), // IPv4-mapped IPv6
        ("[::ffff:7f00:1]", "private"),
        ("[::127.0.0.1]", "private"),     // IPv4-compatible IPv6
        ("[64:ff9b::7f00:1]", "private"), // NAT64
        ("[2002:7f00:1::]", "private"),   // 6to4
        ("169.254.169.254", "private"),   // cloud metadata
        ("[fe80::1]", "private"),
        ("intranet.example", "private"), // a name of a private address
        ("metadata.example", "private"),
        ("localhost", "local host"),
        ("LOCALHOST.", "local host"),
        ("callback.localhost", "local host"),
        ("nowhere.example", "does not resolve"),
    ];
    for (host, why) in cases {
        let callback = format!("http://{host}:{port}/cb");
        let fields = [("hub.mode", "subscribe"), ("hub.topic", topic.as_str()), ("hub.callback", callback.as_str())];
        let (status, body) = request(&hub, &fields, None).await;
        assert_eq!(status, 400, "{callback}: {body}");
        assert!(body.contains("hub.callback") && body.contains(why), "{callback}: {body}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(cb.verifications().is_empty(), "{:?}", cb.verifications());
}

/// A server on loopback that answers every request with `307` to `location`; returns its
/// URL and the count of requests it got.
async fn redirector(location: String) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://127.0.0.1:{}/cb", listener.local_addr().unwrap().port());
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let location = location.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let answer =
                    format!("HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n");
                let _ = s.write_all(answer.as_bytes()).await;
            });
        }
    });
    (url, hits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_that_redirects_is_not_followed() {
    let dns = Dns::start().await;
    // The target agrees to anything: if the hub followed the redirect, it would subscribe.
    let target = Callback::start().await;
    let (redirecting, hits) = redirector(target.url.clone()).await;
    let sf = Standalone::start("", &["f"], &tables(&dns, "allow_private_callbacks = true\n"));
    let topic = format!("{}/feeds/f/", sf.base);
    assert_eq!(subscribe(&format!("{}/hub", sf.base), &topic, &redirecting, &[]).await, 202);
    until("the redirecting callback asked", || hits.load(std::sync::atomic::Ordering::SeqCst) >= 1).await;
    until("the hub giving the verification up", || sf.log().contains("WebSub intent not verified")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(target.verifications().is_empty(), "the redirect was followed: {:?}", target.verifications());
}

/// With an `/etc/resolv.conf` that names no name server (here an empty one, bind-mounted
/// over the machine's in a mount namespace of its own), the service starts, serves, and
/// says what it does instead: ask the local host's name server, as the C library does.
#[tokio::test]
async fn a_resolv_conf_without_name_servers_does_not_stop_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("resolv.conf");
    std::fs::write(&empty, "# no nameserver line\n").unwrap();
    let script = format!("mount --bind {} /etc/resolv.conf && exec \"$0\" \"$@\"", empty.display());
    // unshare (util-linux) and mount need root, as the test suite runs.
    let sf = Standalone::start_under(
        &["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", &script],
        "",
        &["plain"],
        "",
    );
    let res = reqwest::get(format!("{}/feeds/plain/", sf.base)).await.expect("an answer");
    assert_eq!(res.status(), 200, "{}", sf.log());
    let log = sf.log();
    assert!(log.contains("no usable DNS configuration"), "{log}");
    assert!(log.contains("127.0.0.1:53"), "{log}");
}
