//! End to end, the HTTP face as a web developer and a feed reader meet it: the OpenAPI
//! description at `BASE/openapi.json` is valid OpenAPI 3.1 (checked by
//! `openapi-spec-validator`, from PyPI) and every documented endpoint's real answers match
//! their documented schemas; JSON Feed answers are read by a real feed reader library
//! (feed-rs) with the same items, order and next links as the JSON answer.

use reqwest::StatusCode;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use testkit::Shared;
use testkit::http::{BOT, HttpFixture, http_table, put_entry};
use testkit::smartfeeds::titled_feed;

static SHARED: Shared<HttpFixture> = Shared::new();

fn shared() -> &'static HttpFixture {
    SHARED.get_or_start(|| {
        HttpFixture::start(|port| {
            http_table(port, "archive_page = 3\n", &["bot"]) + &titled_feed("described", "Described")
        })
    })
}

fn http() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("a client")
}

fn entry(n: usize) -> String {
    format!(
        r#"<entry xmlns="http://www.w3.org/2005/Atom"><id>urn:described:{n}</id><title>Entry {n}</title><author><name>ann</name></author><category term="news"/><content type="html">&lt;p&gt;Body {n}&lt;/p&gt;</content><link href="https://example.org/{n}"/></entry>"#
    )
}

/// Publishes `n` entries once per test binary.
async fn publish(n: usize) -> Vec<Value> {
    let s = shared();
    let mut answers = Vec::new();
    for i in 0..n {
        let res = put_entry(&http(), &s.base, "described", &format!("e{i}"), BOT, &entry(i)).await.expect("PUT");
        assert_eq!(res.status(), StatusCode::OK);
        answers.push(res.json().await.expect("JSON"));
    }
    answers
}

/// A tool from the Python environment `scripts/test.sh` makes (`target/venv`), or from PATH.
fn python_tool(name: &str, package: &str) -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/venv/bin").join(name);
    if venv.exists() {
        return venv;
    }
    match Command::new("which").arg(name).output() {
        Ok(o) if o.status.success() => PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()),
        _ => panic!("{name} is missing: install {package} (PyPI; scripts/test.sh puts it in target/venv)"),
    }
}

/// The schema `#/components/schemas/NAME` of `api`, as a validator (refs resolved in `api`).
fn validator(api: &Value, name: &str) -> jsonschema::Validator {
    let mut schema = serde_json::json!({ "$ref": format!("#/components/schemas/{name}") });
    schema["components"] = api["components"].clone();
    jsonschema::draft202012::new(&schema).unwrap_or_else(|e| panic!("schema {name}: {e}"))
}

/// The schema a documented answer names, by path, method, status and content type.
fn documented(api: &Value, path: &str, method: &str, status: &str, ctype: &str) -> String {
    let schema = &api["paths"][path][method]["responses"][status]["content"][ctype]["schema"]["$ref"];
    let name = schema.as_str().unwrap_or_else(|| panic!("{method} {path} {status} {ctype} names no schema"));
    name.rsplit('/').next().unwrap().to_string()
}

fn check(api: &Value, answer: &Value, schema: &str, what: &str) {
    let v = validator(api, schema);
    let errors: Vec<String> = v.iter_errors(answer).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{what} does not match {schema}: {errors:?}\n{answer}");
}

#[tokio::test]
async fn the_openapi_description_is_valid_and_real_answers_match_it() {
    let s = shared();
    let published = publish(5).await;
    let res = http().get(format!("{}/openapi.json", s.base)).send().await.expect("GET openapi.json");
    assert_eq!(res.status(), StatusCode::OK);
    let text = res.text().await.unwrap();
    let api: Value = serde_json::from_str(&text).expect("JSON");
    assert!(api["openapi"].as_str().unwrap().starts_with("3.1"), "OpenAPI 3.1");
    assert_eq!(api["servers"][0]["url"], s.base.as_str());

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, &text).unwrap();
    let validator_bin = python_tool("openapi-spec-validator", "openapi-spec-validator");
    let out = Command::new(&validator_bin).arg(&file).output().expect("openapi-spec-validator runs");
    assert!(
        out.status.success(),
        "openapi-spec-validator refuses the description:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Every documented endpoint, answered for real, against its documented schema.
    for p in &published {
        check(&api, p, &documented(&api, "/feeds/{feed}/items/{id}", "put", "200", "application/json"), "a PUT");
    }
    let get = |path: String, accept: &'static str| async move {
        let res = http().get(path).header("accept", accept).send().await.expect("GET");
        let status = res.status();
        (status, res.json::<Value>().await.expect("JSON"))
    };
    let (st, health) = get(format!("{}/health", s.base), "application/json").await;
    assert_eq!(st, StatusCode::OK);
    check(&api, &health, &documented(&api, "/health", "get", "200", "application/json"), "/health");
    let (_, list) = get(format!("{}/feeds/", s.base), "application/json").await;
    check(&api, &list, &documented(&api, "/feeds/", "get", "200", "application/json"), "the feed list");
    let (_, page) = get(format!("{}/feeds/described/?max=2&timeout=0", s.base), "application/json").await;
    check(&api, &page, &documented(&api, "/feeds/{feed}/", "get", "200", "application/json"), "a page");
    let (_, jf) = get(format!("{}/feeds/described/?max=2&timeout=0", s.base), "application/feed+json").await;
    check(&api, &jf, &documented(&api, "/feeds/{feed}/", "get", "200", "application/feed+json"), "a JSON Feed page");
    let (_, item) = get(format!("{}/feeds/described/items/e1", s.base), "application/json").await;
    check(&api, &item, &documented(&api, "/feeds/{feed}/items/{id}", "get", "200", "application/json"), "an item");
    let (_, archive) = get(format!("{}/feeds/described/archive/1", s.base), "application/feed+json").await;
    check(
        &api,
        &archive,
        &documented(&api, "/feeds/{feed}/archive/{k}", "get", "200", "application/feed+json"),
        "an archive document",
    );
    // Errors, documented by status.
    let (st, missing) = get(format!("{}/feeds/nowhere/", s.base), "application/json").await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    check(&api, &missing, &documented(&api, "/feeds/{feed}/", "get", "404", "application/json"), "a 404");
    let (st, bad) = get(format!("{}/feeds/described/?max=lots", s.base), "application/json").await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    check(&api, &bad, &documented(&api, "/feeds/{feed}/", "get", "400", "application/json"), "a 400");
    let res = http()
        .post(format!("{}/feeds/described/", s.base))
        .bearer_auth(BOT)
        .header("content-type", "application/atom+xml")
        .body(entry(99))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let created: Value = res.json().await.unwrap();
    check(&api, &created, &documented(&api, "/feeds/{feed}/", "post", "201", "application/json"), "a POST");
    let res = http().delete(format!("{}/feeds/described/items/e0", s.base)).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    let refused: Value = res.json().await.unwrap();
    check(&api, &refused, &documented(&api, "/feeds/{feed}/items/{id}", "delete", "401", "application/json"), "a 401");
}

#[tokio::test]
async fn a_feed_reader_reads_the_json_feed_like_the_json_answer() {
    let s = shared();
    publish(5).await;
    let url = format!("{}/feeds/described/?order=created&max=3&timeout=0", s.base);
    let json: Value = http().get(&url).header("accept", "application/json").send().await.unwrap().json().await.unwrap();
    let res = http().get(format!("{url}&format=json-feed")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(res.headers()["content-type"].to_str().unwrap().starts_with("application/feed+json"));
    let body = res.text().await.unwrap();
    let doc: Value = serde_json::from_str(&body).unwrap();
    // The same page as the JSON answer: items, cursors, next link.
    let cursors = |items: &Value, key: &dyn Fn(&Value) -> Value| -> Vec<Value> {
        items.as_array().unwrap().iter().map(key).collect()
    };
    assert_eq!(
        cursors(&doc["items"], &|i| i["_smartfeeds"]["cursor"].clone()),
        cursors(&json["items"], &|i| i["cursor"].clone())
    );
    assert_eq!(doc["next_url"].as_str().unwrap(), format!("{}&format=json-feed", json["next"].as_str().unwrap()));
    assert_eq!(doc["_smartfeeds"]["total"], json["totalItems"]);
    assert_eq!(doc["_smartfeeds"]["last_cursor"], json["last_cursor"]);

    // A feed reader library reads it (feed-rs reads JSON Feed as it reads Atom and RSS):
    // the titles in the view's order, links, content, authors, tags.
    let parsed = feed_rs::parser::parse(body.as_bytes()).expect("feed-rs parses the JSON Feed");
    assert_eq!(parsed.feed_type, feed_rs::model::FeedType::JSON);
    assert_eq!(parsed.title.as_ref().map(|t| t.content.as_str()), Some("Described"));
    let titles: Vec<Value> =
        parsed.entries.iter().map(|e| Value::from(e.title.as_ref().map(|t| t.content.clone()))).collect();
    let want_titles: Vec<Value> = json["items"].as_array().unwrap().iter().map(|i| i["title"].clone()).collect();
    assert_eq!(titles, want_titles);
    let first = &parsed.entries[0];
    assert_eq!(first.id, "urn:described:0");
    assert_eq!(first.links.first().map(|l| l.href.as_str()), Some("https://example.org/0"));
    assert_eq!(first.authors.first().map(|a| a.name.as_str()), Some("ann"));
    assert_eq!(first.categories.first().map(|c| c.term.as_str()), Some("news"));
    let content = first.content.as_ref().and_then(|c| c.body.clone()).unwrap_or_default();
    assert!(content.contains("Body 0"), "{content}");
    assert!(first.published.is_some() && first.updated.is_some());

    // Archives too, with RFC 5005's relations kept.
    let archive: Value = http()
        .get(format!("{}/feeds/described/archive/?format=json-feed", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(archive["version"], "https://jsonfeed.org/version/1.1");
    let links = &archive["_smartfeeds"]["links"];
    assert!(links["prev-archive"].as_str().unwrap().ends_with("format=json-feed"), "{archive}");
}
