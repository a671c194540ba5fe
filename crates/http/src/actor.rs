//! Who an HTTP request is, once its token (if any) is checked ([`crate::auth`]): what every
//! handler and the error mapping know of the requester.

/// The requester.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Actor {
    Anonymous,
    /// A bare JID, as configured for the token.
    Jid(String),
}

impl Actor {
    pub fn is_anonymous(&self) -> bool {
        matches!(self, Actor::Anonymous)
    }

    /// What the policy is asked about: the JID, or the empty string (which no rule names).
    pub fn as_str(&self) -> &str {
        match self {
            Actor::Anonymous => "",
            Actor::Jid(j) => j,
        }
    }
}
