//! XEP-0050 ad-hoc commands for admins, through a real XMPP server (Prosody or ejabberd)
//! and real clients: list feeds with counts, create a feed, show a feed's subscribers,
//! remove a subscription, statistics; nobody else sees or runs them.

use minidom::Element;
use testkit::adhoc::{COMMANDS, command, field, status, values};
use testkit::pubsub::*;
use testkit::smartfeeds::Smartfeeds;
use testkit::start_selected;
use testkit::{stanza_type, to_xml, xml};

const TABLES: &str = r#"
[[feeds]]
name = "news"
publishers = ["bot@localhost"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admins_run_commands_and_nobody_else_does() {
    let host = start_selected();
    let _sf = Smartfeeds::start(&host, TABLES);
    let mut admin = host.login("admin").await;
    let mut bot = host.login("bot").await;
    let mut alice = host.login("alice").await;
    for i in 0..3 {
        let r = bot.iq(publish_iq("news", Some(&format!("i{i}")), &entry(&format!("urn:i{i}"), "t", None, &[]))).await;
        assert_eq!(stanza_type(&r), "result");
    }
    let sub = xml("<iq type='set' to='feeds.localhost'><pubsub xmlns='http://jabber.org/protocol/pubsub'>\
                   <subscribe node='news?order=modified' jid='alice@localhost'/></pubsub></iq>");
    assert_eq!(stanza_type(&alice.iq(sub).await), "result");

    // The command list: all five for an admin, none for anyone else.
    let list = xml(&format!(
        "<iq type='get' to='feeds.localhost'><query xmlns='http://jabber.org/protocol/disco#items' node='{COMMANDS}'/></iq>"
    ));
    let nodes = |r: &Element| -> Vec<String> {
        r.get_child("query", "http://jabber.org/protocol/disco#items")
            .unwrap()
            .children()
            .filter_map(|i| i.attr("node").map(String::from))
            .collect()
    };
    assert_eq!(
        nodes(&admin.iq(list.clone()).await),
        ["list-feeds", "create-feed", "subscribers", "remove-subscription", "stats"]
    );
    assert!(nodes(&alice.iq(list).await).is_empty());

    // list-feeds and stats complete at once.
    let r = admin.iq(command("list-feeds", None)).await;
    assert_eq!(status(&r), "completed", "{}", to_xml(&r));
    assert_eq!(values(&r, "feeds"), ["news: 3 items, 1 subscriptions"]);
    let r = admin.iq(command("stats", None)).await;
    assert_eq!(
        (values(&r, "feeds"), values(&r, "items"), values(&r, "subscriptions")),
        (vec!["1".to_string()], vec!["3".to_string()], vec!["1".to_string()])
    );

    // create-feed: a form first, then the feed.
    let r = admin.iq(command("create-feed", None)).await;
    assert_eq!(status(&r), "executing", "{}", to_xml(&r));
    assert!(r.get_child("command", COMMANDS).unwrap().get_child("x", "jabber:x:data").is_some());
    let r = admin.iq(command("create-feed", Some(&field("name", "events")))).await;
    assert_eq!(status(&r), "completed", "{}", to_xml(&r));
    let pull = pull(&mut alice, &Pull::node("events").max(0)).await;
    assert_eq!(pull.count, Some(0), "the new feed exists and is empty");

    // subscribers, then remove-subscription.
    let r = admin.iq(command("subscribers", Some(&field("feed", "news")))).await;
    assert_eq!(values(&r, "subscriptions"), ["alice@localhost news?order=modified"]);
    let form = format!("{}{}", field("node", "news?order=modified"), field("jid", "alice@localhost"));
    let r = admin.iq(command("remove-subscription", Some(&form))).await;
    assert_eq!(status(&r), "completed", "{}", to_xml(&r));
    let r = admin.iq(command("subscribers", Some(&field("feed", "news")))).await;
    assert!(values(&r, "subscriptions").is_empty());

    // Nobody else runs them.
    for node in ["list-feeds", "create-feed", "stats"] {
        let r = alice.iq(command(node, None)).await;
        assert_error(&r, "forbidden", None);
    }
    let r = admin.iq(command("no-such-command", None)).await;
    assert_error(&r, "item-not-found", None);
}
