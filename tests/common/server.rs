//! One interface over the two real XMPP servers the end-to-end tests run against,
//! [`Prosody`] and [`Ejabberd`], so a scenario is written once and run against each:
//!
//! ```ignore
//! async fn pushes_arrive<S: Server>() {
//!     let server = S::start();
//!     let mut feeds = server.component().await;
//!     let mut alice = server.login("alice").await;
//!     …
//! }
//! #[tokio::test] async fn pushes_arrive_prosody() { pushes_arrive::<Prosody>().await }
//! #[tokio::test] async fn pushes_arrive_ejabberd() { pushes_arrive::<Ejabberd>().await }
//! ```
//!
//! Both types have the same inherent methods (which win when the concrete type is known);
//! this trait only forwards to them. [`Host`](super::host::Host), the server the e2e suite
//! runs against (`SMARTFEEDS_TEST_SERVER`), implements it too, so helpers such as
//! [`Smartfeeds::start`](super::smartfeeds::Smartfeeds::start) take any of the three. Where the servers differ in behaviour (errors for an
//! absent component, several connections per component domain, …), see the module docs of
//! each and `tests/harness_ejabberd.rs`.

use std::future::Future;
use std::path::Path;

use super::client::Client;
use super::component::Component;
use super::ejabberd::Ejabberd;
use super::prosody::Prosody;

/// A private XMPP server for one test: free loopback ports, a temporary directory, the demo
/// users (`admin`, `bot`, `alice`, `bob`, password `password`), the external components
/// `feeds.localhost` and `bench.localhost` (one port, one secret) and the server's own
/// pubsub service at `pubsub.localhost`. Killed on drop.
pub trait Server: Sized {
    /// `"prosody"` or `"ejabberd"`, for messages and test names.
    const NAME: &'static str;

    /// Starts a fresh instance; panics with the server's log tail if it does not come up.
    fn start() -> Self;
    /// The client-to-server port on 127.0.0.1 (plain TCP, SASL PLAIN).
    fn c2s_port(&self) -> u16;
    /// The XEP-0114 component port on 127.0.0.1.
    fn component_port(&self) -> u16;
    /// The component domain, `feeds.localhost`.
    fn component_domain(&self) -> &'static str;
    /// The virtual host, `localhost`.
    fn vhost(&self) -> &'static str;
    /// The component secret (unique per instance).
    fn secret(&self) -> &str;
    /// The instance's temporary directory.
    fn data_dir(&self) -> &Path;
    /// The last `lines` lines of the server's log and output.
    fn log_tail(&self, lines: usize) -> String;
    /// Creates (or resets the password of) `name@localhost`.
    fn create_user(&self, name: &str, password: &str);
    /// Deletes the account `name@localhost`.
    fn delete_user(&self, name: &str);
    /// The password of a user made by `create_user` (or a demo user).
    fn password(&self, name: &str) -> String;
    /// Whether the server process is running.
    fn is_running(&mut self) -> bool;
    /// Stops the server gracefully (clients get `<system-shutdown/>`).
    fn stop(&mut self);
    /// Kills the server with SIGKILL.
    fn kill(&mut self);
    /// Stops (if running) and starts again on the same ports with the same data.
    fn restart(&mut self);

    /// `127.0.0.1:PORT` of the component port, as smartfeeds' `[component] server` wants it.
    fn component_addr(&self) -> String {
        format!("127.0.0.1:{}", self.component_port())
    }

    /// Logs a known user in (the future does not borrow the server).
    fn login(&self, name: &str) -> impl Future<Output = Client> + Send + 'static {
        let (port, jid, password) = (self.c2s_port(), format!("{name}@{}", self.vhost()), self.password(name));
        async move { Client::connect(port, &jid, &password).await }
    }

    /// Connects a raw component as `feeds.localhost` with this instance's secret.
    fn component(&self) -> impl Future<Output = Component> + Send + 'static {
        self.component_as(self.component_domain())
    }

    /// Connects a raw component as `domain` (`feeds.localhost` or `bench.localhost`).
    fn component_as(&self, domain: &str) -> impl Future<Output = Component> + Send + 'static {
        let (port, domain, secret) = (self.component_port(), domain.to_string(), self.secret().to_string());
        async move { Component::connect(port, &domain, &secret).await }
    }
}

macro_rules! forward {
    ($ty:ty, $name:literal) => {
        impl Server for $ty {
            const NAME: &'static str = $name;

            fn start() -> Self {
                <$ty>::start()
            }
            fn c2s_port(&self) -> u16 {
                <$ty>::c2s_port(self)
            }
            fn component_port(&self) -> u16 {
                <$ty>::component_port(self)
            }
            fn component_domain(&self) -> &'static str {
                <$ty>::component_domain(self)
            }
            fn vhost(&self) -> &'static str {
                <$ty>::vhost(self)
            }
            fn secret(&self) -> &str {
                <$ty>::secret(self)
            }
            fn data_dir(&self) -> &Path {
                <$ty>::data_dir(self)
            }
            fn log_tail(&self, lines: usize) -> String {
                <$ty>::log_tail(self, lines)
            }
            fn create_user(&self, name: &str, password: &str) {
                <$ty>::create_user(self, name, password)
            }
            fn delete_user(&self, name: &str) {
                <$ty>::delete_user(self, name)
            }
            fn password(&self, name: &str) -> String {
                <$ty>::password(self, name)
            }
            fn is_running(&mut self) -> bool {
                <$ty>::is_running(self)
            }
            fn stop(&mut self) {
                <$ty>::stop(self)
            }
            fn kill(&mut self) {
                <$ty>::kill(self)
            }
            fn restart(&mut self) {
                <$ty>::restart(self)
            }
        }
    };
}

forward!(Prosody, "prosody");
forward!(Ejabberd, "ejabberd");
