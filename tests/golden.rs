//! Golden XML-in / XML-out tests of the glue: a stanza goes into the router (with the real
//! core on the in-memory store, which needs no database, and a frozen clock so cursors are
//! fixed), and the reply must be exactly the expected XML.

use feed::service::Service;
use minidom::Element;
use smartfeeds::config::Config;
use std::sync::Arc;
use testkit::memory_store::MemoryStore;
use xmpp::router::Router;
use xmpp_parsers::iq::Iq;

const NOW: i64 = 1_700_000_000_000;

async fn router() -> Router<MemoryStore> {
    let config = Config::parse(
        r#"admins = ["admin@localhost"]
autocreate = true
[component]
jid = "feeds.localhost"
secret = "s"
[limits]
max_payload_bytes = 400
[[feeds]]
name = "comments"
title = "Comments"
publishers = ["bot@localhost"]
default_order = "created"
[[feeds]]
name = "secret"
access = "whitelist"
allowed = ["*@example.net"]
"#,
    )
    .unwrap();
    let svc = Service::new(MemoryStore::new(None), Arc::new(config.policy()), Arc::new(|| NOW));
    svc.init().await.unwrap();
    // Generations read from the store: nothing here keeps them in memory.
    let ready = Arc::new(xmpp::ready_pages::Ready::new(feed::generations::Generations::from_store()));
    Router::new(svc, "feeds.localhost".parse().unwrap(), ready)
}

/// Parses stanza text written without the stream's default namespace
/// (`jabber:component:accept`), which is added here.
fn element(xml: &str) -> Element {
    xml.replacen("<iq", "<iq xmlns='jabber:component:accept'", 1).parse().unwrap()
}

fn stanza(xml: &str) -> Iq {
    Iq::try_from(element(xml)).unwrap()
}

/// Sends one iq and returns the reply as the link writes it, read back and serialised the
/// way the expectations are.
async fn ask(r: &Router<MemoryStore>, xml: &str) -> String {
    let reply = r.handle_iq(stanza(xml)).await.expect("a get or set gets a reply");
    let written: Element = reply.reply.to_xml().parse().expect("the reply is well-formed XML");
    String::from(&written)
}

/// The canonical text of an expected reply: expectations are written readably (double
/// quotes, no stream namespace) and go through the same serialiser as the replies.
fn golden(xml: &str) -> String {
    String::from(&element(xml))
}

const ENTRY: &str = "<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:1</id><title>One</title></entry>";

/// `from` publishes [`ENTRY`] as item `a` of `comments` (iq id `p1`).
fn publish_a(from: &str) -> String {
    format!(
        "<iq type='set' id='p1' from='{from}' to='feeds.localhost'>\
         <pubsub xmlns='http://jabber.org/protocol/pubsub'><publish node='comments'><item id='a'>{ENTRY}</item></publish></pubsub></iq>"
    )
}

#[tokio::test]
async fn publish_then_pull_with_rsm() {
    let r = router().await;
    let publish = publish_a("bot@localhost/r");
    assert_eq!(
        ask(&r, &publish).await,
        golden(
            "<iq from=\"feeds.localhost\" id=\"p1\" to=\"bot@localhost/r\" type=\"result\">\
         <pubsub xmlns=\"http://jabber.org/protocol/pubsub\"><publish node=\"comments\"><item id=\"a\"/></publish></pubsub></iq>"
        )
    );
    let pull = "<iq type='get' id='g1' from='alice@localhost/r' to='feeds.localhost'>\
        <pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='comments'/>\
        <set xmlns='http://jabber.org/protocol/rsm'><max>10</max></set></pubsub></iq>";
    let c = crc32fast::hash(b"a");
    assert_eq!(
        ask(&r, pull).await,
        golden(&format!(
            "<iq from=\"feeds.localhost\" id=\"g1\" to=\"alice@localhost/r\" type=\"result\">\
             <pubsub xmlns=\"http://jabber.org/protocol/pubsub\"><items node=\"comments\"><item id=\"a\">\
             <entry xmlns=\"http://www.w3.org/2005/Atom\"><id>urn:1</id><title>One</title></entry></item></items>\
             <set xmlns=\"http://jabber.org/protocol/rsm\"><first index=\"0\">cursor:{NOW}_0_{c}</first>\
             <last>cursor:{NOW}_0_{c}</last><count>1</count></set></pubsub></iq>"
        ))
    );
}

#[tokio::test]
async fn retraction_leaves_a_tombstone() {
    let r = router().await;
    let publish = publish_a("admin@localhost/r");
    ask(&r, &publish).await;
    let retract = "<iq type='set' id='r1' from='admin@localhost/r' to='feeds.localhost'>\
        <pubsub xmlns='http://jabber.org/protocol/pubsub'><retract node='comments'><item id='a'/></retract></pubsub></iq>";
    assert_eq!(
        ask(&r, retract).await,
        golden("<iq from=\"feeds.localhost\" id=\"r1\" to=\"admin@localhost/r\" type=\"result\"/>")
    );
    let pull = "<iq type='get' id='g' from='alice@localhost/r' to='feeds.localhost'>\
        <pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='comments'><item id='a'/></items></pubsub></iq>";
    // The same item modified in the same millisecond moves one millisecond on.
    assert_eq!(
        ask(&r, pull).await,
        golden(
            "<iq from=\"feeds.localhost\" id=\"g\" to=\"alice@localhost/r\" type=\"result\">\
         <pubsub xmlns=\"http://jabber.org/protocol/pubsub\"><items node=\"comments\"><item id=\"a\">\
         <deleted-entry xmlns=\"http://purl.org/atompub/tombstones/1.0\" ref=\"urn:1\" when=\"2023-11-14T22:13:20.001Z\"/>\
         </item></items></pubsub></iq>"
        )
    );
}

#[tokio::test]
async fn errors_carry_condition_application_condition_and_text() {
    let r = router().await;
    let cases = [
        (
            "<iq type='get' id='e1' from='alice@localhost/r' to='feeds.localhost'>\
             <pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='comments?sort=up'/></pubsub></iq>",
            "<error type=\"cancel\"><item-not-found xmlns=\"urn:ietf:params:xml:ns:xmpp-stanzas\"/>\
             <text xmlns=\"urn:ietf:params:xml:ns:xmpp-stanzas\" xml:lang=\"en\">no such node: unknown parameter \"sort\"</text></error>",
        ),
        (
            "<iq type='get' id='e2' from='alice@localhost/r' to='feeds.localhost'>\
             <pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='secret'/></pubsub></iq>",
            "<error type=\"cancel\"><not-allowed xmlns=\"urn:ietf:params:xml:ns:xmpp-stanzas\"/>\
             <text xmlns=\"urn:ietf:params:xml:ns:xmpp-stanzas\" xml:lang=\"en\">this feed is restricted</text>\
             <closed-node xmlns=\"http://jabber.org/protocol/pubsub#errors\"/></error>",
        ),
        (
            "<iq type='set' id='e3' from='alice@localhost/r' to='feeds.localhost'>\
             <pubsub xmlns='http://jabber.org/protocol/pubsub'><publish node='comments'><item><x xmlns='urn:x'/></item></publish></pubsub></iq>",
            "<error type=\"auth\"><forbidden xmlns=\"urn:ietf:params:xml:ns:xmpp-stanzas\"/>\
             <text xmlns=\"urn:ietf:params:xml:ns:xmpp-stanzas\" xml:lang=\"en\">alice@localhost may not publish to comments</text></error>",
        ),
        (
            "<iq type='get' id='e4' from='alice@localhost/r' to='feeds.localhost'>\
             <pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='comments'/>\
             <set xmlns='http://jabber.org/protocol/rsm'><after>8f4a1546</after></set></pubsub></iq>",
            "<error type=\"modify\"><bad-request xmlns=\"urn:ietf:params:xml:ns:xmpp-stanzas\"/>\
             <text xmlns=\"urn:ietf:params:xml:ns:xmpp-stanzas\" xml:lang=\"en\">bad position spec: position spec has no type (expected cursor:, id: or time:)</text></error>",
        ),
        (
            "<iq type='get' id='e5' from='alice@localhost/r' to='feeds.localhost'><query xmlns='urn:example:unknown'/></iq>",
            "<error type=\"cancel\"><service-unavailable xmlns=\"urn:ietf:params:xml:ns:xmpp-stanzas\"/>\
             <text xmlns=\"urn:ietf:params:xml:ns:xmpp-stanzas\" xml:lang=\"en\">this service does not handle that request</text></error>",
        ),
    ];
    for (request, error) in cases {
        let reply = ask(&r, request).await;
        let id = stanza(request).id().to_string();
        assert_eq!(
            reply,
            golden(&format!(
                "<iq from=\"feeds.localhost\" id=\"{id}\" to=\"alice@localhost/r\" type=\"error\">{error}</iq>"
            )),
            "reply to {request}"
        );
    }
}

#[tokio::test]
async fn oversized_and_non_atom_payloads_are_refused() {
    let r = router().await;
    let big = format!("<entry xmlns='http://www.w3.org/2005/Atom'><title>{}</title></entry>", "x".repeat(500));
    let too_big = format!(
        "<iq type='set' id='b' from='bot@localhost/r' to='feeds.localhost'>\
         <pubsub xmlns='http://jabber.org/protocol/pubsub'><publish node='comments'><item>{big}</item></publish></pubsub></iq>"
    );
    let reply = ask(&r, &too_big).await;
    assert!(reply.contains("<not-acceptable") && reply.contains("<payload-too-big"), "{reply}");
    let two = format!(
        "<iq type='set' id='t' from='bot@localhost/r' to='feeds.localhost'>\
         <pubsub xmlns='http://jabber.org/protocol/pubsub'><publish node='comments'><item>{ENTRY}{ENTRY}</item></publish></pubsub></iq>"
    );
    let reply = ask(&r, &two).await;
    assert!(reply.contains("<bad-request") && reply.contains("<invalid-payload"), "{reply}");
}

#[tokio::test]
async fn results_and_errors_get_no_reply() {
    let r = router().await;
    for t in ["result", "error"] {
        let body = if t == "error" {
            "<error type='cancel'><item-not-found xmlns='urn:ietf:params:xml:ns:xmpp-stanzas'/></error>"
        } else {
            ""
        };
        let iq = stanza(&format!("<iq type='{t}' id='x' from='localhost' to='feeds.localhost'>{body}</iq>"));
        assert!(r.handle_iq(iq).await.is_none(), "{t}");
    }
}

#[tokio::test]
async fn disco_info_of_the_shim_node_lists_the_headers() {
    let r = router().await;
    let reply = ask(
        &r,
        "<iq type='get' id='d' from='alice@localhost/r' to='feeds.localhost'>\
         <query xmlns='http://jabber.org/protocol/disco#info' node='http://jabber.org/protocol/shim'/></iq>",
    )
    .await;
    assert_eq!(
        reply,
        golden(
            "<iq from=\"feeds.localhost\" id=\"d\" to=\"alice@localhost/r\" type=\"result\">\
         <query xmlns=\"http://jabber.org/protocol/disco#info\" node=\"http://jabber.org/protocol/shim\">\
         <feature var=\"http://jabber.org/protocol/shim#LastCursor\"/>\
         <feature var=\"http://jabber.org/protocol/shim#PreviousCursor\"/>\
         <feature var=\"http://jabber.org/protocol/shim#TotalItems\"/></query></iq>"
        )
    );
}
