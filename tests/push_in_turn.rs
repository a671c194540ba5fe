//! Fan-out in commit order when the store fails for a while (one process, as on SQLite; here
//! the real notifier and change sink over the in-memory store, whose reads fail on demand):
//! a change whose subscribers cannot be read is asked about again until they can, the
//! changes after it wait, and a receipt queued behind them reaches the link only after
//! their pushes.

use feed::ports::{ReadTx, Store, StoreError, WriteTx};
use feed::service::Service;
use feed::{Entry, FeedError, Receipt, ToPush};
use smartfeeds::config::Config;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use testkit::memory_store::MemoryStore;
use tokio::sync::{mpsc, watch};
use xmpp::multicast::{LinkMulticast, Outgoing};
use xmpp::notify::{Notifier, change_sink};
use xmpp::stanza_parts::to_xml;

/// The in-memory store, whose reads fail as a database's do while it restarts, while
/// `failing` is set.
#[derive(Clone)]
struct Flaky {
    inner: MemoryStore,
    failing: Arc<AtomicBool>,
}

impl Store for Flaky {
    fn read<T, F>(&self, f: F) -> impl Future<Output = Result<T, FeedError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&dyn ReadTx) -> Result<T, FeedError> + Send + 'static,
    {
        let (inner, failing) = (self.inner.clone(), self.failing.load(Ordering::SeqCst));
        async move {
            if failing {
                return Err(
                    StoreError::Busy("terminating connection due to administrator command (57P01)".into()).into()
                );
            }
            inner.read(f).await
        }
    }

    fn write<T, F>(&self, f: F) -> impl Future<Output = Result<T, FeedError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn WriteTx) -> Result<T, FeedError> + Send + 'static,
    {
        self.inner.write(f)
    }
}

const ENTRY: &str = "<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:x</id><title>x</title></entry>";

/// The item id of a push as the link would write it.
fn pushed_item(o: &Outgoing) -> String {
    let Outgoing::Single(push) = o else { panic!("one push per subscriber, got {o:?}") };
    let xml = to_xml(push).expect("a push encodes");
    let el: minidom::Element = xml.parse().expect("the push is XML");
    let ns = "http://jabber.org/protocol/pubsub#event";
    let item = el.get_child("event", ns).and_then(|e| e.get_child("items", ns)).and_then(|i| i.get_child("item", ns));
    item.and_then(|i| i.attr("id")).unwrap_or_else(|| panic!("an item in {xml}")).to_string()
}

#[tokio::test]
async fn a_change_whose_subscribers_cannot_be_read_is_pushed_when_they_can_and_never_overtaken() {
    let config = Config::parse(
        r#"[component]
jid = "feeds.localhost"
secret = "s"
[[feeds]]
name = "f"
publishers = ["bot@localhost"]
"#,
    )
    .unwrap();
    let metrics = Arc::new(metrics::Metrics::new());
    let (changes_tx, changes) = mpsc::channel(config.push.backlog);
    let failing = Arc::new(AtomicBool::new(false));
    let inner = MemoryStore::new(Some(change_sink(changes_tx.clone(), metrics.clone())));
    let store = Flaky { inner, failing: failing.clone() };
    let svc = Service::new(store, Arc::new(config.policy()), Arc::new(|| 1_700_000_000_000));
    svc.init().await.unwrap();
    svc.subscribe("alice@localhost", "f?order=created", "alice@localhost").await.unwrap();

    let me: jid::Jid = "feeds.localhost".parse().unwrap();
    let multicast = Arc::new(LinkMulticast::new(false, me.clone(), "localhost".into()));
    let notifier = Notifier::new(svc.clone(), me, metrics, multicast);
    let (out_tx, mut out) = mpsc::channel(64);
    let (_service_tx, service) = mpsc::unbounded_channel();
    let (_stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move { notifier.run(changes, service, out_tx, stop).await });

    // The database goes away; three changes commit (their writes are done), and a receipt
    // is queued behind them.
    failing.store(true, Ordering::SeqCst);
    for id in ["i0", "i1", "i2"] {
        let entry = Entry { xml: ENTRY.into(), atom_id: Some("urn:x".into()), author: None, categories: Vec::new() };
        svc.publish("bot@localhost", "f", Some(id.into()), entry).await.unwrap();
    }
    let (signed_tx, mut signed) = mpsc::unbounded_channel();
    changes_tx.send(ToPush::Receipt(Receipt::new(move || _ = signed_tx.send(())))).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(out.try_recv().is_err(), "nothing goes out while the first change's subscribers cannot be read");

    // It comes back: the three changes are pushed in commit order, then the receipt.
    failing.store(false, Ordering::SeqCst);
    let mut pushed = Vec::new();
    let receipt = loop {
        let o = tokio::time::timeout(Duration::from_secs(5), out.recv()).await.expect("pushes resume").expect("open");
        match o {
            Outgoing::Receipt(r) => break r,
            o => pushed.push(pushed_item(&o)),
        }
    };
    assert_eq!(pushed, ["i0", "i1", "i2"], "every change, in commit order");
    receipt.sign();
    assert_eq!(signed.recv().await, Some(()), "the receipt behind them is the link's to sign");
}
