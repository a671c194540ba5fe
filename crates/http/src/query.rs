//! The query string of a feed URL (SPEC §9): the view's own parameters (`order`, `author`,
//! `category`, kept as written so the core parses them as it parses a node name) and the
//! pull's (`since`, `until`, `max`, `timeout`, `callback`, `format`). An unknown, repeated, empty or
//! malformed parameter is a 400 naming it.

use super::bounds::percent_decode;
use super::errors::{ApiError, quote};
use super::formats::Format;
use feed::{NodeName, Position};

/// More parameters than this is refused before any is looked at.
const MAX_PARAMS: usize = 16;
/// A longer query string is refused.
pub const MAX_QUERY: usize = 8192;

/// A parsed feed-URL query.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeedQuery {
    /// The view parameters as written (`key=value`), in request order.
    pub view: Vec<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub max: Option<u64>,
    pub timeout: Option<u64>,
    pub callback: Option<String>,
    /// `format`: the answer's format, for clients that cannot set `Accept`.
    pub format: Option<Format>,
}

/// A key or value decoded (`+` is a space), or a 400 naming the parameter `what`.
fn decode(raw: &str, what: &str) -> Result<String, ApiError> {
    percent_decode(&raw.replace('+', " "))
        .map_err(|e| ApiError::bad_request(format!("parameter {:?} {}", quote(what), e.says())))
}

/// Whether `name` may be a JSON-P callback: `^[A-Za-z_$][A-Za-z0-9_$.]{0,63}$`.
pub fn valid_callback(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '$')
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.'))
}

impl FeedQuery {
    /// Parses a raw query string; `pull` says whether the pull parameters are allowed (the
    /// stream and archives take fewer).
    pub fn parse(raw: Option<&str>, allowed: &[&str]) -> Result<FeedQuery, ApiError> {
        let mut q = FeedQuery::default();
        let Some(raw) = raw.filter(|r| !r.is_empty()) else { return Ok(q) };
        if raw.split('&').nth(MAX_PARAMS).is_some() {
            return Err(ApiError::bad_request(format!("more than {MAX_PARAMS} parameters")));
        }
        if raw.len() > MAX_QUERY {
            return Err(ApiError::new(
                axum::http::StatusCode::URI_TOO_LONG,
                "bad-request",
                format!("the query string is longer than {MAX_QUERY} bytes"),
            ));
        }
        let mut seen: Vec<String> = Vec::new();
        for pair in raw.split('&') {
            if pair.is_empty() {
                return Err(ApiError::bad_request("empty parameter (a stray '&')"));
            }
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode(k, k)?;
            if !allowed.contains(&key.as_str()) {
                return Err(ApiError::bad_request(format!("unknown parameter {:?}", quote(&key))));
            }
            if seen.contains(&key) {
                return Err(ApiError::bad_request(format!("parameter {key:?} is given more than once")));
            }
            let value = decode(v, &key)?;
            if value.is_empty() {
                return Err(ApiError::bad_request(format!("parameter {key:?} is empty")));
            }
            // At most i64::MAX: the range the API description gives (`int64`, from 0); larger
            // values would be clamped anyway, but a client sending one has a bug to hear about.
            let number = |what: &str| {
                value.parse::<u64>().ok().filter(|n| i64::try_from(*n).is_ok()).ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "parameter {what:?} is not a whole number from 0 to {}: {:?}",
                        i64::MAX,
                        quote(&value)
                    ))
                })
            };
            let position = |what: &str| {
                Position::parse(&value)
                    .map(|_| value.clone())
                    .map_err(|e| ApiError::bad_request(format!("parameter {what:?}: {e}")))
            };
            match key.as_str() {
                "order" | "author" | "category" => q.view.push(pair.to_string()),
                "since" => q.since = Some(position("since")?),
                "until" => q.until = Some(position("until")?),
                "max" => q.max = Some(number("max")?),
                "timeout" => q.timeout = Some(number("timeout")?),
                "callback" if valid_callback(&value) => q.callback = Some(value),
                "format" => {
                    q.format = Some(Format::from_param(&value).ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "parameter \"format\" must be json, atom or json-feed: {:?}",
                            quote(&value)
                        ))
                    })?)
                }
                "callback" => {
                    return Err(ApiError::bad_request(format!(
                        "parameter \"callback\" must match ^[A-Za-z_$][A-Za-z0-9_$.]{{0,63}}$: {:?}",
                        quote(&value)
                    )));
                }
                _ => return Err(ApiError::bad_request(format!("unknown parameter {:?}", quote(&key)))),
            }
            seen.push(key);
        }
        Ok(q)
    }

    /// The node name of the view: `FEED` or `FEED?view params`, checked by the core's parser
    /// (a bad view parameter is 400 here, where XMPP says the node does not exist).
    pub fn node(&self, feed: &str) -> Result<(String, NodeName), ApiError> {
        let node = if self.view.is_empty() { feed.to_string() } else { format!("{feed}?{}", self.view.join("&")) };
        let name = NodeName::parse(&node).map_err(|e| match e {
            feed::node::NodeError::BadFeed(_) | feed::node::NodeError::Empty => {
                ApiError::not_found(format!("no such feed: {:?}", quote(feed)))
            }
            e => ApiError::bad_request(e.to_string()),
        })?;
        Ok((node, name))
    }

    /// The view parameters as a query string (`?…`), or nothing.
    pub fn view_query(&self) -> String {
        if self.view.is_empty() { String::new() } else { format!("?{}", self.view.join("&")) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &[&str] = &["order", "author", "category", "since", "until", "max", "timeout", "callback"];

    #[test]
    fn parameters_parse_and_bad_ones_are_named() {
        let q = FeedQuery::parse(Some("order=modified&since=cursor%3A1_0_2&max=5&callback=cb.x"), ALL).unwrap();
        assert_eq!(q.view, vec!["order=modified"]);
        assert_eq!(q.since.as_deref(), Some("cursor:1_0_2"));
        assert_eq!((q.max, q.callback.as_deref()), (Some(5), Some("cb.x")));
        for (raw, needle) in [
            ("sort=x", "sort"),
            ("max=1&max=2", "more than once"),
            ("max=", "empty"),
            ("max=x", "max"),
            ("max=9223372036854775808", "max"),
            ("timeout=-1", "timeout"),
            ("since=nope:1", "since"),
            ("callback=1x", "callback"),
            ("callback=a(b)", "callback"),
            ("max=1&&timeout=2", "empty"),
            ("author=%FF", "UTF-8"),
            ("author=%zz", "author"),
            ("since=id:%zz", "since"),
            ("%zz=1", "percent-escape"),
        ] {
            let e = FeedQuery::parse(Some(raw), ALL).unwrap_err();
            assert_eq!(e.status, 400, "{raw}");
            assert!(e.text.contains(needle), "{raw}: {}", e.text);
        }
        let many = vec!["max=1"; 10_000].join("&");
        assert!(FeedQuery::parse(Some(&many), ALL).unwrap_err().status.is_client_error());
        let q = FeedQuery::parse(Some("order=sideways"), ALL).unwrap();
        assert_eq!(q.node("f").unwrap_err().status, 400);
    }

    #[test]
    fn callbacks() {
        assert!(valid_callback("a") && valid_callback("$_.x9") && valid_callback(&"a".repeat(64)));
        assert!(!valid_callback("") && !valid_callback("9a") && !valid_callback(&"a".repeat(65)));
        assert!(!valid_callback("a-b") && !valid_callback("a;b"));
    }
}
