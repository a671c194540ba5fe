//! End to end, property-based: `schemathesis` (PyPI) reads the real service's
//! `/openapi.json`, generates requests for every documented operation (valid ones and
//! invalid ones) and sends them to the real binary, as a publisher (the bot's token). It
//! fails on any 5xx, any answer that breaks its documented status, content type, headers or
//! schema, any answer slower than 5 s (a hang), any refusal of an invalid request that is
//! not a 4xx, and any answer given without the token that should have needed it.
//! `SMARTFEEDS_SCHEMATHESIS_EXAMPLES` sets the examples asked per operation (default 50);
//! `scripts/schemathesis.sh` runs it with 2,000. Operations without parameters (`/health`,
//! `/feeds/`, `/openapi.json`) have one request to make.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use testkit::dns::Dns;
use testkit::http::{BOT, put_entry};
use testkit::pubsub::entry;
use testkit::standalone::Standalone;

/// `schemathesis` from the Python environment `scripts/test.sh` makes (`target/venv`), or
/// from PATH.
fn schemathesis() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/venv/bin/schemathesis");
    if venv.exists() {
        return venv;
    }
    match Command::new("which").arg("schemathesis").output() {
        Ok(o) if o.status.success() => PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()),
        _ => panic!("schemathesis is missing: install schemathesis (PyPI; scripts/test.sh puts it in target/venv)"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_requests_get_no_5xx_and_only_documented_answers() {
    let st = schemathesis();
    let examples: u32 =
        std::env::var("SMARTFEEDS_SCHEMATHESIS_EXAMPLES").ok().and_then(|n| n.parse().ok()).unwrap_or(50);
    // Callback names are asked of a resolver that knows none (no lookup leaves the machine);
    // long-polls are held 1 s at most, so a generated `timeout` cannot pass for a hang.
    let dns = Dns::start().await;
    let sf = Standalone::start(
        "max_timeout = 1\narchive_page = 2\n",
        &["news", "empty"],
        &format!("[outbound]\nnameservers = [\"{}\"]\n", dns.addr),
    );
    let http = reqwest::Client::new();
    for i in 0..5 {
        let e = entry(&format!("urn:news:{i}"), &format!("Entry {i}"), Some("ann"), &["a"]);
        let res = put_entry(&http, &sf.base, "news", &format!("n{i}"), BOT, &e).await.expect("PUT");
        assert_eq!(res.status(), 200);
    }

    // Path parameters name the feeds and items that exist most of the time, anything else
    // the rest of it. An Atom body is any string to the schema, so there is no invalid one
    // to generate (schemathesis would spend seconds per request failing to): publishes get
    // schema-valid requests only, which the service still mostly refuses (not Atom).
    let config = sf.dir().join("schemathesis.toml");
    std::fs::write(
        &config,
        "[dictionaries.feeds]\nvalues = [\"news\", \"empty\"]\n\
         [dictionaries.items]\nvalues = [\"n0\", \"n1\", \"n2\", \"n3\", \"n4\"]\n\
         [parameters]\n\"path.feed\" = { dictionary = \"feeds\", probability = 0.7 }\n\
         \"path.id\" = { dictionary = \"items\", probability = 0.5 }\n\
         [[operations]]\ninclude-operation-id-regex = \"^(put_item|post_item)$\"\n\
         generation.mode = \"positive\"\n",
    )
    .unwrap();
    // One schemathesis run per operation: in one run over all of them, schemathesis ends
    // some operations' generation far short of the examples asked (8 of 2,000 for the
    // retraction), each on its own reaches them.
    let api: serde_json::Value =
        http.get(format!("{}/openapi.json", sf.base)).send().await.unwrap().json().await.unwrap();
    println!("schemathesis: requests and answers per operation ({examples} examples asked per operation):");
    let mut total = 0;
    // The description itself is what schemathesis reads, not an operation it tests.
    for (path, methods) in api["paths"].as_object().unwrap().iter().filter(|(p, _)| *p != "/openapi.json") {
        for (method, operation) in methods.as_object().unwrap() {
            let label = format!("{} {path}", method.to_uppercase());
            let id = operation["operationId"].as_str().expect("every operation has an id").to_string();
            let report = sf.dir().join("report").join(&id);
            let out = run(&st, &config, &sf, &id, examples, &report).await;
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "schemathesis found failures in {label}:\n{stdout}\n{}\nthe service's log:\n{}",
                String::from_utf8_lossy(&out.stderr),
                tail(&sf.log())
            );
            assert!(!sf.log().contains("panicked"), "{}", tail(&sf.log()));
            // What was sent, from schemathesis' own record: none answered 5xx, and an
            // operation that takes anything got the examples asked.
            let (requests, statuses) = operations(&report).remove(&label).unwrap_or_default();
            println!("  {label:32} {requests:6}  {statuses:?}");
            total += requests;
            assert!(statuses.keys().all(|s| *s < 500), "{label}: {statuses:?}");
            let takes_input = operation["parameters"].as_array().is_some_and(|p| !p.is_empty())
                || operation.get("requestBody").is_some();
            let wanted = if takes_input { examples as usize } else { 1 };
            assert!(requests >= wanted, "{label}: {requests} requests, {wanted} wanted:\n{stdout}");
        }
    }
    println!("  {:32} {total:6}", "all");
}

/// Runs schemathesis on the operation `id` of the service `sf`, its NDJSON report in `report`.
async fn run(
    st: &Path,
    config: &Path,
    sf: &Standalone,
    id: &str,
    examples: u32,
    report: &Path,
) -> std::process::Output {
    let mut cmd = Command::new(st);
    cmd.arg("--config-file")
        .arg(config)
        .arg("run")
        .arg(format!("{}/openapi.json", sf.base))
        .args(["--include-operation-id", id])
        // Not `positive_data_acceptance`: a schema cannot say that a topic must be a feed URL
        // of this service, a body one Atom entry, an `id:` an existing item.
        .args(["--checks", "all", "--exclude-checks", "positive_data_acceptance"])
        .args(["--max-examples", &examples.to_string(), "--seed", "1"])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["--request-timeout", "10", "--max-response-time", "5"])
        .args(["--suppress-health-check", "all", "--generation-database", "none", "--no-color"])
        .args(["-H", &format!("Authorization: Bearer {BOT}")])
        .args(["--report", "ndjson", "--report-dir"])
        .arg(report)
        .current_dir(sf.dir());
    tokio::task::spawn_blocking(move || cmd.output().expect("schemathesis runs")).await.unwrap()
}

/// Per operation (`METHOD /path`), the requests sent and the statuses answered, from the
/// NDJSON report in `dir`.
fn operations(dir: &Path) -> BTreeMap<String, (usize, BTreeMap<u16, usize>)> {
    let mut ops: BTreeMap<String, (usize, BTreeMap<u16, usize>)> = BTreeMap::new();
    for file in std::fs::read_dir(dir).expect("a report") {
        let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
        for line in text.lines() {
            let event: serde_json::Value = serde_json::from_str(line).expect("NDJSON");
            let recorder = &event["ScenarioFinished"]["recorder"];
            let Some(label) = recorder["label"].as_str() else { continue };
            let entry = ops.entry(label.to_string()).or_default();
            for interaction in recorder["interactions"].as_object().into_iter().flat_map(|m| m.values()) {
                entry.0 += 1;
                if let Some(status) = interaction["response"]["status_code"].as_u64() {
                    *entry.1.entry(status as u16).or_default() += 1;
                }
            }
        }
    }
    ops
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}
