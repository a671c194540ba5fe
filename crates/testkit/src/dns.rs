//! A DNS server the test drives: UDP on a free loopback port, answering `A` queries for the
//! names it is told about with the addresses it is told to, in turn, and recording what it
//! answered. Given to smartfeeds as `[outbound] nameservers`, it lets a test make a name
//! change its address between two lookups (DNS rebinding).
//!
//! ```ignore
//! let dns = Dns::start().await;
//! dns.answer("rebind.test", &["93.184.216.34", "127.0.0.1"]); // first, then every later query
//! // … smartfeeds looks the name up …
//! assert_eq!(dns.answered("rebind.test"), ["93.184.216.34", "127.0.0.1"]);
//! ```

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Inner {
    /// Name (lower case, no final dot) → the answers to give, the last one repeated.
    answers: HashMap<String, Vec<Ipv4Addr>>,
    /// Name → the addresses answered to its `A` queries, in order.
    answered: HashMap<String, Vec<Ipv4Addr>>,
}

/// The server; it stops with the test's runtime.
#[derive(Clone)]
pub struct Dns {
    /// `127.0.0.1:PORT`, for `[outbound] nameservers`.
    pub addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
}

impl Dns {
    pub async fn start() -> Dns {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.expect("a DNS port");
        let addr = socket.local_addr().expect("an address");
        let inner = Arc::new(Mutex::new(Inner::default()));
        let shared = inner.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok((n, from)) = socket.recv_from(&mut buf).await {
                if let Some(reply) = reply(&shared, &buf[..n]) {
                    let _ = socket.send_to(&reply, from).await;
                }
            }
        });
        Dns { addr, inner }
    }

    /// `name` answers `addrs[0]` to its first `A` query, `addrs[1]` to the next, and the
    /// last of them to every later one (with a TTL of 0: nothing may keep an answer).
    pub fn answer(&self, name: &str, addrs: &[&str]) {
        let addrs = addrs.iter().map(|a| a.parse().expect("an IPv4 address")).collect();
        self.inner.lock().unwrap().answers.insert(name.to_ascii_lowercase(), addrs);
    }

    /// The addresses answered to `name`'s `A` queries so far, in order.
    pub fn answered(&self, name: &str) -> Vec<String> {
        let inner = self.inner.lock().unwrap();
        inner
            .answered
            .get(&name.to_ascii_lowercase())
            .map(|a| a.iter().map(Ipv4Addr::to_string).collect())
            .unwrap_or_default()
    }
}

fn reply(inner: &Mutex<Inner>, query: &[u8]) -> Option<Vec<u8>> {
    let query = Message::from_vec(query).ok()?;
    let q = query.queries().first()?.clone();
    let name = q.name().to_ascii().trim_end_matches('.').to_ascii_lowercase();
    let mut answer = Message::new();
    answer
        .set_id(query.id())
        .set_message_type(MessageType::Response)
        .set_op_code(query.op_code())
        .set_recursion_desired(query.recursion_desired())
        .set_recursion_available(true)
        .set_authoritative(true)
        .add_query(q.clone());
    let mut inner = inner.lock().unwrap();
    let Some(addrs) = inner.answers.get(&name).cloned() else {
        answer.set_response_code(ResponseCode::NXDomain);
        return answer.to_vec().ok();
    };
    answer.set_response_code(ResponseCode::NoError);
    // Names told about have only IPv4 addresses: other types get an empty answer.
    if q.query_type() == RecordType::A {
        let given = inner.answered.entry(name).or_default();
        let ip = addrs[given.len().min(addrs.len() - 1)];
        given.push(ip);
        answer.add_answer(Record::from_rdata(q.name().clone(), 0, RData::A(A(ip))));
    }
    answer.to_vec().ok()
}
