//! End to end, the HTTP face under attack (SPEC §9; README "Bounds"): the real binary, spoken to
//! over raw TCP as an attacker would, byte for byte. Heads past their bounds, odd framing
//! and smuggling, bodies announced too large, bad escapes, path tricks on item ids, XML
//! bombs, slow-loris clients and more connections than the cap: each gets the answer (or
//! the closed connection) a user would check for, at once or within the header timeout,
//! while the service goes on serving others, held long-polls and event streams included.

use std::time::{Duration, Instant};
use testkit::Shared;
use testkit::http::{BOT, HttpFixture, http_table, put_entry};
use testkit::pubsub::small_entry;
use testkit::smartfeeds::{bot_feeds, metric, scrape_metrics};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `[http] header_timeout` of both fixtures, seconds.
const HEADER_TIMEOUT: u64 = 2;
/// `[http] max_connections` of the capped fixture.
const CAP: usize = 8;

/// The shared fixture and its metrics port.
struct Hostile {
    fx: HttpFixture,
    metrics: u16,
}

static HOSTILE: Shared<Hostile> = Shared::new();
static CAPPED: Shared<HttpFixture> = Shared::new();
static HELD_CAPPED: Shared<HttpFixture> = Shared::new();

fn hostile() -> &'static Hostile {
    HOSTILE.get_or_start(|| {
        let (fx, metrics) = HttpFixture::start_with_metrics(|port, metrics| {
            let http = http_table(port, &format!("header_timeout = {HEADER_TIMEOUT}\n"), &["bot"]);
            format!("{http}\n[metrics]\nlisten = \"127.0.0.1:{metrics}\"\n\n{}", bot_feeds(&["hostile", "held"]))
        });
        Hostile { fx, metrics }
    })
}

/// A smartfeeds that takes at most [`CAP`] connections.
fn capped() -> &'static HttpFixture {
    CAPPED.get_or_start(|| {
        HttpFixture::start(|port| {
            let settings = format!("header_timeout = {HEADER_TIMEOUT}\nmax_connections = {CAP}\n");
            format!("{}{}", http_table(port, &settings, &["bot"]), bot_feeds(&["capped"]))
        })
    })
}

/// A smartfeeds that takes at most [`CAP`] connections, of which the default share (all but
/// one) may be held.
fn held_capped() -> &'static HttpFixture {
    HELD_CAPPED.get_or_start(|| {
        HttpFixture::start(|port| {
            let settings = format!("header_timeout = {HEADER_TIMEOUT}\nmax_connections = {CAP}\n");
            format!("{}{}", http_table(port, &settings, &["bot"]), bot_feeds(&["heldcap"]))
        })
    })
}

fn addr(fx: &HttpFixture) -> String {
    fx.base.trim_start_matches("http://").to_string()
}

/// One answer as read off the wire.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: String,
}

/// Reads one answer (an interim `100 Continue` counts as one); `None` when the server
/// closes the connection first. Bodies are framed by `Content-Length`, as all of the face's
/// answers to these requests are.
async fn read_answer(s: &mut TcpStream) -> Option<Answer> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("a status line: {head}"));
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse::<usize>().expect("a length"));
    while buf.len() < head_end + length {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = String::from_utf8_lossy(&buf[head_end..]).to_string();
    Some(Answer { status, head, body })
}

/// Whether the server closes `s` within `within` (reading nothing more from it).
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut byte = [0u8; 1];
    matches!(tokio::time::timeout(within, s.read(&mut byte)).await, Ok(Ok(0) | Err(_)))
}

/// Sends `request` on a fresh connection to `fx`; the first answer and how long it took.
async fn exchange(fx: &HttpFixture, request: &[u8]) -> (Option<Answer>, Duration, TcpStream) {
    let mut s = TcpStream::connect(addr(fx)).await.expect("connect");
    let started = Instant::now();
    let _ = s.write_all(request).await;
    let answer = tokio::time::timeout(Duration::from_secs(15), read_answer(&mut s)).await.expect("an answer in time");
    (answer, started.elapsed(), s)
}

/// Sends `request` and expects `status`, at once (within a second), with `needle` in the
/// JSON error's text when given; returns the answer.
async fn refused(fx: &HttpFixture, request: &[u8], status: u16, needle: Option<&str>) -> Answer {
    let what = String::from_utf8_lossy(&request[..request.len().min(120)]).to_string();
    let (answer, took, _) = exchange(fx, request).await;
    let answer = answer.unwrap_or_else(|| panic!("no answer to {what:?}"));
    assert_eq!(answer.status, status, "{what:?}: {answer:?}");
    assert!(took < Duration::from_secs(1), "{what:?} answered after {took:?}");
    if let Some(needle) = needle {
        assert!(answer.head.contains("content-type: application/json"), "{what:?}: {answer:?}");
        assert!(answer.body.contains(needle), "{what:?}: {needle:?} not in {}", answer.body);
    }
    answer
}

/// A GET of `path` with the usual headers, closing after the answer.
fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").into_bytes()
}

/// A publish of `body` to `path` with the bot's token.
fn put(path: &str, body: &[u8]) -> Vec<u8> {
    let mut req = format!(
        "PUT {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {BOT}\r\nContent-Type: application/atom+xml\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    req
}

/// The service still answers an ordinary request.
async fn still_serves(fx: &HttpFixture, feed: &str) {
    let (answer, _, _) = exchange(fx, &get(&format!("/feeds/{feed}/"))).await;
    assert_eq!(answer.map(|a| a.status), Some(200), "an ordinary GET after the attack");
}

#[tokio::test]
async fn heads_past_their_bounds_are_refused_at_once() {
    let fx = &hostile().fx;
    let big_header = format!("GET /feeds/hostile/ HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(64 * 1024));
    let many: String = (0..65).map(|i| format!("X-H{i}: v\r\n")).collect();
    let many_headers = format!("GET /feeds/hostile/ HTTP/1.1\r\nHost: x\r\n{many}\r\n");
    let long_target = format!("GET /feeds/hostile/?author={} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(20_000));
    for (request, status) in [(big_header, 431), (many_headers, 431), (long_target, 414)] {
        let (answer, took, mut s) = exchange(fx, request.as_bytes()).await;
        assert_eq!(answer.map(|a| a.status), Some(status), "{}", &request[..60]);
        assert!(took < Duration::from_secs(1), "{took:?}");
        assert!(closed_within(&mut s, Duration::from_secs(1)).await, "closed after the refusal");
    }
    // A control character in the request line.
    refused(fx, b"GET /feeds/hostile/items/a\x01b HTTP/1.1\r\nHost: x\r\n\r\n", 400, None).await;
    still_serves(fx, "hostile").await;
}

#[tokio::test]
async fn odd_framing_is_refused_and_nothing_is_smuggled() {
    let fx = &hostile().fx;
    let post = "POST /hub HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n";
    for framing in [
        "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        "Content-Length: -5\r\n\r\nhello",
        "Content-Length: 5, 6\r\n\r\nhello",
        "Content-Length : 5\r\n\r\nhello",
        "Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
        "Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
        "X-Folded: a\r\n b\r\nContent-Length: 5\r\n\r\nhello",
    ] {
        let request = format!("{post}{framing}");
        let (answer, _, mut s) = exchange(fx, request.as_bytes()).await;
        assert_eq!(answer.map(|a| a.status), Some(400), "{framing:?}");
        assert!(closed_within(&mut s, Duration::from_secs(1)).await, "{framing:?}: closed after the refusal");
    }
    // Both framings: read as chunked (an empty body), then the connection is closed, so
    // the request hidden after the chunked body is never answered.
    let smuggled = format!(
        "{post}Content-Length: 60\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n\
         GET /feeds/hostile/items/smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
    );
    let (answer, _, mut s) = exchange(fx, smuggled.as_bytes()).await;
    let answer = answer.expect("an answer to the outer request");
    assert!(answer.head.contains("connection: close"), "{answer:?}");
    assert!(tokio::time::timeout(Duration::from_secs(3), read_answer(&mut s)).await.expect("closed").is_none());
    still_serves(fx, "hostile").await;
}

#[tokio::test]
async fn bodies_announced_too_large_are_refused_before_they_are_read() {
    let fx = &hostile().fx;
    let announced = |expect: &str| {
        format!(
            "PUT /feeds/hostile/items/big HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {BOT}\r\n\
             Content-Type: application/atom+xml\r\nContent-Length: 100000000\r\n{expect}\r\n"
        )
    };
    // Waiting for `100 Continue`: the first answer is the refusal, not the invitation.
    let answer = refused(fx, announced("Expect: 100-continue\r\n").as_bytes(), 413, Some("payload-too-big")).await;
    assert!(answer.body.contains("larger than"), "{answer:?}");
    // Not waiting: refused at once, not after the body timeout.
    refused(fx, announced("").as_bytes(), 413, Some("payload-too-big")).await;
    // The hub's form, likewise.
    let hub = "POST /hub HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n\
               Content-Length: 100000000\r\n\r\n";
    refused(fx, hub.as_bytes(), 413, Some("payload-too-big")).await;
    // A chunked body announces nothing: cut at the limit as it is read.
    let chunk = "x".repeat(50_000);
    let chunked = format!(
        "PUT /feeds/hostile/items/big HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {BOT}\r\n\
         Content-Type: application/atom+xml\r\nTransfer-Encoding: chunked\r\n\r\n\
         {len:x}\r\n{chunk}\r\n{len:x}\r\n{chunk}\r\n0\r\n\r\n",
        len = chunk.len()
    );
    refused(fx, chunked.as_bytes(), 413, Some("payload-too-big")).await;
    let ok = put_entry(&reqwest::Client::new(), &fx.base, "hostile", "fits", BOT, &small_entry("fits")).await;
    assert_eq!(ok.expect("PUT").status(), 200, "an entry within the limit is published");
}

#[tokio::test]
async fn bad_escapes_and_parameters_are_400s_naming_them() {
    let fx = &hostile().fx;
    for (query, needle) in [
        ("since=id:%zz", "since"),
        ("author=%zz", "author"),
        ("category=%C3", "category"),
        ("order=created%", "order"),
        ("%zz=1", "percent-escape"),
        ("callback=alert(1)", "callback"),
        ("callback=%3Cscript%3E", "callback"),
        ("callback=a%3Bb", "callback"),
        ("max=1&max=1", "more than once"),
    ] {
        refused(fx, &get(&format!("/feeds/hostile/?{query}")), 400, Some(needle)).await;
    }
    let seventeen = vec!["x=1"; 17].join("&");
    refused(fx, &get(&format!("/feeds/hostile/?{seventeen}")), 400, Some("parameters")).await;
    let long = format!("author={}", "a".repeat(9_000));
    refused(fx, &get(&format!("/feeds/hostile/?{long}")), 414, Some("longer")).await;
    // A good callback is served as JSON-P.
    let (answer, _, _) = exchange(fx, &get("/feeds/hostile/?callback=cb.x_1")).await;
    let answer = answer.expect("an answer");
    assert_eq!(answer.status, 200);
    assert!(answer.body.starts_with("/**/cb.x_1("), "{}", answer.body);
}

#[tokio::test]
async fn item_ids_in_paths_cannot_traverse_or_hold_control_characters() {
    let fx = &hostile().fx;
    let entry = small_entry("trick");
    for id in
        ["..", ".", "%2E%2E", "..%2F..%2Fetc%2Fpasswd", "a%2F..%2Fb", "a%00b", "a%0D%0AX-Injected:%201", "%zz", "a%FFb"]
    {
        let path = format!("/feeds/hostile/items/{id}");
        refused(fx, &get(&path), 400, Some("bad path segment")).await;
        refused(fx, &put(&path, entry.as_bytes()), 400, Some("bad path segment")).await;
        let delete = format!("DELETE {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {BOT}\r\n\r\n");
        refused(fx, delete.as_bytes(), 400, Some("bad path segment")).await;
    }
    refused(fx, &get("/feeds/%FF/"), 400, Some("bad path segment")).await;
    // None of them was published.
    let (answer, _, _) = exchange(fx, &get("/feeds/hostile/?max=100")).await;
    let body = answer.expect("an answer").body;
    assert!(!body.contains("trick"), "{body}");
}

#[tokio::test]
async fn xml_bombs_external_entities_and_deep_nesting_are_refused_at_once() {
    let fx = &hostile().fx;
    const ATOM: &str = "http://www.w3.org/2005/Atom";
    // "Billion laughs": ten levels of ten, 10^9 copies once expanded.
    let mut laughs = String::from("<?xml version=\"1.0\"?><!DOCTYPE lolz [<!ENTITY lol0 \"lol\">");
    for i in 1..10 {
        laughs.push_str(&format!("<!ENTITY lol{i} \"{}\">", format!("&lol{};", i - 1).repeat(10)));
    }
    laughs.push_str(&format!("]><entry xmlns=\"{ATOM}\"><title>&lol9;</title></entry>"));
    let external = format!(
        "<?xml version=\"1.0\"?><!DOCTYPE e [<!ENTITY x SYSTEM \"file:///etc/passwd\">]>\
         <entry xmlns=\"{ATOM}\"><title>&x;</title></entry>"
    );
    let parameter =
        format!("<!DOCTYPE e [<!ENTITY % p SYSTEM \"http://127.0.0.1:1/evil.dtd\"> %p;]><entry xmlns=\"{ATOM}\"/>");
    for bomb in [&laughs, &external, &parameter] {
        let answer = refused(fx, &put("/feeds/hostile/items/bomb", bomb.as_bytes()), 400, Some("DTD")).await;
        assert!(!answer.body.contains("root:"), "{answer:?}");
    }
    let undeclared = format!("<entry xmlns=\"{ATOM}\"><title>&x;</title></entry>");
    refused(fx, &put("/feeds/hostile/items/bomb", undeclared.as_bytes()), 400, Some("entity")).await;
    // 9,000 levels deep, within the size limit.
    let deep =
        format!("<entry xmlns=\"{ATOM}\"><title>t</title>{}{}</entry>", "<a>".repeat(9_000), "</a>".repeat(9_000));
    refused(fx, &put("/feeds/hostile/items/bomb", deep.as_bytes()), 400, Some("levels deep")).await;
    // Nesting within the bound is fine.
    let nested = format!(
        "<entry xmlns=\"{ATOM}\"><id>urn:nested</id><title>t</title><content type=\"xhtml\">\
         <div xmlns=\"http://www.w3.org/1999/xhtml\">{}{}</div></content></entry>",
        "<span>".repeat(100),
        "</span>".repeat(100)
    );
    let (answer, _, _) = exchange(fx, &put("/feeds/hostile/items/nested", nested.as_bytes())).await;
    assert_eq!(answer.map(|a| a.status), Some(200));
}

#[tokio::test]
async fn slow_clients_are_cut_off_by_the_header_timeout() {
    let fx = &hostile().fx;
    let timeout = Duration::from_secs(HEADER_TIMEOUT);
    let cut = |took: Duration| took >= timeout - Duration::from_millis(300) && took < timeout + Duration::from_secs(2);
    // A request line, then silence.
    let mut s = TcpStream::connect(addr(fx)).await.unwrap();
    s.write_all(b"GET /feeds/hostile/ HTTP/1.1\r\n").await.unwrap();
    let started = Instant::now();
    assert!(closed_within(&mut s, Duration::from_secs(30)).await, "closed");
    assert!(cut(started.elapsed()), "a silent head is cut after the header timeout: {:?}", started.elapsed());
    // A header line every 300 ms: the timeout counts from the start, not from the last byte.
    let mut s = TcpStream::connect(addr(fx)).await.unwrap();
    let started = Instant::now();
    s.write_all(b"GET /feeds/hostile/ HTTP/1.1\r\n").await.unwrap();
    let mut line = 0;
    while s.write_all(format!("X-Slow-{line}: x\r\n").as_bytes()).await.is_ok() && started.elapsed() < 4 * timeout {
        line += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(cut(started.elapsed()), "a trickled head is cut after the header timeout: {:?}", started.elapsed());
    // A kept-alive connection left idle after an answer.
    let mut s = TcpStream::connect(addr(fx)).await.unwrap();
    s.write_all(b"GET /feeds/hostile/ HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    assert_eq!(read_answer(&mut s).await.map(|a| a.status), Some(200));
    let started = Instant::now();
    assert!(closed_within(&mut s, Duration::from_secs(30)).await, "closed");
    assert!(cut(started.elapsed()), "an idle connection is closed after the header timeout: {:?}", started.elapsed());
}

/// The header timeout's timer outlives a request held longer than it: the connection serves
/// its next request, and is closed once idle for the timeout after that answer.
#[tokio::test]
async fn a_connection_held_past_the_header_timeout_serves_on_and_idles_out() {
    let fx = &hostile().fx;
    let timeout = Duration::from_secs(HEADER_TIMEOUT);
    let kept = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes();
    let mut s = TcpStream::connect(addr(fx)).await.unwrap();
    let newest = "/feeds/hostile/?order=-created&max=1&timeout=0";
    s.write_all(&kept(newest)).await.unwrap();
    let first = read_answer(&mut s).await.expect("an answer");
    assert_eq!(first.status, 200, "{}", first.body);
    let cursor = first.body.split("\"last_cursor\":\"").nth(1).map(|r| r.split('"').next().unwrap_or("").to_string());
    let since = cursor.map(|c| format!("&since=cursor:{c}")).unwrap_or_default();
    // Held for twice the header timeout: nothing is published meanwhile.
    let held = Instant::now();
    let poll = format!("/feeds/hostile/?order=created{since}&timeout={}", 2 * HEADER_TIMEOUT);
    s.write_all(&kept(&poll)).await.unwrap();
    let answer = tokio::time::timeout(4 * timeout, read_answer(&mut s)).await.expect("answered in time");
    assert_eq!(answer.map(|a| a.status), Some(200), "the long-poll ends with an empty page at its deadline");
    assert!(held.elapsed() >= 2 * timeout - Duration::from_millis(300), "held: {:?}", held.elapsed());
    // The same connection serves on, then idles out after the header timeout.
    s.write_all(&kept("/feeds/hostile/")).await.unwrap();
    assert_eq!(read_answer(&mut s).await.map(|a| a.status), Some(200), "the next request on the connection");
    let idle = Instant::now();
    assert!(closed_within(&mut s, Duration::from_secs(30)).await, "closed");
    let took = idle.elapsed();
    assert!(took >= timeout - Duration::from_millis(300) && took < timeout + Duration::from_secs(2), "{took:?}");
}

/// Slow-loris connections held by an attacker, each opened again as soon as the server
/// cuts it off, until `stop` is set.
fn slow_loris(addr: String, n: usize, stop: tokio::sync::watch::Receiver<bool>) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let (addr, mut stop) = (addr.clone(), stop.clone());
            tokio::spawn(async move {
                while !*stop.borrow() {
                    let Ok(mut s) = TcpStream::connect(&addr).await else {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    };
                    let _ = s.write_all(b"GET /feeds/hostile/ HTTP/1.1\r\nHost: x\r\n").await;
                    tokio::select! {
                        _ = closed_within(&mut s, Duration::from_secs(60)) => {}
                        _ = stop.changed() => {}
                    }
                }
            })
        })
        .collect()
}

#[tokio::test]
async fn many_slow_clients_stop_neither_others_nor_held_requests() {
    let h = hostile();
    let fx = &h.fx;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
    // Held before the attack: a long-poll and an event stream on the feed "held".
    let poll = tokio::spawn(client.get(fx.url("/feeds/held/?order=created&timeout=40")).send());
    let mut stream = client
        .get(fx.url("/feeds/held/?order=created"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("an event stream");
    assert_eq!(stream.status(), 200);
    // 400 slow-loris connections, kept up for longer than the header timeout.
    const SLOW: usize = 400;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let attackers = slow_loris(addr(fx), SLOW, stopped);
    let mut open = 0.0;
    for _ in 0..100 {
        open = metric(&scrape_metrics(h.metrics), "smartfeeds_http_connections").unwrap_or(0.0);
        if open >= SLOW as f64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(open >= SLOW as f64, "the slow connections are open: {open}");
    // Meanwhile an ordinary client, one new connection per request, for twice the timeout.
    let mut took = Vec::new();
    let until = Instant::now() + 2 * Duration::from_secs(HEADER_TIMEOUT);
    while Instant::now() < until {
        let started = Instant::now();
        let (answer, _, _) = exchange(fx, &get("/feeds/hostile/")).await;
        assert_eq!(answer.map(|a| a.status), Some(200), "an ordinary GET during the attack");
        took.push(started.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    took.sort();
    let worst = *took.last().unwrap();
    assert!(worst < Duration::from_secs(1), "{} GETs during the attack, the slowest {worst:?}", took.len());
    // A publish during the attack reaches the held long-poll and the stream.
    let res = put_entry(&client, &fx.base, "held", "h1", BOT, &small_entry("h1")).await.expect("PUT");
    assert_eq!(res.status(), 200);
    let polled = tokio::time::timeout(Duration::from_secs(10), poll).await.expect("the long-poll answers").unwrap();
    let polled = polled.expect("the long-poll").text().await.unwrap();
    assert!(polled.contains("\"h1\""), "{polled}");
    let mut events = String::new();
    while !events.contains("h1") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), stream.chunk()).await.expect("an event in time");
        events.push_str(&String::from_utf8_lossy(&chunk.expect("the stream").expect("not ended")));
    }
    let _ = stop.send(true);
    for a in attackers {
        a.await.unwrap();
    }
}

#[tokio::test]
async fn past_max_connections_new_ones_wait_for_a_place() {
    let fx = capped();
    // Every place taken by a silent connection.
    let mut silent = Vec::new();
    for _ in 0..CAP {
        let mut s = TcpStream::connect(addr(fx)).await.unwrap();
        s.write_all(b"GET /feeds/capped/ HTTP/1.1\r\n").await.unwrap();
        silent.push(s);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // One more: its connection waits in the backlog, and is served once the silent ones are
    // cut off by the header timeout.
    let started = Instant::now();
    let (answer, _, _) = exchange(fx, &get("/feeds/capped/")).await;
    let waited = started.elapsed();
    assert_eq!(answer.map(|a| a.status), Some(200), "served once a place is free");
    assert!(waited >= Duration::from_secs(HEADER_TIMEOUT) - Duration::from_millis(800), "it waited: {waited:?}");
    assert!(waited < Duration::from_secs(HEADER_TIMEOUT + 3), "not longer than the timeout: {waited:?}");
    for mut s in silent {
        assert!(closed_within(&mut s, Duration::from_secs(1)).await, "the silent connections were cut off");
    }
}

/// Every answer in `bytes` (all framed by `Content-Length`), in order: status and body.
fn answers_in(bytes: &[u8]) -> Vec<(u16, String)> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&rest[..end]).to_ascii_lowercase();
        let status = head[9..12].parse().expect("a status");
        let length =
            head.lines().find_map(|l| l.strip_prefix("content-length:")).map_or(0, |v| v.trim().parse().unwrap());
        let body = &rest[end + 4..(end + 4 + length).min(rest.len())];
        out.push((status, String::from_utf8_lossy(body).to_string()));
        rest = &rest[(end + 4 + length).min(rest.len())..];
    }
    out
}

/// Sends `requests` at once on one connection and reads until the server closes it.
async fn pipelined(fx: &HttpFixture, requests: &[Vec<u8>]) -> Vec<(u16, String)> {
    let mut s = TcpStream::connect(addr(fx)).await.unwrap();
    s.write_all(&requests.concat()).await.unwrap();
    let mut bytes = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut bytes)).await.expect("closed in time").unwrap();
    answers_in(&bytes)
}

#[tokio::test]
async fn pipelined_requests_on_one_connection_are_answered_in_order_whatever_serves_them() {
    let fx = &hostile().fx;
    let keep = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes();
    // Plain GETs only.
    let answers =
        pipelined(fx, &[keep("/feeds/hostile/items/nowhere"), keep("/health"), get("/feeds/hostile/items/nowhere")])
            .await;
    let statuses: Vec<u16> = answers.iter().map(|a| a.0).collect();
    assert_eq!(statuses, [404, 200, 404], "{answers:?}");
    // A publish among them: the GET before it does not see it, the one after does.
    let entry = small_entry("piped");
    let mut publish = put("/feeds/hostile/items/piped", entry.as_bytes());
    let at = publish.windows(19).position(|w| w == b"Connection: close\r\n").unwrap();
    publish.drain(at..at + 19);
    let answers =
        pipelined(fx, &[keep("/feeds/hostile/items/piped"), publish, get("/feeds/hostile/items/piped")]).await;
    let statuses: Vec<u16> = answers.iter().map(|a| a.0).collect();
    assert_eq!(statuses, [404, 200, 200], "{answers:?}");
    assert!(answers[2].1.contains("piped"), "{answers:?}");
}

/// The `smartfeeds_http_held` gauge of `kind`: requests of that kind held now.
fn held_now(h: &Hostile, kind: &str) -> f64 {
    metric(&scrape_metrics(h.metrics), &format!("smartfeeds_http_held{{kind=\"{kind}\"}}")).unwrap_or(0.0)
}

/// [`held_now`], once it reads `want` or `within` has passed.
async fn held_reaches(h: &Hostile, kind: &str, want: f64, within: Duration) -> f64 {
    let until = Instant::now() + within;
    while held_now(h, kind) != want && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    held_now(h, kind)
}

#[tokio::test]
async fn a_client_that_goes_away_ends_its_held_request() {
    let h = hostile();
    for (kind, request) in [
        ("longpoll", get("/feeds/held/?order=created&timeout=40")),
        ("stream", b"GET /feeds/held/?order=created HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n".to_vec()),
    ] {
        let before = held_now(h, kind);
        let mut s = TcpStream::connect(addr(&h.fx)).await.unwrap();
        s.write_all(&request).await.unwrap();
        assert_eq!(
            held_reaches(h, kind, before + 1.0, Duration::from_secs(10)).await,
            before + 1.0,
            "the {kind} is held"
        );
        drop(s);
        let after = held_reaches(h, kind, before, Duration::from_secs(5)).await;
        assert_eq!(after, before, "the {kind} ended when its client went away");
    }
}

/// A long-poll on a connection that hyper serves (HTTP/1.0 is not a plain GET) is held and
/// answered by a publish as on the face's own path, with the whole page and a pull's headers.
#[tokio::test]
async fn a_long_poll_held_on_a_connection_hyper_serves_is_answered() {
    let h = hostile();
    let client = reqwest::Client::new();
    let res = put_entry(&client, &h.fx.base, "held", "h0", BOT, &small_entry("h0")).await.unwrap();
    assert_eq!(res.status(), 200);
    let before = held_now(h, "longpoll");
    let mut s = TcpStream::connect(addr(&h.fx)).await.unwrap();
    s.write_all(b"GET /feeds/held/?order=created&since=id:h0&timeout=30 HTTP/1.0\r\nHost: x\r\n\r\n").await.unwrap();
    let held = held_reaches(h, "longpoll", before + 1.0, Duration::from_secs(10)).await;
    assert_eq!(held, before + 1.0, "the long-poll is held");
    let res = put_entry(&client, &h.fx.base, "held", "h1", BOT, &small_entry("h1")).await.unwrap();
    assert_eq!(res.status(), 200);
    let answer = tokio::time::timeout(Duration::from_secs(10), read_answer(&mut s)).await;
    let answer = answer.expect("answered once published").expect("an answer");
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(answer.head.contains("link: ") && answer.head.contains("etag: "), "{answer:?}");
    assert!(answer.body.contains("\"id\":\"h1\"") && !answer.body.contains("\"id\":\"h0\""), "{answer:?}");
}

/// Held requests (event streams, waiting long-polls) take at most all but a tenth of the
/// connection places (at least one kept): past that they are refused with 503 and
/// `Retry-After`, and a publisher still gets a place and its answer, which the held streams
/// then receive.
#[tokio::test]
async fn held_requests_leave_places_for_publishes_and_pulls() {
    let fx = held_capped();
    let stream = b"GET /feeds/heldcap/ HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n";
    let mut streams = Vec::new();
    for _ in 0..CAP - 1 {
        let mut s = TcpStream::connect(addr(fx)).await.unwrap();
        s.write_all(stream).await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut byte)).await.expect("a head").unwrap();
            assert_eq!(n, 1, "the stream's head: {}", String::from_utf8_lossy(&head));
            head.push(byte[0]);
        }
        assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
        streams.push(s);
    }
    // Every place for held requests is taken: one more stream, or a long-poll that would
    // wait, is refused at once, and told when to come back.
    let one_more = [stream.to_vec(), get("/feeds/heldcap/?order=created&timeout=30")];
    for request in one_more {
        let what = String::from_utf8_lossy(&request[..40]).to_string();
        let (answer, took, _) = exchange(fx, &request).await;
        let answer = answer.unwrap_or_else(|| panic!("an answer to {what}"));
        assert_eq!(answer.status, 503, "{what}: {answer:?}");
        assert!(answer.head.contains("retry-after: "), "{what}: {answer:?}");
        assert!(answer.body.contains("held"), "{what}: {answer:?}");
        assert!(took < Duration::from_secs(2), "{what}: {took:?}");
    }
    // A publisher still finds a place.
    let client = reqwest::Client::new();
    let res = tokio::time::timeout(
        Duration::from_secs(5),
        put_entry(&client, &fx.base, "heldcap", "p1", BOT, &small_entry("p1")),
    )
    .await
    .expect("the publish answered while the held requests hold their places")
    .unwrap();
    assert_eq!(res.status(), 200);
    // And each stream gets its event.
    for s in &mut streams {
        let mut seen = Vec::new();
        let mut chunk = [0u8; 4096];
        while !String::from_utf8_lossy(&seen).contains("p1") {
            let n =
                tokio::time::timeout(Duration::from_secs(10), s.read(&mut chunk)).await.expect("the event").unwrap();
            assert!(n > 0, "the stream ended before its event");
            seen.extend_from_slice(&chunk[..n]);
        }
    }
    // A place given back is taken again.
    drop(streams.pop());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut s = TcpStream::connect(addr(fx)).await.unwrap();
    s.write_all(stream).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), read_head(&mut s)).await.expect("a head");
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
}

/// The head of an answer, lower-cased, without reading its body.
async fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).to_ascii_lowercase()
}

/// A client that pipelines more than a head's bound behind its held long-poll, then goes
/// away, ends the long-poll (and gives its place back) at once, not at its timeout.
#[tokio::test]
async fn a_held_request_whose_client_pipelines_past_the_bound_then_leaves_is_ended() {
    let h = hostile();
    let before = held_now(h, "longpoll");
    let mut s = TcpStream::connect(addr(&h.fx)).await.unwrap();
    s.write_all(b"GET /feeds/held/?order=created&timeout=120 HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let held = held_reaches(h, "longpoll", before + 1.0, Duration::from_secs(10)).await;
    assert_eq!(held, before + 1.0, "the long-poll is held");
    let pipelined = format!("GET /feeds/held/ HTTP/1.1\r\nHost: x\r\nX-Pad: {}", "p".repeat(20 * 1024));
    let _ = s.write_all(pipelined.as_bytes()).await;
    drop(s);
    let after = held_reaches(h, "longpoll", before, Duration::from_secs(5)).await;
    assert_eq!(after, before, "the long-poll ended when its client went away");
}

/// RFC 9110 §8.6: a 304 carries no `Content-Length`, or the one its 200 would have. On
/// the plain path and on hyper's (HTTP/1.0).
#[tokio::test]
async fn a_not_modified_answer_has_no_zero_length() {
    let fx = &hostile().fx;
    let client = reqwest::Client::new();
    let res = put_entry(&client, &fx.base, "hostile", "nm", BOT, &small_entry("nm")).await.unwrap();
    assert_eq!(res.status(), 200);
    let (full, _, _) = exchange(fx, &get("/feeds/hostile/?max=5")).await;
    let full = full.expect("a page");
    let etag = full.head.lines().find_map(|l| l.strip_prefix("etag: ")).expect("an etag").trim().to_string();
    for version in ["1.1", "1.0"] {
        let request = format!(
            "GET /feeds/hostile/?max=5 HTTP/{version}\r\nHost: x\r\nIf-None-Match: {etag}\r\nConnection: close\r\n\r\n"
        );
        let (answer, _, _) = exchange(fx, request.as_bytes()).await;
        let answer = answer.expect("an answer");
        assert_eq!(answer.status, 304, "HTTP/{version}: {answer:?}");
        let length = answer.head.lines().find_map(|l| l.strip_prefix("content-length: "));
        assert!(
            length.is_none() || length == full.head.lines().find_map(|l| l.strip_prefix("content-length: ")),
            "HTTP/{version}: {answer:?}"
        );
    }
}

/// A GET of a feed URL is answered without the router when it comes on the plain path
/// (`http::direct`), and through hyper and the layers on a connection hyper serves: the two
/// give the same answers, head and body (but the date), whatever the request's fate.
#[tokio::test]
async fn feed_gets_answer_the_same_whichever_path_serves_them() {
    let fx = &hostile().fx;
    let client = reqwest::Client::new();
    let res = put_entry(&client, &fx.base, "hostile", "same1", BOT, &small_entry("same1")).await.unwrap();
    assert_eq!(res.status(), 200);
    let etag = client.get(format!("{}/feeds/hostile/", fx.base)).send().await.unwrap().headers()["etag"].clone();
    let etag = etag.to_str().unwrap();
    let requests = [
        "GET /feeds/hostile/ HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
        "GET /feeds/hostile/?order=created&max=1 HTTP/1.1\r\nHost: x\r\nAccept: application/atom+xml\r\n\r\n".into(),
        format!("GET /feeds/hostile/ HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\n\r\n"),
        "GET /feeds/hostile/?callback=cb&format=json HTTP/1.1\r\nHost: x\r\n\r\n".into(),
        "GET /feeds/hostile/?bogus=1 HTTP/1.1\r\nHost: x\r\n\r\n".into(),
        "GET /feeds/nosuch/ HTTP/1.1\r\nHost: x\r\n\r\n".into(),
        "GET /feeds/hostile/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n\r\n".into(),
        // A long-poll held for a second, then answered empty.
        "GET /feeds/hostile/?order=created&since=id:same1&timeout=1 HTTP/1.1\r\nHost: x\r\n\r\n".into(),
    ];
    // What a comparison may differ in: the date, and where the date and length go.
    let seen = |a: &Answer| {
        let mut lines: Vec<String> = a.head.lines().filter(|l| !l.starts_with("date:")).map(str::to_string).collect();
        lines.sort();
        (a.status, lines, a.body.clone())
    };
    for request in &requests {
        let mut direct = TcpStream::connect(addr(fx)).await.unwrap();
        direct.write_all(request.as_bytes()).await.unwrap();
        let direct = tokio::time::timeout(Duration::from_secs(10), read_answer(&mut direct)).await.unwrap();
        let direct = direct.unwrap_or_else(|| panic!("no direct answer to {request:?}"));
        let mut layered = TcpStream::connect(addr(fx)).await.unwrap();
        // Not a plain GET (a body's length is given): the connection is hyper's from here on.
        layered.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").await.unwrap();
        let health = read_answer(&mut layered).await.expect("the health answer");
        assert_eq!(health.status, 200, "{health:?}");
        layered.write_all(request.as_bytes()).await.unwrap();
        let layered = tokio::time::timeout(Duration::from_secs(10), read_answer(&mut layered)).await.unwrap();
        let layered = layered.unwrap_or_else(|| panic!("no layered answer to {request:?}"));
        assert_eq!(seen(&direct), seen(&layered), "{request:?}");
        assert!(direct.head.contains("vary: ") && direct.head.contains("access-control-expose-headers"), "{direct:?}");
    }
}
