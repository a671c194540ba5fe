//! Smoke test of the end-to-end harness itself (no smartfeeds involved): a real server,
//! Prosody 0.12 and ejabberd 23.01 alike, a raw XEP-0114 component as `feeds.localhost`,
//! real c2s clients. Each scenario is written once, generic over the [`Server`], and run
//! against both; what only one server does is asserted after it, so a change of behaviour
//! shows up. Where they differ for a component:
//!
//!
//! | situation | Prosody 0.12 | ejabberd 23.01 |
//! | --- | --- | --- |
//! | iq to `feeds.localhost` while no component is connected | `remote-server-timeout` (wait), "Component unavailable" | `remote-server-not-found` (cancel), "DNS lookup failed" (it tries s2s) |
//! | second connection for `feeds.localhost` | refused, `<conflict/>` | accepted; stanzas to the domain are spread over the connections at random |
//! | component stanza without `from` | `from` set to the component's domain | stream closed, `<improper-addressing/>` |
//! | component stanza from a foreign domain | stream closed, `<invalid-from/>` | stream closed, `<invalid-from/>` |
//! | `feeds.localhost` sends from `bench.localhost` (same port) | stream closed, `<invalid-from/>` | routed (both domains are one listener's `hosts`) |
//! | headline to an offline full or bare JID | dropped silently | dropped silently |
//! | headline to a user that does not exist | dropped silently | `service-unavailable` bounced to the component |
//! | graceful stop: clients / components | `<system-shutdown/>` / TCP closed | `<system-shutdown/>` / TCP closed |
//! | idle authenticated component | kept | kept (no read timeout after the handshake: no ping needed) |
//!
//! Two ejabberd nodes clustered ([`EjabberdCluster`]): a component for `feeds.localhost` on
//! each node; each node routes the domain's stanzas to the component attached to it, and
//! either component reaches users on either node.

use std::time::Duration;

use minidom::Element;
use testkit::server::{BENCH_DOMAIN, COMPONENT_DOMAIN, DEMO_PASSWORD, DEMO_USERS, PUBSUB_DOMAIN};
use testkit::xml::NS_STANZAS;
use testkit::{
    Client, Component, Ejabberd, EjabberdCluster, Prosody, Server, TestServer, error_condition, set_attr, stanza_type,
    to_xml, with_attr, xml,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const DISCO_INFO: &str = "http://jabber.org/protocol/disco#info";
const SHORT: Duration = Duration::from_secs(5);
/// How long we wait to conclude that nothing comes back.
const QUIET: Duration = Duration::from_millis(700);

fn disco_info_to(to: &str) -> Element {
    with_attr(xml(r#"<iq type="get"><query xmlns="http://jabber.org/protocol/disco#info"/></iq>"#), "to", to)
}

fn headline(to: &str, body: &str) -> Element {
    let message = xml(&format!(r#"<message type="headline"><body>{body}</body></message>"#));
    with_attr(message, "to", to)
}

fn body(message: &Element) -> Option<String> {
    message.children().find(|c| c.name() == "body").map(|b| b.text())
}

/// Answers one disco#info request as a pubsub service, returns the request.
async fn serve_disco_info(component: &mut Component) -> Element {
    let request = component.next_iq_request(SHORT).await.expect("the component receives the disco#info request");
    assert!(request.get_child("query", DISCO_INFO).is_some(), "{}", to_xml(&request));
    let mut reply = xml(&format!(
        r#"<iq type="result"><query xmlns="{DISCO_INFO}"><identity category="pubsub" type="service" name="harness"/><feature var="{DISCO_INFO}"/></query></iq>"#
    ));
    set_attr(&mut reply, "id", request.attr("id").expect("iq has an id"));
    set_attr(&mut reply, "to", request.attr("from").expect("routed iq has a from"));
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

/// Clients and a component talk through the server; both see a graceful restart and a
/// crash, and work again afterwards; the server's own data survives.
async fn talk_and_survive_restarts<S: Server>() {
    let mut server = S::start();
    let mut component = server.component().await;
    let mut alice = server.login("alice").await;
    assert!(alice.jid().starts_with("alice@localhost/"), "{}", alice.jid());
    assert_eq!(alice.bare_jid(), "alice@localhost");

    disco_round_trip(&mut alice, &mut component).await;

    // A push from the component to alice's full JID, then to her bare JID, arrive in order.
    for (n, to) in [alice.jid().to_string(), alice.bare_jid().to_string()].iter().enumerate() {
        component.send(headline(to, &format!("push {n}"))).await;
    }
    for n in 0..2 {
        let message = alice.next_message(SHORT).await.expect("alice gets the push");
        assert_eq!(message.attr("from"), Some(COMPONENT_DOMAIN));
        assert_eq!(stanza_type(&message), "headline");
        assert_eq!(body(&message), Some(format!("push {n}")), "{}", to_xml(&message));
    }
    assert!(alice.next_message(Duration::from_millis(100)).await.is_none());

    // Data in the server's own database (ejabberd: Mnesia, in the spool directory): a
    // pubsub node.
    let mut admin = server.login("admin").await;
    let create = r#"<iq type="set" to="pubsub.localhost"><pubsub xmlns="http://jabber.org/protocol/pubsub"><create node="survivor"/></pubsub></iq>"#;
    let reply = admin.iq(xml(create)).await;
    assert_eq!(stanza_type(&reply), "result", "{}", to_xml(&reply));

    // Graceful restart on the same ports: both streams are closed by the server...
    let ports = server.ports().to_vec();
    server.restart();
    assert_eq!(server.ports(), ports);
    // Clients get a <system-shutdown/> stream error and the footer; Prosody 0.12 and
    // ejabberd 23.01 mostly just close the TCP connection of components, though ejabberd
    // sometimes sends them <system-shutdown/> too (which of the two depends on timing).
    let reason = alice.wait_closed(SHORT).await.expect("alice's stream ends on shutdown");
    assert!(reason.contains("system-shutdown"), "{reason}");
    let reason = component.wait_closed(SHORT).await.expect("the component stream ends on shutdown");
    assert!(!reason.contains("stream:error") || reason.contains("system-shutdown"), "{reason}");
    assert!(component.wait_closed(SHORT).await.is_some(), "the component stream ends on shutdown");
    admin.wait_closed(SHORT).await.expect("admin's stream ends on shutdown");
    // ... and everything works again after reconnecting; the database survived.
    let mut component = server.component().await;
    let mut alice = server.login("alice").await;
    disco_round_trip(&mut alice, &mut component).await;
    let mut admin = server.login("admin").await;
    let reply = admin.iq(xml(create)).await;
    assert_eq!(error_condition(&reply).as_deref(), Some("conflict"), "the node survived: {}", to_xml(&reply));

    // A crash (SIGKILL; of ejabberd's Erlang VM) and a restart on the same ports.
    let pid = server.pid().expect("the server's pid is known");
    server.kill();
    assert!(!server.is_running());
    // Gone, or a zombie its new parent has yet to reap: either way it runs no more.
    assert!(!testkit::process::is_alive(pid), "the server process is gone");
    alice.wait_closed(SHORT).await.expect("alice notices the crash");
    component.wait_closed(SHORT).await.expect("the component notices the crash");
    server.restart();
    let mut component = server.component().await;
    let mut alice = server.login("alice").await;
    disco_round_trip(&mut alice, &mut component).await;
    alice.close().await;
    component.close().await;
}

#[tokio::test]
async fn component_and_clients_talk_through_a_real_prosody_and_survive_restarts() {
    talk_and_survive_restarts::<Prosody>().await;
}

#[tokio::test]
async fn component_and_clients_talk_through_a_real_ejabberd_and_survive_restarts() {
    talk_and_survive_restarts::<Ejabberd>().await;
}

/// Bad credentials are refused, accounts come and change, the server answers for an absent
/// component and has its own pubsub service. Returns the server for what only it does.
async fn rejects_bad_credentials_and_answers_for_absent_components<S: Server>() -> TestServer<S> {
    let server = S::start();

    // Wrong secret: the handshake is refused.
    let refused = Component::try_connect(server.component_port(), COMPONENT_DOMAIN, "wrong").await;
    let error = refused.err().expect("a wrong secret is refused");
    assert!(error.contains("not-authorized"), "{error}");

    // Wrong password, unknown user.
    let c2s = server.c2s_port();
    let error = Client::try_connect(c2s, "alice@localhost", "nope").await.err().expect("bad password");
    assert!(error.contains("not-authorized"), "{error}");
    assert!(Client::try_connect(c2s, "nobody@localhost", DEMO_PASSWORD).await.is_err());

    // create_user works while the server runs; the demo users exist; a password can be reset.
    server.create_user("carol", "c'est \"moi\" é \\ ok");
    let mut carol = server.login("carol").await;
    for user in DEMO_USERS {
        server.login(user).await.close().await;
    }
    server.create_user("bob", "new bob");
    assert!(Client::try_connect(c2s, "bob@localhost", DEMO_PASSWORD).await.is_err());
    server.login("bob").await.close().await;

    // No component connected: the server answers for feeds.localhost itself, each in its own
    // way (Prosody: remote-server-timeout, "Component unavailable"; ejabberd has no route
    // for the domain and tries server-to-server, which fails at once).
    let reply = carol.iq(disco_info_to(COMPONENT_DOMAIN)).await;
    assert_eq!(stanza_type(&reply), "error", "{}", to_xml(&reply));
    let condition = error_condition(&reply);
    assert_eq!(condition.as_deref(), Some(server.component_down_condition()), "{}", to_xml(&reply));
    assert!(server.is_component_down_error(&reply), "{}", to_xml(&reply));

    // The server's own pubsub component (mod_pubsub) is loaded.
    let reply = carol.iq(disco_info_to(PUBSUB_DOMAIN)).await;
    assert_eq!(stanza_type(&reply), "result", "{}", to_xml(&reply));
    let identity =
        reply.get_child("query", DISCO_INFO).and_then(|q| q.get_child("identity", DISCO_INFO)).expect("identity");
    assert_eq!((identity.attr("category"), identity.attr("type")), (Some("pubsub"), Some("service")));

    // Only admins may create nodes there (Prosody 0.12's default, ejabberd as configured);
    // admin@localhost is one.
    let create = r#"<iq type="set" to="pubsub.localhost"><pubsub xmlns="http://jabber.org/protocol/pubsub"><create node="harness"/></pubsub></iq>"#;
    let reply = carol.iq(xml(create)).await;
    assert_eq!(error_condition(&reply).as_deref(), Some("forbidden"), "{}", to_xml(&reply));
    let mut admin = server.login("admin").await;
    let reply = admin.iq(xml(create)).await;
    assert_eq!(stanza_type(&reply), "result", "{}", to_xml(&reply));

    // An unknown payload to the server gets a stanza error (the stanzas namespace).
    let reply = carol.iq(xml(r#"<iq type="get" to="localhost"><nonsense xmlns="urn:example:nonsense"/></iq>"#)).await;
    let error = reply.children().find(|c| c.name() == "error").expect("error child");
    assert!(error.children().any(|c| c.ns() == NS_STANZAS), "{}", to_xml(&reply));
    assert_eq!(error_condition(&reply).as_deref(), Some("service-unavailable"));
    server
}

#[tokio::test]
async fn prosody_rejects_bad_credentials_and_routes_to_absent_components_with_errors() {
    let prosody = rejects_bad_credentials_and_answers_for_absent_components::<Prosody>().await;

    // A second component for the same domain is refused while the first is connected.
    let first = prosody.component().await;
    let second = Component::try_connect(prosody.component_port(), COMPONENT_DOMAIN, prosody.secret()).await;
    let error = second.err().expect("a second feeds.localhost is refused");
    assert!(error.contains("conflict"), "{error}");
    drop(first);
}

#[tokio::test]
async fn ejabberd_rejects_bad_credentials_and_answers_for_absent_components() {
    let ejabberd = rejects_bad_credentials_and_answers_for_absent_components::<Ejabberd>().await;
    let port = ejabberd.component_port();

    // A domain the listener does not serve: the handshake is refused.
    let error = Component::try_connect(port, "other.localhost", ejabberd.secret()).await.err().expect("unknown");
    assert!(error.contains("not-authorized"), "{error}");
    // The virtual host itself cannot be a component.
    let error = Component::try_connect(port, "localhost", ejabberd.secret()).await.err().expect("the vhost");
    assert!(error.contains("conflict"), "{error}");

    // ejabberdctl reaches this node (its node name, cookie and distribution port).
    let users = ejabberd.ctl(&["registered_users", "localhost"]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(users.lines().collect::<Vec<_>>(), ["admin", "alice", "bob", "bot", "carol"]);
}

/// A raw component connection (plain text over TCP) for what the [`Component`] helper
/// never sends: stanzas without a `from`.
async fn raw_component(port: u16, domain: &str, secret: &str) -> TcpStream {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    let header = format!(
        "<?xml version='1.0'?><stream:stream xmlns='jabber:component:accept' \
         xmlns:stream='http://etherx.jabber.org/streams' to='{domain}'>"
    );
    tcp.write_all(header.as_bytes()).await.expect("write");
    let text = read_until(&mut tcp, "id=", SHORT).await;
    let id = text.split("id=").nth(1).expect("stream id");
    let quote = id.chars().next().expect("quote");
    let id = &id[1..id[1..].find(quote).expect("closing quote") + 1];
    tcp.write_all(testkit::component::handshake(id, secret).as_bytes()).await.expect("write");
    let text = read_until(&mut tcp, "<handshake", SHORT).await;
    assert!(text.contains("<handshake"), "{text}");
    tcp
}

/// Reads until `needle` has been seen, the peer closes (`<<EOF>>` is appended) or `timeout`.
async fn read_until(tcp: &mut TcpStream, needle: &str, timeout: Duration) -> String {
    let deadline = tokio::time::Instant::now() + timeout;
    let (mut text, mut buf) = (Vec::new(), [0u8; 4096]);
    while !String::from_utf8_lossy(&text).contains(needle) {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                text.extend_from_slice(b"<<EOF>>");
                break;
            }
            Ok(Ok(n)) => text.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

#[tokio::test]
async fn ejabberd_component_routing_rules() {
    let ejabberd = Ejabberd::start();
    let mut alice = ejabberd.login("alice").await;
    let mut bob = ejabberd.login("bob").await;

    // Several connections for one component domain are accepted (Prosody: <conflict/>),
    // and stanzas to the domain are spread over them at random, per stanza (the default
    // `domain_balancing`); a reply may leave through any of them.
    let mut components = Vec::new();
    for _ in 0..3 {
        components.push(ejabberd.component().await);
    }
    for i in 0..60 {
        let sender = if i % 2 == 0 { &mut alice } else { &mut bob };
        sender.queue(with_attr(xml(&format!("<message><body>{i}</body></message>")), "to", COMPONENT_DOMAIN));
    }
    let mut counts = [0; 3];
    for (count, component) in counts.iter_mut().zip(&mut components) {
        while component.next_message(QUIET).await.is_some() {
            *count += 1;
        }
    }
    assert_eq!(counts.iter().sum::<i32>(), 60, "{counts:?}");
    // P(one of three gets none of 60 at random) = 3 * (2/3)^60, about 1e-10.
    assert!(counts.iter().all(|&c| c > 0), "not spread: {counts:?}");
    alice.send(with_attr(disco_info_to(COMPONENT_DOMAIN), "id", "spread")).await;
    let mut request = None;
    for (n, component) in components.iter_mut().enumerate() {
        if let Some(iq) = component.next_iq_request(QUIET).await {
            request = Some((n, iq));
        }
    }
    let (n, request) = request.expect("one connection gets the request");
    let mut reply = xml(&format!(r#"<iq type="result" id="spread"><query xmlns="{DISCO_INFO}"/></iq>"#));
    set_attr(&mut reply, "to", request.attr("from").expect("from"));
    components[(n + 1) % 3].send(reply).await;
    let reply = alice.wait_for(SHORT, |el| el.attr("id") == Some("spread")).await.expect("the reply");
    assert_eq!(stanza_type(&reply), "result", "{}", to_xml(&reply));
    for component in components.drain(..) {
        component.close().await;
    }

    // Only the domain a connection authenticated as is routed to it (global_routes: false):
    // bench.localhost stays unreachable while feeds.localhost is connected...
    let mut feeds = ejabberd.component().await;
    let reply = alice.iq(disco_info_to(BENCH_DOMAIN)).await;
    assert_eq!(error_condition(&reply).as_deref(), Some("remote-server-not-found"), "{}", to_xml(&reply));
    assert!(feeds.next_stanza(QUIET).await.is_none());
    // ... but feeds.localhost may send from bench.localhost: the two share one listener, and
    // ejabberd accepts any `from` in the listener's hosts (Prosody: <invalid-from/>).
    feeds.send(with_attr(headline(alice.jid(), "as bench"), "from", "sub1@bench.localhost")).await;
    let message = alice.next_message(SHORT).await.expect("routed");
    assert_eq!(message.attr("from"), Some("sub1@bench.localhost"));

    // Headlines to a user who is offline (full or bare JID) or to an unknown resource are
    // dropped silently; to a user who does not exist, ejabberd bounces service-unavailable
    // (Prosody drops those too). An iq to an offline full JID: service-unavailable.
    ejabberd.create_user("carol", "pw");
    let carol = ejabberd.login("carol").await;
    let carol_jid = carol.jid().to_string();
    carol.close().await;
    for to in [carol_jid.as_str(), "carol@localhost", "alice@localhost/elsewhere"] {
        feeds.send(headline(to, "nobody reads this")).await;
    }
    assert!(feeds.next_stanza(QUIET).await.is_none(), "no bounce for offline users");
    assert!(alice.next_message(Duration::from_millis(100)).await.is_none());
    feeds.send(with_attr(headline("nobody@localhost", "bounce"), "id", "h1")).await;
    let bounce = feeds.next_message(SHORT).await.expect("a bounce");
    assert_eq!((stanza_type(&bounce), bounce.attr("id")), ("error", Some("h1")), "{}", to_xml(&bounce));
    assert_eq!(error_condition(&bounce).as_deref(), Some("service-unavailable"));
    let ping = with_attr(xml(r#"<iq type="get"><ping xmlns="urn:xmpp:ping"/></iq>"#), "to", &carol_jid);
    let reply = feeds.iq(ping).await;
    assert_eq!(error_condition(&reply).as_deref(), Some("service-unavailable"), "{}", to_xml(&reply));

    // A stanza from a foreign domain ends the component's stream with <invalid-from/>.
    feeds.send(with_attr(headline(alice.jid(), "forged"), "from", "bob@localhost")).await;
    let reason = feeds.wait_closed(SHORT).await.expect("the stream is closed");
    assert!(reason.contains("invalid-from"), "{reason}");
    assert!(alice.next_message(QUIET).await.is_none(), "the forged message is not routed");

    // A stanza without `from` ends it with <improper-addressing/> (Prosody fills it in).
    let mut raw = raw_component(ejabberd.component_port(), COMPONENT_DOMAIN, ejabberd.secret()).await;
    let stanza = format!("<message to='{}' type='headline'><body>no from</body></message>", alice.jid());
    raw.write_all(stanza.as_bytes()).await.expect("write");
    let text = read_until(&mut raw, "<<EOF>>", SHORT).await;
    assert!(text.contains("improper-addressing") && text.contains("</stream:stream>"), "{text}");
    assert!(alice.next_message(QUIET).await.is_none(), "the message is not routed");
}

/// Two instances started at once share nothing: ports, directories, users, components.
/// Returns both for what only one kind of server has.
async fn two_instances_run_side_by_side<S: Server>() -> (TestServer<S>, TestServer<S>) {
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(S::start);
        let b = s.spawn(S::start);
        (a.join().expect("a starts"), b.join().expect("b starts"))
    });
    let (ports_a, ports_b) = (a.ports(), b.ports());
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
    (a, b)
}

#[tokio::test]
async fn two_prosody_instances_run_side_by_side() {
    two_instances_run_side_by_side::<Prosody>().await;
}

#[tokio::test]
async fn two_ejabberd_instances_run_side_by_side() {
    let (a, b) = two_instances_run_side_by_side::<Ejabberd>().await;
    assert_eq!((a.api_port(), a.dist_port()), (a.ports()[2], a.ports()[3]));
    assert_ne!(a.node_name(), b.node_name());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_ejabberd_nodes_form_one_cluster_that_routes_between_them() {
    let cluster = EjabberdCluster::start();
    let (a, b) = (cluster.a(), cluster.b());
    let mut want = vec![a.node_name().to_string(), b.node_name().to_string()];
    want.sort();
    for node in cluster.nodes() {
        assert_eq!(cluster.members_seen_by(node).expect("list_cluster"), want);
    }
    assert_eq!(a.secret(), b.secret(), "one secret for the domain on every node");
    // An account made through b logs in on a: one user database.
    b.create_user("carol", "pw");
    // The account reaches node a's copy of the table within moments (asked again meanwhile).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let carol = loop {
        match Client::try_connect(a.c2s_port(), "carol@localhost", "pw").await {
            Ok(c) => break c,
            Err(e) if std::time::Instant::now() > deadline => panic!("carol never logged in on node a: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    carol.close().await;

    let (mut comp_a, mut comp_b) = (a.component().await, b.component().await);
    let (mut alice, mut bob) = (a.login("alice").await, b.login("bob").await);
    // Each node sends the domain's requests to the component attached to it, never across.
    for _ in 0..5 {
        disco_round_trip(&mut alice, &mut comp_a).await;
        disco_round_trip(&mut bob, &mut comp_b).await;
    }
    assert!(comp_a.next_stanza(QUIET).await.is_none() && comp_b.next_stanza(QUIET).await.is_none());
    // Either component reaches users on either node.
    comp_a.send(headline(bob.jid(), "from a")).await;
    comp_b.send(headline(alice.jid(), "from b")).await;
    assert_eq!(bob.next_message(SHORT).await.and_then(|m| body(&m)).as_deref(), Some("from a"));
    assert_eq!(alice.next_message(SHORT).await.and_then(|m| body(&m)).as_deref(), Some("from b"));
    // With the component of node a gone, node a sends the domain's requests to node b's.
    drop(comp_a);
    tokio::time::sleep(Duration::from_millis(300)).await;
    disco_round_trip(&mut alice, &mut comp_b).await;

    let (vms, epmd) = ([a.pid().expect("a runs"), b.pid().expect("b runs")], cluster.epmd_pid());
    drop(cluster);
    for pid in vms.into_iter().chain([epmd]) {
        assert!(!testkit::process::is_alive(pid), "pid {pid} outlives the cluster");
    }
}

/// Twenty clients, ten pipelined pushes each, interleaved across recipients: each gets its
/// own, in order.
async fn many_concurrent_clients_get_their_pushes_in_order<S: Server>() {
    let server = S::start();
    let mut component = server.component().await;
    for n in 0..20 {
        server.create_user(&format!("user{n}"), &format!("pw{n}"));
    }
    let logins = (0..20).map(|n| server.login(&format!("user{n}")));
    let clients = futures::future::join_all(logins).await;

    for i in 0..10 {
        for client in &clients {
            component.queue(headline(client.jid(), &i.to_string()));
        }
    }
    let checks = clients.into_iter().map(|mut client| async move {
        for i in 0..10 {
            let message = client.next_message(SHORT).await.unwrap_or_else(|| panic!("{}: push {i}", client.jid()));
            assert_eq!(body(&message), Some(i.to_string()), "{}", client.jid());
        }
        client.close().await;
    });
    futures::future::join_all(checks).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_prosody_clients_get_their_pushes_in_order() {
    many_concurrent_clients_get_their_pushes_in_order::<Prosody>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_ejabberd_clients_get_their_pushes_in_order() {
    many_concurrent_clients_get_their_pushes_in_order::<Ejabberd>().await;
}

/// One scenario for any [`Server`]: what smartfeeds relies on from its host.
async fn basic_component_service<S: Server>() {
    let mut server = S::start();
    let name = server.name();
    let mut component = server.component().await;
    let mut alice = server.login("alice").await;
    disco_round_trip(&mut alice, &mut component).await;
    component.send(headline(alice.jid(), "hello")).await;
    let message = alice.next_message(SHORT).await.unwrap_or_else(|| panic!("{name}: no push"));
    assert_eq!(body(&message).as_deref(), Some("hello"));

    server.create_user("dave", "pw");
    server.login("dave").await.close().await;

    server.restart();
    component.wait_closed(SHORT).await.unwrap_or_else(|| panic!("{name}: component stream survives"));
    let mut alice = server.login("alice").await;
    // No component: an error from the server (the condition differs, see the module docs).
    let reply = alice.iq(disco_info_to(server.component_domain())).await;
    assert_eq!(stanza_type(&reply), "error", "{name}: {}", to_xml(&reply));
    let mut component = server.component().await;
    disco_round_trip(&mut alice, &mut component).await;
    assert!(server.log_tail(5).lines().count() > 1, "{name}");
}

#[tokio::test]
async fn the_same_scenario_runs_against_prosody_and_ejabberd() {
    basic_component_service::<Prosody>().await;
    basic_component_service::<Ejabberd>().await;
}

#[test]
fn config_templates_render_without_leftover_placeholders() {
    let config = testkit::server::prosody::render_config(1, 2, "/tmp/x", "s", "info").expect("renders");
    assert!(config.contains("c2s_ports = { 1 }"));
    assert!(config.contains("component_ports = { 2 }"));
    assert!(config.contains(r#"Component "feeds.localhost""#));
    assert!(config.contains(r#"component_secret = "s""#));
    assert_eq!(testkit::xml::base64(b"\0alice\0password"), "AGFsaWNlAHBhc3N3b3Jk");
    assert_eq!(testkit::xml::base64(b"ab"), "YWI=");

    let config = testkit::server::ejabberd::render_config(1, 2, 3, "s", "info").expect("renders");
    assert!(config.contains("port: 1\n    ip: \"127.0.0.1\"\n    module: ejabberd_c2s"), "{config}");
    assert!(config.contains("port: 2\n    ip: \"127.0.0.1\"\n    module: ejabberd_service"), "{config}");
    assert!(config.contains("port: 3\n    ip: \"127.0.0.1\"\n    module: ejabberd_http"), "{config}");
    assert!(config.contains("feeds.localhost:\n        password: \"s\""), "{config}");
    assert!(config.contains("bench.localhost:\n        password: \"s\""), "{config}");
    assert!(config.contains("loglevel: info"));
    let ctl = testkit::server::ejabberd::render_ctl_config("n_1@localhost", 4, "c00kie", "/tmp/x").expect("renders");
    for line in [
        "ERLANG_NODE=n_1@localhost",
        "ERL_DIST_PORT=4",
        "ERL_EPMD_ADDRESS=127.0.0.1",
        "SPOOL_DIR=/tmp/x/spool",
        "LOGS_DIR=/tmp/x/logs",
        "CONFIG_DIR=/tmp/x",
    ] {
        assert!(ctl.lines().any(|l| l == line), "{line} missing in\n{ctl}");
    }
    assert!(ctl.contains("-setcookie c00kie "), "{ctl}");
    assert!(testkit::server::ejabberd::render_config(1, 2, 3, "a\"b", "info").is_err());
    assert!(testkit::server::ejabberd::render_ctl_config("n m", 4, "c", "/tmp/x").is_err());
    let ctl = testkit::server::ejabberd_cluster::render_cluster_ctl_config("n_a@localhost", 5, "c00kie", "/tmp/x")
        .expect("renders");
    for line in ["ERLANG_NODE=n_a@localhost", "ERL_DIST_PORT=", "export ERL_EPMD_PORT=5"] {
        assert!(ctl.lines().any(|l| l == line), "{line} missing in\n{ctl}");
    }
    assert!(ctl.contains("ERL_OPTIONS=\"-start_epmd false -setcookie c00kie "), "{ctl}");
}
