//! ONE table from the core's errors to XEP-0060 / RFC 6120 stanza errors, each with a
//! `<text/>` that tells a human what was wrong.

use super::payloads::{PubSubErrorCondition as App, stanza_error};
use feed::FeedError;
use xmpp_parsers::stanza_error::{DefinedCondition as C, ErrorType as T, StanzaError};

/// The stanza error for a core error. Storage failures are logged by the caller and reported
/// without their details.
pub fn to_stanza_error(e: &FeedError) -> StanzaError {
    let text = e.to_string();
    let (t, c, app) = match e {
        FeedError::NodeNotFound(_) | FeedError::ItemNotFound(_) => (T::Cancel, C::ItemNotFound, None),
        FeedError::BadRequest(_) => (T::Modify, C::BadRequest, None),
        FeedError::InvalidPayload(_) => (T::Modify, C::BadRequest, Some(App::InvalidPayload)),
        FeedError::PayloadTooBig { .. } => (T::Modify, C::NotAcceptable, Some(App::PayloadTooBig)),
        FeedError::Forbidden(_) => (T::Auth, C::Forbidden, None),
        FeedError::ClosedNode => (T::Cancel, C::NotAllowed, Some(App::ClosedNode)),
        FeedError::InvalidJid(_) => (T::Modify, C::BadRequest, Some(App::InvalidJid)),
        FeedError::NotSubscribed(_) => (T::Cancel, C::UnexpectedRequest, Some(App::NotSubscribed)),
        FeedError::PolicyViolation(_) => (T::Wait, C::PolicyViolation, None),
        FeedError::NotImplemented(_) => (T::Cancel, C::FeatureNotImplemented, None),
        FeedError::Store(_) => {
            return stanza_error(T::Wait, C::InternalServerError, Some("storage failure, try again later"), None);
        }
    };
    stanza_error(t, c, Some(&text), app)
}

/// `feature-not-implemented` with `<unsupported feature="…"/>` (XEP-0060 §7 and §8).
pub fn unsupported(feature: &str, text: &str) -> StanzaError {
    stanza_error(T::Cancel, C::FeatureNotImplemented, Some(text), Some(App::Unsupported { feature: feature.into() }))
}

/// `feature-not-implemented` without a pubsub condition: a protocol option the service
/// does not implement outside XEP-0060 (MAM's `flip-page`).
pub fn not_implemented(text: &str) -> StanzaError {
    stanza_error(T::Cancel, C::FeatureNotImplemented, Some(text), None)
}

/// `service-unavailable`: the RFC 6120 answer to an iq payload we do not handle.
pub fn service_unavailable(text: &str) -> StanzaError {
    stanza_error(T::Cancel, C::ServiceUnavailable, Some(text), None)
}

/// `resource-constraint` (wait): the sender is over its request rate.
pub fn resource_constraint(text: &str) -> StanzaError {
    stanza_error(T::Wait, C::ResourceConstraint, Some(text), None)
}

/// `internal-server-error` (wait): something of ours failed; the caller logs what.
pub fn internal(text: &str) -> StanzaError {
    stanza_error(T::Wait, C::InternalServerError, Some(text), None)
}

/// `bad-request` for a request that did not parse.
pub fn bad_request(text: &str) -> StanzaError {
    stanza_error(T::Modify, C::BadRequest, Some(text), None)
}

/// `policy-violation` (modify): a request over one of the service's limits.
pub fn policy_violation(text: &str) -> StanzaError {
    stanza_error(T::Modify, C::PolicyViolation, Some(text), None)
}

/// `bad-request` with an application condition, for requests missing a part.
pub fn bad_request_app(text: &str, app: App) -> StanzaError {
    stanza_error(T::Modify, C::BadRequest, Some(text), Some(app))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_maps_to_its_condition() {
        let cases = [
            (FeedError::NodeNotFound("x".into()), C::ItemNotFound, None),
            (FeedError::InvalidPayload("x".into()), C::BadRequest, Some(App::InvalidPayload)),
            (FeedError::PayloadTooBig { size: 2, limit: 1 }, C::NotAcceptable, Some(App::PayloadTooBig)),
            (FeedError::ClosedNode, C::NotAllowed, Some(App::ClosedNode)),
            (FeedError::InvalidJid("x".into()), C::BadRequest, Some(App::InvalidJid)),
            (FeedError::NotSubscribed("x".into()), C::UnexpectedRequest, Some(App::NotSubscribed)),
            (FeedError::Forbidden("x".into()), C::Forbidden, None),
        ];
        for (e, c, app) in cases {
            let s = to_stanza_error(&e);
            assert_eq!(s.defined_condition, c, "{e:?}");
            assert_eq!(App::of(&s), app, "{e:?}");
            assert!(!s.texts.is_empty());
        }
    }

    #[test]
    fn storage_details_are_not_sent() {
        let e = FeedError::Store(feed::ports::StoreError::Backend("disk I/O error at /secret/path".into()));
        let s = to_stanza_error(&e);
        assert_eq!(s.defined_condition, C::InternalServerError);
        assert!(!s.texts.values().any(|t| t.contains("secret")));
    }
}
