//! Which bounced pushes count toward `push.bounce_limit`.
//!
//! A push comes back as a `type="error"` message either because the recipient is gone for
//! good (the account was deleted: `service-unavailable`, type `cancel`) or because the way
//! to it is down for now. Only the first should ever cost a subscriber its subscriptions.
//!
//! The second case is what a subscriber on another server meets whenever her server is
//! down or unreachable: our server reports the failed server-to-server link itself, and not
//! always with a `wait` type. Prosody 0.12 bounces every stanza queued for a link it could
//! not open as `remote-server-not-found`, type `cancel` (and `remote-server-timeout`, type
//! `wait`, when the link died after the peer answered); ejabberd answers
//! `remote-server-not-found`, type `cancel`, when the peer's name does not resolve. Counted
//! as permanent, a few pushes during a remote server's maintenance window would unsubscribe
//! all of its users. So these two conditions are temporary whatever their type; a domain
//! that never comes back keeps its subscriptions until an admin removes them
//! (`remove-subscription`), which is the cheaper mistake.

use xmpp_parsers::stanza_error::{DefinedCondition, ErrorType, StanzaError};

/// Whether a bounce with this error (`None`: none could be read) says the recipient will
/// not take pushes again: `cancel` and `auth` errors, except the two link conditions above.
/// `wait` and `modify` errors may go away by trying again. A bounce without a readable
/// error is permanent, as RFC 6120 gives it no other meaning.
pub fn is_permanent(error: Option<&StanzaError>) -> bool {
    let Some(error) = error else { return true };
    if matches!(error.defined_condition, DefinedCondition::RemoteServerNotFound | DefinedCondition::RemoteServerTimeout)
    {
        return false;
    }
    matches!(error.type_, ErrorType::Cancel | ErrorType::Auth)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(type_: ErrorType, condition: DefinedCondition) -> StanzaError {
        StanzaError::new(type_, condition, "en", "")
    }

    #[test]
    fn an_unreachable_remote_server_is_temporary_whatever_the_type() {
        for type_ in [ErrorType::Cancel, ErrorType::Wait, ErrorType::Auth, ErrorType::Modify] {
            assert!(!is_permanent(Some(&error(type_.clone(), DefinedCondition::RemoteServerNotFound))));
            assert!(!is_permanent(Some(&error(type_, DefinedCondition::RemoteServerTimeout))));
        }
    }

    #[test]
    fn a_gone_recipient_is_permanent_and_wait_or_modify_is_not() {
        assert!(is_permanent(Some(&error(ErrorType::Cancel, DefinedCondition::ServiceUnavailable))));
        assert!(is_permanent(Some(&error(ErrorType::Auth, DefinedCondition::Forbidden))));
        assert!(!is_permanent(Some(&error(ErrorType::Wait, DefinedCondition::ResourceConstraint))));
        assert!(!is_permanent(Some(&error(ErrorType::Modify, DefinedCondition::NotAcceptable))));
        assert!(is_permanent(None));
    }
}
