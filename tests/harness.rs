//! Smoke test of the end-to-end harness itself (no smartfeeds involved): a real Prosody,
//! a raw XEP-0114 component as `feeds.localhost`, real c2s clients.

mod common;

use std::time::Duration;

use common::prosody::{COMPONENT_DOMAIN, DEMO_PASSWORD, PUBSUB_DOMAIN};
use common::xml::NS_STANZAS;
use common::{Client, Component, Prosody, error_condition, stanza_type, to_xml, with_attr, xml};
use minidom::Element;

const DISCO_INFO: &str = "http://jabber.org/protocol/disco#info";
const SHORT: Duration = Duration::from_secs(5);

fn disco_info_to(to: &str) -> Element {
    with_attr(xml(r#"<iq type="get"><query xmlns="http://jabber.org/protocol/disco#info"/></iq>"#), "to", to)
}

/// Answers one disco#info request as a pubsub service, returns the request.
async fn serve_disco_info(component: &mut Component) -> Element {
    let request = component.next_iq_request(SHORT).await.expect("the component receives the disco#info request");
    assert!(request.get_child("query", DISCO_INFO).is_some(), "{}", to_xml(&request));
    let mut reply = xml(&format!(
        r#"<iq type="result"><query xmlns="{DISCO_INFO}"><identity category="pubsub" type="service" name="harness"/><feature var="{DISCO_INFO}"/></query></iq>"#
    ));
    common::set_attr(&mut reply, "id", request.attr("id").expect("iq has an id"));
    common::set_attr(&mut reply, "to", request.attr("from").expect("routed iq has a from"));
    component.send(reply).await;
    request
}

/// Alice asks the component for disco#info; the raw component answers; checks the reply.
async fn disco_round_trip(alice: &mut Client, component: &mut Component) {
    let (reply, request) = tokio::join!(alice.iq(disco_info_to(COMPONENT_DOMAIN)), serve_disco_info(component));
    assert_eq!(request.attr("from"), Some(alice.jid()), "the component sees alice's full JID");
    assert_eq!(stanza_type(&reply), "result", "{}", to_xml(&reply));
    assert_eq!(reply.attr("from"), Some(COMPONENT_DOMAIN));
    let identity = reply
        .get_child("query", DISCO_INFO)
        .and_then(|q| q.get_child("identity", DISCO_INFO))
        .unwrap_or_else(|| panic!("no identity in {}", to_xml(&reply)));
    assert_eq!(identity.attr("category"), Some("pubsub"));
    assert_eq!(identity.attr("type"), Some("service"));
}

#[tokio::test]
async fn component_and_clients_talk_through_a_real_prosody_and_survive_restarts() {
    let mut prosody = Prosody::start();
    let mut component = prosody.component().await;
    let mut alice = prosody.login("alice").await;
    assert!(alice.jid().starts_with("alice@localhost/"), "{}", alice.jid());
    assert_eq!(alice.bare_jid(), "alice@localhost");

    disco_round_trip(&mut alice, &mut component).await;

    // A push from the component to alice's full JID, then to her bare JID, arrive in order.
    for (n, to) in [alice.jid().to_string(), alice.bare_jid().to_string()].iter().enumerate() {
        let message = xml(&format!(r#"<message type="headline"><body>push {n}</body></message>"#));
        component.send(with_attr(message, "to", to)).await;
    }
    for n in 0..2 {
        let message = alice.next_message(SHORT).await.expect("alice gets the push");
        assert_eq!(message.attr("from"), Some(COMPONENT_DOMAIN));
        assert_eq!(stanza_type(&message), "headline");
        let body = message.children().find(|c| c.name() == "body").map(|b| b.text());
        assert_eq!(body.as_deref(), Some(format!("push {n}").as_str()), "{}", to_xml(&message));
    }
    assert!(alice.next_message(Duration::from_millis(100)).await.is_none());

    // Graceful restart on the same ports: both streams are closed by the server...
    let (c2s, comp) = (prosody.c2s_port(), prosody.component_port());
    prosody.restart();
    assert_eq!((prosody.c2s_port(), prosody.component_port()), (c2s, comp));
    // Clients get a <system-shutdown/> stream error; Prosody 0.12 just closes the TCP
    // connection of components (no stream error, no footer).
    let reason = alice.wait_closed(SHORT).await.expect("alice's stream ends on shutdown");
    assert!(reason.contains("system-shutdown"), "{reason}");
    component.wait_closed(SHORT).await.expect("the component stream ends on shutdown");
    assert!(component.wait_closed(SHORT).await.is_some(), "the component stream ends on shutdown");
    // ... and everything works again after reconnecting.
    let mut component = prosody.component().await;
    let mut alice = prosody.login("alice").await;
    disco_round_trip(&mut alice, &mut component).await;

    // A crash (SIGKILL) and a restart on the same ports.
    prosody.kill();
    assert!(!prosody.is_running());
    alice.wait_closed(SHORT).await.expect("alice notices the crash");
    component.wait_closed(SHORT).await.expect("the component notices the crash");
    prosody.restart();
    let mut component = prosody.component().await;
    let mut alice = prosody.login("alice").await;
    disco_round_trip(&mut alice, &mut component).await;
    alice.close().await;
    component.close().await;
}

#[tokio::test]
async fn prosody_rejects_bad_credentials_and_routes_to_absent_components_with_errors() {
    let prosody = Prosody::start();

    // Wrong secret: the handshake is refused.
    let refused = Component::try_connect(prosody.component_port(), COMPONENT_DOMAIN, "wrong").await;
    let error = refused.err().expect("a wrong secret is refused");
    assert!(error.contains("not-authorized"), "{error}");

    // Wrong password, unknown user.
    let port = prosody.c2s_port();
    let error = Client::try_connect(port, "alice@localhost", "nope").await.err().expect("bad password");
    assert!(error.contains("not-authorized"), "{error}");
    assert!(Client::try_connect(port, "nobody@localhost", DEMO_PASSWORD).await.is_err());

    // create_user works while Prosody runs; the demo users exist.
    prosody.create_user("carol", "c'est \"moi\" é");
    let mut carol = prosody.login("carol").await;
    for user in common::prosody::DEMO_USERS {
        prosody.login(user).await.close().await;
    }

    // No component connected: Prosody answers for feeds.localhost itself.
    let reply = carol.iq(disco_info_to(COMPONENT_DOMAIN)).await;
    assert_eq!(stanza_type(&reply), "error", "{}", to_xml(&reply));
    // Prosody 0.12: <remote-server-timeout/> "Component unavailable" (type wait).
    assert_eq!(error_condition(&reply).as_deref(), Some("remote-server-timeout"), "{}", to_xml(&reply));

    // A second component for the same domain is refused while the first is connected.
    let first = prosody.component().await;
    let second = Component::try_connect(prosody.component_port(), COMPONENT_DOMAIN, prosody.secret()).await;
    let error = second.err().expect("a second feeds.localhost is refused");
    assert!(error.contains("conflict"), "{error}");
    drop(first);

    // Prosody's own pubsub component (mod_pubsub) is loaded.
    let reply = carol.iq(disco_info_to(PUBSUB_DOMAIN)).await;
    assert_eq!(stanza_type(&reply), "result", "{}", to_xml(&reply));
    let identity =
        reply.get_child("query", DISCO_INFO).and_then(|q| q.get_child("identity", DISCO_INFO)).expect("identity");
    assert_eq!((identity.attr("category"), identity.attr("type")), (Some("pubsub"), Some("service")));

    // Only admins may create nodes there (Prosody 0.12 default); admin@localhost is one.
    let create = r#"<iq type="set" to="pubsub.localhost"><pubsub xmlns="http://jabber.org/protocol/pubsub"><create node="harness"/></pubsub></iq>"#;
    let reply = carol.iq(xml(create)).await;
    assert_eq!(error_condition(&reply).as_deref(), Some("forbidden"), "{}", to_xml(&reply));
    let mut admin = prosody.login("admin").await;
    let reply = admin.iq(xml(create)).await;
    assert_eq!(stanza_type(&reply), "result", "{}", to_xml(&reply));

    // An unknown payload to the server gets a stanza error (the stanzas namespace).
    let reply = carol.iq(xml(r#"<iq type="get" to="localhost"><nonsense xmlns="urn:example:nonsense"/></iq>"#)).await;
    let error = reply.children().find(|c| c.name() == "error").expect("error child");
    assert!(error.children().any(|c| c.ns() == NS_STANZAS), "{}", to_xml(&reply));
    assert_eq!(error_condition(&reply).as_deref(), Some("service-unavailable"));
}

#[tokio::test]
async fn two_instances_run_side_by_side() {
    let a = Prosody::start();
    let b = Prosody::start();
    let ports_a = [a.c2s_port(), a.component_port()];
    let ports_b = [b.c2s_port(), b.component_port()];
    assert!(ports_a.iter().all(|p| !ports_b.contains(p)), "{ports_a:?} vs {ports_b:?}");
    assert_ne!(a.data_dir(), b.data_dir());

    // Each has its own feeds.localhost and its own alice.
    let (mut comp_a, mut comp_b) = (a.component().await, b.component().await);
    let (mut alice_a, mut alice_b) = (a.login("alice").await, b.login("alice").await);
    disco_round_trip(&mut alice_a, &mut comp_a).await;
    disco_round_trip(&mut alice_b, &mut comp_b).await;
    let to_a = with_attr(xml("<message><body>a</body></message>"), "to", alice_a.jid());
    comp_a.send(to_a).await;
    assert!(alice_a.next_message(SHORT).await.is_some());
    assert!(alice_b.next_message(Duration::from_millis(200)).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_clients_get_their_pushes_in_order() {
    let prosody = Prosody::start();
    let mut component = prosody.component().await;
    for n in 0..20 {
        prosody.create_user(&format!("user{n}"), &format!("pw{n}"));
    }
    let logins = (0..20).map(|n| prosody.login_owned(format!("user{n}")));
    let clients = futures::future::join_all(logins).await;

    // Pipelined pushes, interleaved across recipients.
    for i in 0..10 {
        for client in &clients {
            let message = xml(&format!(r#"<message type="headline"><body>{i}</body></message>"#));
            component.queue(with_attr(message, "to", client.jid()));
        }
    }
    let checks = clients.into_iter().map(|mut client| async move {
        for i in 0..10 {
            let message = client.next_message(SHORT).await.unwrap_or_else(|| panic!("{}: push {i}", client.jid()));
            let body = message.children().find(|c| c.name() == "body").map(|b| b.text());
            assert_eq!(body, Some(i.to_string()), "{}", client.jid());
        }
        client.close().await;
    });
    futures::future::join_all(checks).await;
}

#[test]
fn config_template_renders_without_leftover_placeholders() {
    let config = common::prosody::render_config(1, 2, "/tmp/x", "s", "info").expect("renders");
    assert!(config.contains("c2s_ports = { 1 }"));
    assert!(config.contains("component_ports = { 2 }"));
    assert!(config.contains(r#"Component "feeds.localhost""#));
    assert!(config.contains(r#"component_secret = "s""#));
    assert_eq!(common::xml::base64(b"\0alice\0password"), "AGFsaWNlAHBhc3N3b3Jk");
    assert_eq!(common::xml::base64(b"ab"), "YWI=");
}
