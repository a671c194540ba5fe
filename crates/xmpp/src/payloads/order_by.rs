//! XEP-0413 Order-By: `<order by='creation|modification'/>` in a pubsub items request or a
//! MAM query, in the namespace of the XEP's version 0.2 (`urn:xmpp:order-by:1`) or of 0.1
//! (`urn:xmpp:order-by:0`, which Libervia 0.9 sends). It picks the time that orders the
//! view (the `created` or `modified` order of the feed); the direction stays the node's.

use feed::node::OrderBy;
use minidom::Element;

/// XEP-0413 version 0.2.
pub const ORDER_BY: &str = "urn:xmpp:order-by:1";
/// XEP-0413 version 0.1.
pub const ORDER_BY_0: &str = "urn:xmpp:order-by:0";

/// Takes the `<order/>` children out of `parent`: the time the first one orders by (any
/// further one would only break its ties, which the view's tie order does already), or why
/// it cannot be honoured.
pub fn take_order(parent: &mut Element) -> Result<Option<OrderBy>, String> {
    let mut first = None;
    for ns in [ORDER_BY, ORDER_BY_0] {
        while let Some(order) = parent.remove_child("order", ns) {
            let by = match order.attr("by") {
                Some("creation") => OrderBy::Created,
                Some("modification") => OrderBy::Modified,
                Some(other) => return Err(format!("cannot order by '{other}': by creation or modification")),
                None => return Err("an <order/> needs a 'by' (creation or modification)".into()),
            };
            first.get_or_insert(by);
        }
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(xml: &str) -> Result<Option<OrderBy>, String> {
        let mut e: Element = xml.parse().unwrap();
        let got = take_order(&mut e);
        assert!(e.children().all(|c| !c.is("order", ORDER_BY) && !c.is("order", ORDER_BY_0)), "taken out");
        got
    }

    #[test]
    fn both_versions_pick_the_time_and_anything_else_is_refused_by_name() {
        let q = |inner: &str| format!("<query xmlns='urn:xmpp:mam:2'>{inner}</query>");
        assert_eq!(order(&q("<order xmlns='urn:xmpp:order-by:1' by='creation'/>")), Ok(Some(OrderBy::Created)));
        assert_eq!(order(&q("<order xmlns='urn:xmpp:order-by:0' by='modification'/>")), Ok(Some(OrderBy::Modified)));
        assert_eq!(order(&q("")), Ok(None));
        let both =
            "<order xmlns='urn:xmpp:order-by:1' by='modification'/><order xmlns='urn:xmpp:order-by:1' by='creation'/>";
        assert_eq!(order(&q(both)), Ok(Some(OrderBy::Modified)), "the first one orders");
        let err = order(&q("<order xmlns='urn:xmpp:order-by:1' by='title'/>")).unwrap_err();
        assert!(err.contains("'title'"), "{err}");
        assert!(order(&q("<order xmlns='urn:xmpp:order-by:1'/>")).is_err());
    }
}
