//! End to end, imports checked against an independent parser: every document of
//! `tests/corpus/` (feeds that ship with Python's feedparser and with feed-rs, and a few of
//! our own; see `tests/corpus/NOTICE`) is served by a web server the test controls and
//! imported as the source of a feed of its own, by one smartfeeds serving HTTP. Each entry
//! of our Atom answer, read by feedparser (`tests/corpus/read.py`, Debian
//! python3-feedparser), is compared with what feedparser reads from the source document:
//! id, title, link, authors (name and email), categories, published and updated. No entry
//! is lost or doubled, every entry has a title and an updated time, and a document
//! feedparser reads as malformed is refused with a clear error in the log.
//!
//! Where we differ from feedparser on purpose, the rule is the README's ("Sources"), and
//! the comparison below says which.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use testkit::Shared;
use testkit::fixture::remove_on_exit;
use testkit::source_server::{Doc, SourceServer};
use testkit::standalone::Standalone;

/// One corpus document, served and imported.
struct Served {
    /// Its path under `tests/corpus/`.
    file: String,
    /// The feed it is the source of.
    feed: String,
    /// Where it is served.
    url: String,
    /// What feedparser reads from it.
    read: Value,
}

struct Corpus {
    sf: Standalone,
    web: SourceServer,
    docs: Vec<Served>,
    /// Before the first fetch: entries without a time are updated after it.
    started: chrono::DateTime<chrono::Utc>,
    _cleanup: Option<Child>,
}

static SHARED: Shared<Corpus> = Shared::new();

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// `read.py URL -` on `bytes`: what feedparser reads (see the script).
fn feedparser(url: &str, bytes: &[u8]) -> Value {
    use std::io::Write;
    let python = Path::new("/usr/bin/python3");
    assert!(python.exists(), "/usr/bin/python3 is missing: install the Debian packages python3 and python3-feedparser");
    let mut child = Command::new(python)
        .arg(corpus_dir().join("read.py"))
        .args([url, "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child.stdin.take().expect("stdin").write_all(bytes).expect("the document written to read.py");
    let out = child.wait_with_output().expect("read.py ends");
    assert!(
        out.status.success(),
        "read.py failed (is the Debian package python3-feedparser installed?): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("read.py prints JSON")
}

fn corpus() -> &'static Corpus {
    SHARED.get_or_start(|| {
        let web = SourceServer::start();
        let mut files: Vec<PathBuf> = ["feed-rs", "feedparser", "own"]
            .iter()
            .flat_map(|d| std::fs::read_dir(corpus_dir().join(d)).expect("the corpus").map(|e| e.unwrap().path()))
            .filter(|p| p.extension().is_some_and(|x| x == "xml" || x == "json"))
            .collect();
        files.sort();
        let mut docs = Vec::new();
        let mut tables = String::from("[sources]\nallow_private = true\ntimeout = 5\n");
        for (n, path) in files.iter().enumerate() {
            let file = path.strip_prefix(corpus_dir()).unwrap().to_string_lossy().into_owned();
            let body = std::fs::read(path).expect("a corpus document");
            let json = path.extension().is_some_and(|x| x == "json");
            let served = format!("/corpus/{file}");
            web.set(
                &served,
                Doc {
                    status: 200,
                    body: body.clone(),
                    content_type: if json { "application/feed+json" } else { "application/xml" }.into(),
                    ..Doc::default()
                },
            );
            let url = web.url(&served);
            let feed = format!("c{n:02}");
            tables.push_str(&format!("[[feeds]]\nname = \"{feed}\"\nsource = \"{url}\"\nsource_interval = 3600\n"));
            docs.push(Served { file, feed, read: feedparser(&url, &body), url });
        }
        let started = chrono::Utc::now();
        let sf = Standalone::start("", &[], &tables);
        let cleanup = remove_on_exit(&[sf.dir()]);
        Corpus { sf, web, docs, started, _cleanup: cleanup }
    })
}

fn http() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("a client")
}

/// The view's total, once the feed's first fetch is done (20 s at most).
async fn imported(feed: &str, want: u64) -> u64 {
    let url = format!("{}/feeds/{feed}/", corpus().sf.base);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let doc: Value =
            http().get(&url).header("accept", "application/json").send().await.unwrap().json().await.unwrap();
        let total = doc["totalItems"].as_u64().unwrap_or(0);
        if total >= want || Instant::now() > deadline {
            return total;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn s(v: &Value) -> Option<String> {
    v.as_str().map(|t| t.split_whitespace().collect::<Vec<_>>().join(" ")).filter(|t| !t.is_empty())
}

/// The authors as (name, email).
fn authors(e: &Value) -> Vec<(Option<String>, Option<String>)> {
    e["authors"].as_array().into_iter().flatten().map(|a| (s(&a["name"]), s(&a["email"]))).collect()
}

fn categories(e: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in e["categories"].as_array().into_iter().flatten().filter_map(s) {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// The entries as compared: ids relative to the document they were read from as written
/// (feedparser resolves an Atom id as a URL against the document's, and the two documents
/// are at different URLs), links as URLs ("https://x.example" and "https://x.example/" are
/// one).
/// Relative links are kept as written (README, "Sources"), so they are compared as the
/// source wrote them: relative to the document or to its host.
fn normalized(entries: &[Value], url: &str) -> Vec<Value> {
    let dir = &url[..url.rfind('/').map_or(0, |i| i + 1)];
    let origin = &url[..url.match_indices('/').nth(2).map_or(url.len(), |(i, _)| i)];
    let relative =
        |u: String| u.strip_prefix(dir).or_else(|| u.strip_prefix(origin)).map_or_else(|| u.clone(), str::to_string);
    entries
        .iter()
        .map(|e| {
            let mut e = e.clone();
            if let Some(id) = s(&e["id"]) {
                e["id"] = Value::String(relative(id));
            }
            if let Some(link) = s(&e["link"]) {
                let link = url::Url::parse(&link).map_or(link, |l| l.to_string());
                e["link"] = Value::String(relative(link));
            }
            e
        })
        .collect()
}

/// Which of `ours` (not yet taken) is the source's entry `n`: the same id, else its id is
/// the source's link, else the same link and title, else the same title; an entry with none
/// of them is at its place from the end (entries without a time are published in reverse
/// document order).
fn matching(n: usize, src: &[Value], ours: &[Value], taken: &[bool]) -> Option<usize> {
    let e = &src[n];
    let same = |a: &Value, b: &Value| s(a).is_some() && s(a) == s(b);
    let tests: [&dyn Fn(&Value) -> bool; 4] = [
        &|o| same(&o["id"], &e["id"]),
        &|o| same(&o["id"], &e["link"]),
        &|o| same(&o["link"], &e["link"]) && same(&o["title"], &e["title"]),
        &|o| s(&e["link"]).is_none() && same(&o["title"], &e["title"]),
    ];
    let found = tests.iter().find_map(|t| (0..ours.len()).find(|&i| !taken[i] && t(&ours[i])));
    let anonymous = s(&e["id"]).is_none() && s(&e["link"]).is_none() && s(&e["title"]).is_none();
    let place = (ours.len() + n + 1).checked_sub(src.len()).and_then(|_| ours.len().checked_sub(n + 1));
    found.or_else(|| {
        place.filter(|&i| anonymous && !taken[i] && s(&ours[i]["id"]).is_some_and(|id| id.starts_with("urn:sha256:")))
    })
}

/// The differences between the source's entry `src` and ours `o`, as feedparser reads them.
/// What the source document is, as far as the rules of the comparison go.
#[derive(Clone, Copy)]
struct Kind {
    /// RSS 1.0.
    rss1: bool,
    /// Atom 1.0: kept as written.
    atom: bool,
    /// Has `dc:author`, which feed-rs does not read.
    dc_author: bool,
    /// Has `dcterms:modified`, which feed-rs does not read.
    dcterms: bool,
}

fn differences(src: &Value, o: &Value, kind: Kind, started: &str, now: &str) -> Vec<String> {
    let Kind { rss1, atom, dc_author, dcterms } = kind;
    let mut out = Vec::new();
    let mut differ = |field: &str, theirs: String, ours: String| {
        out.push(format!("{field}: feedparser {theirs}, ours {ours}"));
    };
    // id: the source's, else a key of ours (its link, else a digest).
    // An RSS 1.0 item is keyed by its link, not its rdf:about (README, "Sources").
    let key_link = rss1 && s(&o["id"]).is_some() && s(&o["id"]) == s(&src["link"]);
    match s(&src["id"]) {
        Some(id) if s(&o["id"]).as_deref() != Some(id.as_str()) && !key_link => {
            differ("id", id, format!("{:?}", s(&o["id"])))
        }
        None if s(&o["id"]).is_none() => differ("id", "none".into(), "none".into()),
        _ => {}
    }
    // title: the source's, else one made from its text.
    match s(&src["title"]) {
        Some(t) if s(&o["title"]).as_deref() != Some(t.as_str()) => differ("title", t, format!("{:?}", s(&o["title"]))),
        None if s(&o["title"]).is_none() => differ("title", "none".into(), "none (every entry needs one)".into()),
        _ => {}
    }
    if s(&src["link"]).is_some() && s(&src["link"]) != s(&o["link"]) {
        differ("link", format!("{:?}", s(&src["link"])), format!("{:?}", s(&o["link"])));
    }
    // Authors: an address alone is also the name (Atom requires one).
    // Atom entries are kept as written (an author without a name too). feedparser cuts an
    // address whose top-level domain is longer than four letters (its own limit): ours is
    // the whole address.
    let want: Vec<_> =
        authors(src).into_iter().map(|(n, e)| (if atom { n } else { n.or_else(|| e.clone()) }, e)).collect();
    let cut = |w: &(Option<String>, Option<String>), g: &(Option<String>, Option<String>)| {
        w == g || matches!((&w.1, &g.1), (Some(a), Some(b)) if b.starts_with(a.as_str()) && b != a)
    };
    let same = want.len() == authors(o).len() && want.iter().zip(authors(o).iter()).all(|(w, g)| cut(w, g));
    // feed-rs does not read dc:author (README, "Sources").
    let unread = dc_author && authors(o).is_empty();
    if !same && !unread {
        differ("authors", format!("{want:?}"), format!("{:?}", authors(o)));
    }
    if categories(src) != categories(o) {
        differ("categories", format!("{:?}", categories(src)), format!("{:?}", categories(o)));
    }
    // dc:date is the published time (feedparser: updated) (README, "Sources").
    let dc_date =
        s(&src["published"]).is_none() && s(&src["updated"]).is_some() && s(&src["updated"]) == s(&o["published"]);
    if s(&src["published"]) != s(&o["published"]) && !dc_date {
        differ("published", format!("{:?}", s(&src["published"])), format!("{:?}", s(&o["published"])));
    }
    // updated: the source's, else its published time, else the time of the fetch.
    let updated = s(&o["updated"]);
    let fetched = updated.as_deref().is_some_and(|u| u >= started && u <= now);
    match s(&src["updated"]).or(s(&src["published"])) {
        Some(_) if dcterms && s(&src["published"]).is_none() && fetched => {}
        Some(u) if updated.as_deref() != Some(u.as_str()) => differ("updated", u, format!("{updated:?}")),
        None if !fetched => differ("updated", "none".into(), format!("{updated:?}, not the fetch's time")),
        _ => {}
    }
    out
}

#[tokio::test]
async fn every_entry_reads_as_feedparser_reads_it_from_the_source() {
    let c = corpus();
    let started = c.started.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let mut report = Vec::new();
    let mut compared = 0;
    for doc in c.docs.iter().filter(|d| d.read["bozo"] == false && d.read["version"] != "atom03") {
        let src = doc.read["entries"].as_array().expect("entries");
        let total = imported(&doc.feed, src.len() as u64).await;
        if total == 0 {
            let why: Vec<String> =
                c.sf.log().lines().filter(|l| l.contains(&format!("feed={} ", doc.feed))).map(str::to_string).collect();
            report.push(format!("{}: {} entries in the source, none imported: {why:?}", doc.file, src.len()));
            continue;
        }
        let view = format!("{}/feeds/{}/?order=created&max=100", c.sf.base, doc.feed);
        let answer = http().get(&view).header("accept", "application/atom+xml").send().await;
        let atom = answer.and_then(|a| a.error_for_status()).expect("our Atom answer").bytes().await.expect("its body");
        let ours = feedparser(&view, &atom);
        assert_eq!(ours["bozo"], false, "{}: our Atom answer reads as malformed: {ours}", doc.file);
        let ours = normalized(ours["entries"].as_array().expect("entries"), &view);
        let src = &normalized(src, &doc.url);
        let text = String::from_utf8_lossy(&std::fs::read(corpus_dir().join(&doc.file)).unwrap()).into_owned();
        let kind = Kind {
            rss1: doc.read["version"] == "rss10",
            atom: doc.read["version"] == "atom10" && text.contains("<feed"),
            dc_author: text.contains("<dc:author"),
            dcterms: text.contains("<dcterms:modified"),
        };
        if total != src.len() as u64 || ours.len() != src.len() {
            report.push(format!(
                "{}: {} entries in the source, {total} imported, {} in our answer",
                doc.file,
                src.len(),
                ours.len()
            ));
        }
        let now = (chrono::Utc::now() + chrono::Duration::seconds(1)).format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let mut taken = vec![false; ours.len()];
        for (n, e) in src.iter().enumerate() {
            let Some(i) = matching(n, src, &ours, &taken) else {
                report.push(format!("{}: entry {n} ({e}) lost; ours: {ours:?}", doc.file));
                continue;
            };
            taken[i] = true;
            compared += 1;
            for d in differences(e, &ours[i], kind, &started, &now) {
                report.push(format!("{}: entry {n} ({:?}): {d}", doc.file, s(&e["id"]).or(s(&e["title"]))));
            }
        }
        for (i, _) in taken.iter().enumerate().filter(|(_, t)| !**t) {
            report.push(format!("{}: our entry {:?} is not in the source", doc.file, s(&ours[i]["id"])));
        }
    }
    assert!(report.is_empty(), "{} differences:\n{}", report.len(), report.join("\n"));
    assert!(compared >= 60, "only {compared} entries compared");
    assert!(!c.sf.log().contains("panicked"), "{}", c.sf.log());
}

/// The line logging the failed fetch of `doc` (20 s at most).
async fn logged_failure(doc: &Served) -> String {
    let c = corpus();
    let needle = format!("feed={} ", doc.feed);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let log = c.sf.log();
        if let Some(line) = log.lines().find(|l| l.contains(&needle) && l.contains("failed")) {
            return line.to_string();
        }
        assert!(Instant::now() < deadline, "{}: no error logged for {}:\n{log}", doc.file, doc.url);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn atom_0_3_is_refused_with_a_clear_logged_error() {
    let c = corpus();
    let old: Vec<&Served> = c.docs.iter().filter(|d| d.read["version"] == "atom03").collect();
    assert!(!old.is_empty(), "the corpus has an Atom 0.3 document");
    for doc in old {
        let line = logged_failure(doc).await;
        assert!(line.contains("Atom 0.3") && line.contains("is not read"), "{}: {line}", doc.file);
        assert_eq!(imported(&doc.feed, 0).await, 0, "{}: nothing imported", doc.file);
    }
}

#[tokio::test]
async fn a_document_feedparser_reads_as_malformed_is_refused_with_a_clear_logged_error() {
    let c = corpus();
    let bozo: Vec<&Served> = c.docs.iter().filter(|d| d.read["bozo"] == true).collect();
    assert!(bozo.len() >= 4, "the corpus has malformed documents");
    for doc in bozo {
        let line = logged_failure(doc).await;
        assert!(line.contains("not well-formed XML") && line.contains("line "), "{}: {line}", doc.file);
        assert_eq!(imported(&doc.feed, 0).await, 0, "{}: nothing imported", doc.file);
    }
}

#[tokio::test]
async fn fetching_entries_without_dates_again_changes_nothing() {
    let c = corpus();
    let doc = c.docs.iter().find(|d| d.file.ends_with("rss_0.91_spec_1.xml")).expect("a document without dates");
    let n = doc.read["entries"].as_array().map_or(0, Vec::len) as u64;
    assert_eq!(imported(&doc.feed, n).await, n, "{}", doc.file);
    let path = doc.url.strip_prefix(&c.web.base).expect("served here");
    let view = format!("{}/feeds/{}/?order=modified", c.sf.base, doc.feed);
    let get = || async { http().get(&view).send().await.unwrap().json::<Value>().await.unwrap()["items"].clone() };
    let before = get().await;
    let hits = c.web.hits(path).len();
    // A second later, so that the time of the fetch differs.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let ping = http()
        .post(format!("{}/hub", c.sf.base))
        .form(&[("hub.mode", "publish"), ("hub.url", doc.url.as_str())])
        .send()
        .await
        .expect("POST /hub");
    assert_eq!(ping.status(), 204);
    c.web.wait_hits(path, hits + 1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(get().await, before, "the same entries fetched again: no update");
}
