//! The XMPP server the end-to-end tests run against, chosen at run time for the whole suite
//! by one switch, the environment variable `SMARTFEEDS_TEST_SERVER`:
//!
//! | value | server |
//! | --- | --- |
//! | `prosody` (or unset, or empty) | Prosody 0.12 ([`Prosody`]) |
//! | `ejabberd` | ejabberd 23.01 ([`Ejabberd`]) |
//!
//! Any other value panics (a typo must not silently test the default).
//!
//! ```text
//! let host = start_selected();                     // TestServer: Prosody or ejabberd
//! let feeds = Smartfeeds::start(&host, TABLES);    // the real smartfeeds, connected to it
//! if host.kind() == Kind::Ejabberd { … }           // where the two legitimately differ
//! ```

use std::fmt;

use super::{Ejabberd, Prosody, Server, TestServer};

/// The environment variable that selects the server.
pub const ENV: &str = "SMARTFEEDS_TEST_SERVER";

/// Which server a [`TestServer`] is (or [`Kind::from_env`] selects).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Prosody,
    Ejabberd,
}

/// Starts a fresh instance of the server `SMARTFEEDS_TEST_SERVER` selects: free ports, a new
/// temporary directory, the demo users. Panics with the server's log tail if it does not
/// come up.
pub fn start_selected() -> TestServer {
    Kind::from_env().start()
}

impl Kind {
    /// The server `SMARTFEEDS_TEST_SERVER` selects: `prosody` (the default) or `ejabberd`.
    /// Panics on any other value.
    pub fn from_env() -> Kind {
        match std::env::var(ENV) {
            Err(std::env::VarError::NotPresent) => Kind::Prosody,
            Ok(value) => Kind::parse(&value).unwrap_or_else(|| {
                panic!("{ENV}={value:?} is not a server the tests know: use `prosody` (the default) or `ejabberd`")
            }),
            Err(e) => panic!("{ENV} is not usable: {e}"),
        }
    }

    /// `prosody` / `ejabberd` (case-insensitive, surrounding blanks ignored); empty is Prosody.
    pub fn parse(value: &str) -> Option<Kind> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "prosody" => Some(Kind::Prosody),
            "ejabberd" => Some(Kind::Ejabberd),
            _ => None,
        }
    }

    /// `"prosody"` or `"ejabberd"`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Prosody => "prosody",
            Kind::Ejabberd => "ejabberd",
        }
    }

    /// Starts a fresh instance of this server without its multicast service (XEP-0033).
    pub fn start_without_multicast(self) -> TestServer {
        match self {
            Kind::Prosody => TestServer::<Prosody>::start_with(Prosody::without_multicast).into_dyn(),
            Kind::Ejabberd => TestServer::<Ejabberd>::start_with(Ejabberd::without_multicast).into_dyn(),
        }
    }

    /// Starts a fresh instance of this server, whatever the environment says.
    pub fn start(self) -> TestServer {
        match self {
            Kind::Prosody => Prosody::start().into_dyn(),
            Kind::Ejabberd => Ejabberd::start().into_dyn(),
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
