//! End to end, the HTTP face (SPEC §9, §11): the real binary with `[http]`, a real XMPP
//! server beside it, and a real HTTP client (reqwest). Pages are compared with XMPP's for the
//! same view, Atom is read by a real feed parser (feed-rs), JSON by its shape; long-polls,
//! event streams, archives, tokens, hostile input, and changes crossing between the faces.

use reqwest::StatusCode;
use serde_json::Value;
use std::time::{Duration, Instant};
use testkit::http::{ADMIN, ALICE, BOT, EVE, HttpFixture, http_table, put_entry, sse_events};
use testkit::process::free_port;
use testkit::pubsub::*;
use testkit::push::{next_push, subscribe};
use testkit::smartfeeds::{bot_feeds, closed_feed, titled_feed};
use testkit::{Client, Shared};

static SHARED: Shared<HttpFixture> = Shared::new();

/// The shared fixture: a server and smartfeeds with the HTTP face.
fn shared() -> &'static HttpFixture {
    SHARED.get_or_start(|| {
        HttpFixture::start(|port| {
            let http = http_table(port, "max_timeout = 30\narchive_page = 5\n", &["bot", "admin", "alice", "eve"]);
            let plain = bot_feeds(&["pages", "hostile", "lp", "sse", "arch", "cross", "dated"]);
            let secret = closed_feed("secret", &["alice@localhost"]);
            let page = titled_feed("page", "The page feed");
            [http, plain, secret, page].concat()
        })
    })
}

fn url(path: &str) -> String {
    shared().url(path)
}

fn http() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(60)).build().expect("a client")
}

/// PUTs an entry as `token`; returns the answer's JSON.
async fn put(feed: &str, id: &str, entry: &str, token: &str) -> Value {
    let res = put_entry(&http(), &shared().base, feed, id, token, entry).await.expect("PUT");
    assert_eq!(res.status(), StatusCode::OK, "PUT {feed}/{id}");
    res.json().await.expect("JSON")
}

async fn get_json(path: &str, token: Option<&str>) -> (StatusCode, Value) {
    let mut req = http().get(url(path)).header("accept", "application/json");
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let res = req.send().await.expect("GET");
    let status = res.status();
    (status, res.json().await.unwrap_or(Value::Null))
}

fn ids(doc: &Value) -> Vec<String> {
    doc["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items in {doc}"))
        .iter()
        .map(|i| i["id"].as_str().expect("id").to_string())
        .collect()
}

/// Every 4xx answer is a JSON `{"error", "text"}`.
async fn assert_json_error(res: reqwest::Response, status: StatusCode, needle: &str) {
    assert_eq!(res.status(), status, "{needle}");
    let body: Value = res.json().await.expect("a JSON error body");
    assert!(body["error"].is_string(), "{body}");
    let text = body["text"].as_str().expect("text");
    assert!(text.contains(needle), "{text:?} should mention {needle:?}");
}

#[tokio::test]
async fn a_view_walked_over_http_has_the_pages_counts_and_cursors_of_xmpp() {
    let sh = shared();
    for k in 0..23 {
        let author = if k % 3 == 0 { Some("ann") } else { None };
        put("pages", &format!("p{k:02}"), &entry(&format!("urn:p{k}"), &format!("title {k}"), author, &["x"]), BOT)
            .await;
    }
    put("pages", "p05", &entry("urn:p5", "title 5 v2", Some("ann"), &[]), BOT).await;
    let res = http().delete(url("/feeds/pages/items/p07")).bearer_auth(BOT).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::NO_CONTENT);

    let mut alice = sh.fx.server.login("alice").await;
    for (node, query) in [
        ("pages?order=modified", "?order=modified"),
        ("pages", ""),
        ("pages?order=created&author=ann", "?order=created&author=ann"),
    ] {
        // XMPP, page by page.
        let xmpp: Vec<_> = pages(&mut alice, Pull::node(node).max(4))
            .await
            .into_iter()
            .map(|page| (page.ids(), page.count.expect("a count"), page.last.clone()))
            .collect();
        // HTTP, following `next`.
        let mut http_pages = Vec::new();
        let mut next = Some(url(&format!("/feeds/pages/{query}{}max=4", if query.is_empty() { "?" } else { "&" })));
        while let Some(u) = next {
            let doc: Value = http().get(&u).query(&[("timeout", "0")]).send().await.unwrap().json().await.unwrap();
            if doc["count"] == 0 {
                assert!(doc.get("next").is_none() && doc.get("last_cursor").is_none(), "{doc}");
                break;
            }
            let last = doc["last_cursor"].as_str().map(|c| format!("cursor:{c}"));
            http_pages.push((ids(&doc), doc["totalItems"].as_u64().unwrap(), last));
            // Every item's shape.
            for item in doc["items"].as_array().unwrap() {
                assert!(item["cursor"].is_string() && item["published"].is_string() && item["updated"].is_string());
                assert!(item["atom"].as_str().unwrap().contains("entry"), "{item}");
                if item["id"] == "p07" {
                    assert_eq!(item["deleted"], true);
                } else {
                    assert!(item.get("deleted").is_none() && item["title"].is_string(), "{item}");
                }
            }
            assert_eq!(doc["url"].as_str().unwrap(), url(&format!("/feeds/pages/{query}")));
            next = doc["next"].as_str().map(str::to_string);
        }
        assert!(!xmpp.is_empty(), "{node}");
        assert_eq!(http_pages, xmpp, "the same pages, counts and cursors for {node}");
    }

    // `until`, `id:` and `time:` positions mean what they mean over XMPP.
    let xmpp = pull(&mut alice, &Pull::node("pages?order=created").max(3).before("id:p10")).await;
    let (_, doc) = get_json("/feeds/pages/?order=created&until=id%3Ap10&max=3", None).await;
    assert_eq!(ids(&doc), xmpp.ids());
    let (_, doc) = get_json("/feeds/pages/?order=created&since=id%3Ap10&max=2&timeout=0", None).await;
    assert_eq!(ids(&doc), ["p11", "p12"]);

    // Atom, read by a real feed parser.
    let res = http().get(url("/feeds/pages/?max=5")).header("accept", "application/atom+xml").send().await.unwrap();
    assert_eq!(res.headers()["content-type"], "application/atom+xml; charset=utf-8");
    let link = res.headers()["link"].to_str().unwrap().to_string();
    assert!(link.contains("rel=\"hub\"") && link.contains("rel=\"self\""), "{link}");
    assert_eq!(res.headers()["access-control-allow-origin"], "*");
    let body = res.text().await.unwrap();
    let parsed = feed_rs::parser::parse(body.as_bytes()).expect("feed-rs reads the Atom document");
    assert_eq!(parsed.entries.len(), 5, "{body}");
    assert!(parsed.links.iter().any(|l| l.rel.as_deref() == Some("next")), "{body}");
    assert!(body.contains("<fo:total>23</fo:total>") && body.contains("<fo:last_cursor>"), "{body}");
    assert_eq!(body.matches("<fo:id>").count(), 5);
    assert!(parsed.entries[0].title.as_ref().is_some_and(|t| t.content.starts_with("title")));

    // JSON-P, and a bad callback.
    let res = http().get(url("/feeds/pages/?max=1&callback=my.cb")).send().await.unwrap();
    assert_eq!(res.headers()["content-type"], "application/javascript; charset=utf-8");
    assert_eq!(res.headers()["x-content-type-options"], "nosniff");
    let body = res.text().await.unwrap();
    let inner = body.strip_prefix("/**/my.cb(").and_then(|b| b.strip_suffix(");")).expect("wrapped");
    assert_eq!(serde_json::from_str::<Value>(inner).unwrap()["count"], 1);
    let res = http()
        .get(url("/feeds/pages/?max=1&callback=x"))
        .header("accept", "application/atom+xml")
        .send()
        .await
        .unwrap();
    let body = res.text().await.unwrap();
    let inner = body.strip_prefix("/**/x(").and_then(|b| b.strip_suffix(");")).unwrap();
    assert!(serde_json::from_str::<String>(inner).unwrap().starts_with("<?xml"));
    let res = http().get(url("/feeds/pages/?callback=alert(1)")).send().await.unwrap();
    assert_json_error(res, StatusCode::BAD_REQUEST, "callback").await;

    // ETag and 304; a change makes a new ETag.
    let res = http().get(url("/feeds/pages/?max=2&order=modified&timeout=0")).send().await.unwrap();
    let tag = res.headers()["etag"].clone();
    assert_eq!(res.headers()["cache-control"], "max-age=0");
    let res = http()
        .get(url("/feeds/pages/?max=2&order=modified&timeout=0"))
        .header("if-none-match", tag.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::NOT_MODIFIED);
    put("pages", "p00", &entry("urn:p0", "title 0 v2", None, &[]), BOT).await;
    let res = http()
        .get(url("/feeds/pages/?max=2&order=-modified&timeout=0"))
        .header("if-none-match", tag)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);

    // One item, and the feed list.
    let (s, item) = get_json("/feeds/pages/items/p05", None).await;
    assert_eq!((s, item["title"].as_str()), (StatusCode::OK, Some("title 5 v2")));
    let (s, _) = get_json("/feeds/pages/items/nope", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    alice.close().await;
}

#[tokio::test]
async fn tokens_and_whitelists_decide_as_over_xmpp() {
    shared();
    put("secret", "s1", &entry("urn:s1", "secret", None, &[]), BOT).await;
    let (s, body) = get_json("/feeds/secret/", None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body.to_string().find("s1").is_none(), "nothing of the items: {body}");
    let res = http().get(url("/feeds/secret/")).send().await.unwrap();
    assert_eq!(res.headers()["www-authenticate"], "Bearer");
    let (s, _) = get_json("/feeds/secret/", Some(EVE)).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, doc) = get_json("/feeds/secret/", Some(ALICE)).await;
    assert_eq!((s, ids(&doc)), (StatusCode::OK, vec!["s1".to_string()]));
    let res = http().get(url("/feeds/secret/")).bearer_auth(ALICE).send().await.unwrap();
    assert!(res.headers().get("access-control-allow-origin").is_none(), "no CORS on whitelist feeds");
    let (s, _) = get_json("/feeds/secret/", Some(ADMIN)).await;
    assert_eq!(s, StatusCode::OK);
    // An unknown token is 401 even on open feeds.
    let (s, body) = get_json("/feeds/pages/", Some("not-a-token-at-all")).await;
    assert_eq!((s, body["error"].as_str()), (StatusCode::UNAUTHORIZED, Some("not-authorized")));
    // The feed list shows what the requester may read.
    let names = |doc: &Value| -> Vec<String> {
        doc["feeds"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap().to_string()).collect()
    };
    let (_, anon) = get_json("/feeds/", None).await;
    assert!(names(&anon).contains(&"pages".to_string()) && !names(&anon).contains(&"secret".to_string()));
    let (_, a) = get_json("/feeds/", Some(ALICE)).await;
    assert!(names(&a).contains(&"secret".to_string()));
    // Publishing: no token 401, not a publisher 403, then fine.
    let e = entry("urn:h", "h", None, &[]);
    let req = |token: Option<&str>| {
        let r =
            http().put(url("/feeds/secret/items/h1")).header("content-type", "application/atom+xml").body(e.clone());
        match token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    };
    assert_json_error(req(None).send().await.unwrap(), StatusCode::UNAUTHORIZED, "token").await;
    assert_json_error(req(Some(ALICE)).send().await.unwrap(), StatusCode::FORBIDDEN, "may not publish").await;
    assert_eq!(req(Some(BOT)).send().await.unwrap().status(), StatusCode::OK);
    let (s, _) = get_json("/health", None).await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test]
async fn browsers_on_other_origins_may_read_open_feeds_only() {
    shared();
    let origin = "https://reader.example";
    let preflight = |path: &str| {
        http()
            .request(reqwest::Method::OPTIONS, url(path))
            .header("origin", origin)
            .header("access-control-request-method", "GET")
            .header("access-control-request-headers", "authorization, last-event-id")
            .send()
    };
    // The preflight of an open feed is answered without a token, and allows what a reader
    // sends: a token, an ETag to revalidate, a Last-Event-ID to resume a stream.
    let res = preflight("/feeds/pages/?order=modified").await.unwrap();
    assert!(res.status().is_success(), "{}", res.status());
    let h = res.headers();
    assert_eq!(h["access-control-allow-origin"], origin);
    let allowed = h["access-control-allow-headers"].to_str().unwrap().to_ascii_lowercase();
    for name in ["authorization", "last-event-id", "if-none-match"] {
        assert!(allowed.contains(name), "{allowed}");
    }
    assert!(h["access-control-allow-methods"].to_str().unwrap().contains("GET"));
    // A read from that origin may see the ETag and Link headers.
    let res = http().get(url("/feeds/pages/")).header("origin", origin).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.headers()["access-control-allow-origin"], origin);
    let exposed = res.headers()["access-control-expose-headers"].to_str().unwrap().to_ascii_lowercase();
    assert!(exposed.contains("etag") && exposed.contains("link"), "{exposed}");
    // A whitelist feed: no CORS at all, preflight or not.
    let res = preflight("/feeds/secret/").await.unwrap();
    assert!(res.headers().get("access-control-allow-origin").is_none(), "{:?}", res.headers());
    let res = http().get(url("/feeds/secret/")).header("origin", origin).bearer_auth(ALICE).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(res.headers().get("access-control-allow-origin").is_none(), "{:?}", res.headers());
}

/// Writes `request` on a fresh connection and reads the answer until the server closes it
/// (30 s at most).
async fn raw(request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tokio::time::timeout(Duration::from_secs(30), async {
        let addr = shared().base.trim_start_matches("http://").to_string();
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = s.write_all(request.as_bytes()).await;
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        // Until the server closes, or the head and a little of the body are in.
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&answer);
            if text.contains("\r\n\r\n") && (text.contains("\"}") || text.contains("content-length: 0")) {
                break;
            }
        }
        String::from_utf8_lossy(&answer).to_string()
    })
    .await
    .expect("an answer in time")
}

#[tokio::test]
async fn hostile_input_gets_clear_4xx_json_errors() {
    shared();
    let c = http();
    let get = |q: String| c.get(url(&format!("/feeds/hostile/?{q}"))).send();
    assert_json_error(get("sort=x".into()).await.unwrap(), StatusCode::BAD_REQUEST, "sort").await;
    assert_json_error(get("max=1&max=2".into()).await.unwrap(), StatusCode::BAD_REQUEST, "max").await;
    assert_json_error(get("max=".into()).await.unwrap(), StatusCode::BAD_REQUEST, "max").await;
    assert_json_error(get("since=nope".into()).await.unwrap(), StatusCode::BAD_REQUEST, "since").await;
    assert_json_error(get("order=sideways".into()).await.unwrap(), StatusCode::BAD_REQUEST, "order").await;
    assert_json_error(get("author=%FF%FE".into()).await.unwrap(), StatusCode::BAD_REQUEST, "UTF-8").await;
    let many = vec!["max=1"; 100].join("&");
    assert_json_error(get(many).await.unwrap(), StatusCode::BAD_REQUEST, "parameters").await;
    let long = format!("author={}", "a".repeat(9_000));
    assert_json_error(get(long).await.unwrap(), StatusCode::URI_TOO_LONG, "longer").await;
    // Past what a request's head may hold: the HTTP stack refuses it before any handler.
    let huge = raw(&format!("GET /feeds/hostile/?author={} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(100_000))).await;
    assert!(huge.starts_with("HTTP/1.1 4"), "{}", &huge[..huge.len().min(200)]);
    // Too many headers, and a header too large.
    let many: String = (0..200).map(|i| format!("X-H{i}: v\r\n")).collect();
    let answer = raw(&format!("GET /feeds/hostile/ HTTP/1.1\r\nHost: x\r\n{many}\r\n")).await;
    assert!(answer.starts_with("HTTP/1.1 4"), "{}", &answer[..answer.len().min(200)]);
    let (s, _) = get_json("/feeds/nosuch/", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = get_json("/nothing/here", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = get_json("/feeds/hostile/items/x?since=1", None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    // Publishing bad bodies.
    let put = |ctype: &'static str, body: Vec<u8>| {
        c.put(url("/feeds/hostile/items/x")).bearer_auth(BOT).header("content-type", ctype).body(body).send()
    };
    assert_json_error(put("text/plain", b"<x/>".to_vec()).await.unwrap(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "Atom")
        .await;
    assert_json_error(put("application/atom+xml", b"<entry".to_vec()).await.unwrap(), StatusCode::BAD_REQUEST, "XML")
        .await;
    assert_json_error(
        put("application/atom+xml", b"<foo xmlns='urn:x'/>".to_vec()).await.unwrap(),
        StatusCode::BAD_REQUEST,
        "entry",
    )
    .await;
    assert_json_error(
        put("application/atom+xml", vec![0xff, 0xfe, 0x00]).await.unwrap(),
        StatusCode::BAD_REQUEST,
        "UTF-8",
    )
    .await;
    let big = format!("<entry xmlns='http://www.w3.org/2005/Atom'><title>{}</title></entry>", "x".repeat(200_000));
    assert_json_error(
        put("application/atom+xml", big.into_bytes()).await.unwrap(),
        StatusCode::PAYLOAD_TOO_LARGE,
        "larger",
    )
    .await;
    // A slow-loris body: a few bytes, then silence.
    let slow = raw(&format!(
        "PUT /feeds/hostile/items/slow HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {BOT}\r\n\
         Content-Type: application/atom+xml\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n<entry"
    ))
    .await;
    assert!(slow.starts_with("HTTP/1.1 408"), "{slow}");
    assert!(slow.contains("request-timeout"), "{slow}");
}

#[tokio::test]
async fn a_long_poll_is_answered_by_a_publish_through_either_face_and_times_out_empty() {
    let sh = shared();
    // Times out empty.
    let started = Instant::now();
    let (s, doc) = get_json("/feeds/lp/?order=created&timeout=1", None).await;
    assert_eq!((s, doc["count"].as_u64()), (StatusCode::OK, Some(0)));
    assert!(started.elapsed() >= Duration::from_millis(900), "{:?}", started.elapsed());
    // Held requests on the views the item enters wake; one that it does not enter stays held.
    let held = |q: &'static str| {
        tokio::spawn(async move { (Instant::now(), get_json(&format!("/feeds/lp/?{q}"), None).await) })
    };
    let created = held("order=created&timeout=20");
    let modified = held("order=modified&timeout=20");
    let bob_only = held("order=created&author=bob&timeout=3");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut bot = sh.fx.server.login("bot").await;
    let published = Instant::now();
    let reply = bot.iq(publish_iq("lp", Some("l1"), &entry("urn:l1", "over xmpp", Some("ann"), &[]))).await;
    assert_eq!(testkit::stanza_type(&reply), "result");
    for h in [created, modified] {
        let (_, (s, doc)) = h.await.unwrap();
        assert_eq!((s, ids(&doc)), (StatusCode::OK, vec!["l1".to_string()]));
        assert!(published.elapsed() < Duration::from_secs(2), "woken at once: {:?}", published.elapsed());
    }
    let (_, (s, doc)) = bob_only.await.unwrap();
    assert_eq!((s, doc["count"].as_u64()), (StatusCode::OK, Some(0)), "not woken by an item outside its view");
    // Many requests held on one view (their re-reads are shared) each get the item, also
    // when two publishes follow each other closely.
    let many: Vec<_> = (0..200).map(|_| held("order=created&since=id%3Al1&timeout=20")).collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for id in ["l2", "l3"] {
        let reply = bot.iq(publish_iq("lp", Some(id), &entry(&format!("urn:{id}"), id, None, &[]))).await;
        assert_eq!(testkit::stanza_type(&reply), "result");
    }
    for h in many {
        let (_, (s, doc)) = h.await.unwrap();
        assert_eq!(s, StatusCode::OK);
        let got = ids(&doc);
        assert_eq!(got.first().map(String::as_str), Some("l2"), "{got:?}");
    }
    // A descending view, or `until`, answers at once.
    let started = Instant::now();
    let (_, doc) = get_json("/feeds/lp/?order=-created&since=id%3Al1&timeout=20", None).await;
    assert_eq!(doc["count"], 0);
    assert!(started.elapsed() < Duration::from_secs(2));
    bot.close().await;
}

#[tokio::test]
async fn an_event_stream_resumes_from_last_event_id_without_loss_or_repeat() {
    shared();
    put("sse", "old", &entry("urn:old", "before the stream", None, &[]), BOT).await;
    let open = |last: Option<String>| {
        let mut r = http().get(url("/feeds/sse/?order=modified")).header("accept", "text/event-stream");
        if let Some(l) = last {
            r = r.header("last-event-id", l);
        }
        r.send()
    };
    let mut res = open(None).await.unwrap();
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut buf = String::new();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for k in 0..3 {
        put("sse", &format!("e{k}"), &entry(&format!("urn:e{k}"), "live", None, &[]), BOT).await;
    }
    let first = sse_events(&mut res, &mut buf, 3).await;
    let got: Vec<&str> = first.iter().map(|(_, _, d)| d["id"].as_str().unwrap()).collect();
    assert_eq!(got, ["e0", "e1", "e2"], "from now: not the older item");
    assert!(first.iter().all(|(id, ev, d)| id == &format!("cursor:{}", d["cursor"].as_str().unwrap()) && ev == "item"));
    let last_id = first[1].0.clone();
    drop(res);
    // While disconnected: a retraction and a new item.
    let r = http().delete(url("/feeds/sse/items/e0")).bearer_auth(BOT).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    put("sse", "e3", &entry("urn:e3", "live", None, &[]), BOT).await;
    // Resumes after e1: e2, then the retraction of e0, then e3; nothing else.
    let mut res = open(Some(last_id)).await.unwrap();
    let mut buf = String::new();
    let next = sse_events(&mut res, &mut buf, 3).await;
    let got: Vec<(&str, &str)> = next.iter().map(|(_, ev, d)| (d["id"].as_str().unwrap(), ev.as_str())).collect();
    assert_eq!(got, [("e2", "item"), ("e0", "retract"), ("e3", "item")]);
    let more = tokio::time::timeout(Duration::from_millis(500), res.chunk()).await;
    if let Ok(Ok(Some(c))) = more {
        assert!(String::from_utf8_lossy(&c).trim_start().starts_with(':'), "only comments, no repeat");
    }
}

#[tokio::test]
async fn archives_link_from_the_recent_document_to_the_first_and_back() {
    shared();
    for k in 1..=12 {
        put("arch", &format!("a{k:02}"), &entry(&format!("urn:a{k}"), &format!("a{k}"), None, &[]), BOT).await;
    }
    let fetch = |u: String| async move {
        let res = http().get(&u).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{u}");
        let cache = res.headers()["cache-control"].to_str().unwrap().to_string();
        let etag = res.headers()["etag"].clone();
        let body = res.text().await.unwrap();
        let feed = feed_rs::parser::parse(body.as_bytes()).expect("feed-rs reads the archive");
        let link = |rel: &str| feed.links.iter().find(|l| l.rel.as_deref() == Some(rel)).map(|l| l.href.clone());
        let links: Vec<Option<String>> = ["self", "current", "prev-archive", "next-archive", "via"].map(link).into();
        let titles: Vec<String> =
            feed.entries.iter().filter_map(|e| e.title.as_ref().map(|t| t.content.clone())).collect();
        (body, cache, etag, links, titles)
    };
    let base = url("/feeds/arch/archive/");
    let (body, cache, etag, links, titles) = fetch(base.clone()).await;
    assert_eq!(titles, ["a12", "a11"], "the recent document: the partial last one, newest first");
    assert!(!body.contains("fh:archive/"), "{body}");
    assert_eq!(cache, "max-age=0");
    assert_eq!(links[4].as_deref(), Some(format!("{base}3").as_str()), "via");
    assert_eq!(links[1].as_deref(), Some(base.as_str()), "current");
    assert!(links[3].is_none(), "no next-archive on the newest");
    // Walk back to the first.
    let mut seen = vec![titles];
    let mut prev = links[2].clone();
    let mut walked = Vec::new();
    while let Some(p) = prev {
        let (body, cache, _, links, titles) = fetch(p.clone()).await;
        assert!(body.contains("<fh:archive/>"), "archived documents say so: {p}");
        assert_eq!(cache, "public, max-age=3600");
        walked.push(p);
        seen.push(titles);
        prev = links[2].clone();
    }
    assert_eq!(walked, [format!("{base}2"), format!("{base}1")]);
    let all: Vec<String> = seen.concat();
    let expected: Vec<String> = (1..=12).rev().map(|k| format!("a{k}")).collect();
    assert_eq!(all, expected, "every item once, newest first");
    // And forward again from the first.
    let (_, _, _, links, _) = fetch(format!("{base}1")).await;
    assert_eq!(links[3].as_deref(), Some(format!("{base}2").as_str()));
    let (body, _, _, links, _) = fetch(format!("{base}3")).await;
    assert!(!body.contains("fh:archive/") && links[3].is_none());
    // 304 and past the last.
    let res = http().get(&base).header("if-none-match", etag).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::NOT_MODIFIED);
    let (s, _) = get_json("/feeds/arch/archive/4", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = get_json("/feeds/arch/archive/0", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_publish_over_http_is_pushed_over_xmpp_and_the_other_way_round() {
    let sh = shared();
    let mut alice: Client = sh.fx.server.login("alice").await;
    let me = alice.bare_jid().to_string();
    subscribe(&mut alice, "cross?order=modified", &me).await;
    let res = http()
        .post(url("/feeds/cross/"))
        .bearer_auth(BOT)
        .header("content-type", "application/atom+xml")
        .body(entry("urn:c1", "from http", None, &[]))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let location = res.headers()["location"].to_str().unwrap().to_string();
    let doc: Value = res.json().await.unwrap();
    let id = doc["id"].as_str().unwrap().to_string();
    assert!(location.ends_with(&format!("/feeds/cross/items/{id}")), "{location}");
    let push = next_push(&mut alice, Duration::from_secs(5)).await;
    assert_eq!(push.item_id(), id);
    assert_eq!(Some(push.last_cursor()), doc["cursor"].as_str(), "the cursor in the modified order");
    // XMPP publish → HTTP pull sees it.
    let mut bot = sh.fx.server.login("bot").await;
    let reply = bot.iq(publish_iq("cross", Some("c2"), &entry("urn:c2", "from xmpp", None, &[]))).await;
    assert_eq!(testkit::stanza_type(&reply), "result");
    let (_, doc) =
        get_json(&format!("/feeds/cross/?order=modified&since=cursor%3A{}&timeout=0", push.last_cursor()), None).await;
    assert_eq!(ids(&doc), ["c2"]);
    let _ = next_push(&mut alice, Duration::from_secs(5)).await;
    // HTTP retract → pushed as a retraction.
    let res = http().delete(url(&format!("/feeds/cross/items/{id}"))).bearer_auth(BOT).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    let push = next_push(&mut alice, Duration::from_secs(5)).await;
    assert!(push.is_retract() && push.item_id() == id);
    alice.close().await;
    bot.close().await;
}

/// The page in a real browser: headless Chromium loads it; the test reads what the page
/// shows through Chromium's DevTools HTTP endpoint (the page names its tab after the newest
/// item it shows), then publishes and waits for the new item to appear, brought by the
/// event stream.
#[tokio::test]
async fn the_page_shows_a_new_item_live_in_a_real_browser() {
    shared();
    put("page", "before", &entry("urn:before", "Published before the page loaded", None, &[]), BOT).await;
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| std::process::Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()))
        .expect("chromium is installed (Debian package chromium; .ci/run installs it)");
    let profile = tempfile::tempdir().unwrap();
    let port = free_port();
    let browser = std::process::Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--remote-debugging-port={port}"))
        .arg(url("/?feed=page"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("chromium starts");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _browser = Kill(browser);
    // What the browser shows: the titles of its pages.
    let shown = |want: &'static str| async move {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut last = String::new();
        while Instant::now() < deadline {
            if let Ok(res) = http().get(format!("http://127.0.0.1:{port}/json/list")).send().await
                && let Ok(list) = res.json::<Value>().await
            {
                last = list.to_string();
                if list
                    .as_array()
                    .is_some_and(|pages| pages.iter().any(|p| p["title"].as_str().is_some_and(|t| t.contains(want))))
                {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("the page never showed {want:?}; the browser's pages: {last}");
    };
    shown("Published before the page loaded").await;
    // The stream is open once the first items are shown; give it a moment to connect.
    tokio::time::sleep(Duration::from_millis(500)).await;
    put("page", "live", &entry("urn:live", "Arrived while watching", Some("ann"), &[]), BOT).await;
    shown("Arrived while watching").await;
}

/// Readers see an entry's own dates, not when it entered the feed: an entry written on
/// 2 November 2025 and published now reads as of 2 November in the JSON answer, JSON Feed,
/// Atom and the page; one without dates reads as of its publication. The cursor keeps the
/// item's own time.
#[tokio::test]
async fn readers_see_an_entrys_own_dates() {
    shared();
    let dated = "<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:dated</id><title>Written in November</title>\
                 <published>2025-11-02T09:30:00Z</published><updated>2025-11-03T10:00:00Z</updated></entry>";
    let cursor = put("dated", "old", dated, BOT).await["cursor"].as_str().expect("a cursor").to_string();
    put(
        "dated",
        "new",
        "<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:undated</id><title>Undated</title></entry>",
        BOT,
    )
    .await;
    let now_year = chrono::Datelike::year(&chrono::Utc::now()).to_string();
    let (status, doc) = get_json("/feeds/dated/?order=created", None).await;
    assert_eq!(status, StatusCode::OK);
    let old = &doc["items"][0];
    assert_eq!(
        (old["id"].as_str(), old["published"].as_str()),
        (Some("old"), Some("2025-11-02T09:30:00.000Z")),
        "{doc}"
    );
    assert_eq!(old["updated"], "2025-11-03T10:00:00.000Z", "{doc}");
    assert_eq!(old["cursor"].as_str(), Some(cursor.as_str()), "the cursor keeps the item's own time");
    assert!(doc["items"][1]["published"].as_str().is_some_and(|p| p.starts_with(&now_year)), "{doc}");
    // JSON Feed.
    let feed: Value = http()
        .get(url("/feeds/dated/?order=created&format=json-feed"))
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("JSON Feed");
    assert_eq!(feed["items"][0]["date_published"], "2025-11-02T09:30:00.000Z", "{feed}");
    assert_eq!(feed["items"][0]["date_modified"], "2025-11-03T10:00:00.000Z", "{feed}");
    // Atom, read by a feed parser.
    let atom = http().get(url("/feeds/dated/?order=created&format=atom")).send().await.expect("GET");
    let parsed = feed_rs::parser::parse(atom.bytes().await.expect("a body").as_ref()).expect("an Atom document");
    let entry = parsed.entries.iter().find(|e| e.id == "urn:dated").expect("the dated entry");
    assert_eq!(entry.published.map(|t| t.to_rfc3339()), Some("2025-11-02T09:30:00+00:00".into()));
    assert_eq!(entry.updated.map(|t| t.to_rfc3339()), Some("2025-11-03T10:00:00+00:00".into()));
    // The page.
    let page = http().get(url("/?feed=dated&order=created")).send().await.expect("GET").text().await.expect("HTML");
    let li =
        page.split("<li class=\"item").find(|li| li.contains("Written in November")).expect("the item on the page");
    assert!(li.contains("datetime=\"2025-11-02T09:30:00.000Z\""), "{li}");
    assert!(li.contains("updated <time datetime=\"2025-11-03T10:00:00.000Z\""), "{li}");
    assert!(!li.contains("minute"), "not shown as just published: {li}");
}
