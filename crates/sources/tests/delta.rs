//! The delta of SPEC §13 through the core's `Service::import`, on the memory store: what a
//! fetch publishes, updates, leaves alone and retracts, and the order items enter the feed.

use feed::policy::{FeedPolicy, Policy};
use feed::ports::Store;
use feed::service::{Imported, Service};
use feed::{Order, Payload};
use smartfeeds_sources::document::parse;
use std::sync::Arc;
use testkit::memory_store::MemoryStore;

fn service() -> Service<MemoryStore> {
    let mut policy = Policy::default();
    policy.feeds.insert("planet".into(), FeedPolicy { order: Order::NEWEST_FIRST, ..FeedPolicy::default() });
    Service::new(MemoryStore::new(None), Arc::new(policy), Arc::new(|| 1_700_000_000_000))
}

fn atom(entries: &str) -> String {
    format!(
        "<feed xmlns='http://www.w3.org/2005/Atom' xmlns:at='http://purl.org/atompub/tombstones/1.0'>\
         <title>t</title>{entries}</feed>"
    )
}

fn entry(id: u32, title: &str) -> String {
    format!("<entry><id>urn:e:{id}</id><title>{title}</title><updated>2024-01-0{id}T00:00:00Z</updated></entry>")
}

async fn import(svc: &Service<MemoryStore>, doc: &str) -> Imported {
    svc.import("planet", parse(doc.as_bytes()).unwrap().entries).await.unwrap()
}

/// Item ids of the feed in created order, and their payloads.
async fn items(svc: &Service<MemoryStore>) -> Vec<(String, Payload)> {
    svc.store()
        .read(|tx| {
            let feed = tx.feed("planet")?.unwrap();
            let filter = feed::Filter::default();
            let scope = feed::ports::Scope { feed: feed.id, by: feed::OrderBy::Created, filter: &filter };
            let all = tx.scan(scope, feed::ports::Range { limit: 1000, ..Default::default() })?;
            Ok(all.into_iter().map(|i| (i.id, i.payload)).collect())
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn a_fetch_publishes_new_entries_oldest_first_updates_edited_ones_and_retracts_deleted_ones() {
    let svc = service();
    svc.init().await.unwrap();
    // Newest first in the document, as feeds are written.
    let first = atom(&[entry(3, "three"), entry(2, "two"), entry(1, "one")].concat());
    assert_eq!(import(&svc, &first).await, Imported { published: 3, ..Imported::default() });
    let ids: Vec<String> = items(&svc).await.into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, [1, 2, 3].map(|n| smartfeeds_sources::item_id(&format!("urn:e:{n}"))));

    // The same document again changes nothing.
    assert_eq!(import(&svc, &first).await, Imported { unchanged: 3, ..Imported::default() });

    // An edit updates; a new entry is published; a deleted one is retracted.
    let second = atom(
        &[
            entry(4, "four"),
            entry(3, "three, edited"),
            entry(2, "two"),
            "<at:deleted-entry ref='urn:e:1' when='2024-01-05T00:00:00Z'/>".to_string(),
        ]
        .concat(),
    );
    assert_eq!(
        import(&svc, &second).await,
        Imported { published: 1, updated: 1, unchanged: 1, retracted: 1, too_big: 0 }
    );
    let now = items(&svc).await;
    assert_eq!(now.len(), 4, "entries are never removed");
    assert!(matches!(&now[0].1, Payload::Tombstone { atom_ref, .. } if atom_ref == "urn:e:1"));
    assert!(matches!(&now[2].1, Payload::Entry(xml) if xml.contains("three, edited")));
    // A tombstone deleted again, and an unknown deleted id, change nothing.
    let third = atom("<at:deleted-entry ref='urn:e:1' when='x'/><at:deleted-entry ref='urn:e:9' when='x'/>");
    assert_eq!(import(&svc, &third).await, Imported { unchanged: 2, ..Imported::default() });
}

#[tokio::test]
async fn entries_over_the_payload_limit_are_left_out() {
    let svc = service();
    svc.init().await.unwrap();
    let big = format!("<entry><id>urn:big</id><content>{}</content></entry>", "x".repeat(70_000));
    let got = import(&svc, &atom(&[big, entry(1, "small")].concat())).await;
    assert_eq!(got, Imported { published: 1, too_big: 1, ..Imported::default() });
}
