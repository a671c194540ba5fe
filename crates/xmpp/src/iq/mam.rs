//! `<query xmlns='urn:xmpp:mam:2' node queryid/>` (XEP-0313 on a pubsub node, XEP-0442): a
//! view's items as a message archive, paged with RSM like an items request, in the view's
//! order. The form's `start` and `end` bound the view's time (inclusive); XEP-0413's
//! `<order/>` picks the time that orders it. Result ids are cursors, as an items page's
//! `<first>` and `<last>`, so a MAM page and an items page of the view agree item for item
//! and either's ids page the other. Whoever may not pull the view gets the pull's error.

use super::pull::{paged, readable_and_generation, rsm_result};
use super::{Answer, Ctx, fail};
use crate::errors::{bad_request, internal, not_implemented};
use crate::mam_page::MamPage;
use crate::payloads::order_by::take_order;
use feed::ports::Store;
use feed::service::PullRequest;
use minidom::Element;
use std::sync::Arc;
use xmpp_parsers::data_forms::{DataForm, DataFormType, Field, FieldType};
use xmpp_parsers::mam;
use xmpp_parsers::ns;
use xmpp_parsers::stanza_error::StanzaError;

pub struct Mam {
    req: PullRequest,
    queryid: Option<String>,
}

impl Mam {
    pub fn parse(mut payload: Element) -> Result<Mam, StanzaError> {
        let order_by = take_order(&mut payload).map_err(|e| bad_request(&e))?;
        let q = mam::Query::try_from(payload).map_err(|e| bad_request(&format!("malformed MAM query: {e}")))?;
        let Some(node) = q.node else {
            return Err(bad_request(
                "a MAM query to this service names a node (a view): the service has no archive of its own",
            ));
        };
        if q.flip_page {
            return Err(not_implemented("flip-page (urn:xmpp:mam:2#extended) is not implemented"));
        }
        let (from, to) = match &q.form {
            Some(form) => window(form)?,
            None => (None, None),
        };
        let req = PullRequest { order_by, from, to, ..paged(node.0, q.set.as_ref()) };
        Ok(Mam { req, queryid: q.queryid.map(|q| q.0) })
    }

    pub fn node(&self) -> &str {
        &self.req.node
    }

    /// The page: kept for the feed's generation, or read and made of ready items (and kept).
    pub async fn apply<S: Store>(self, ctx: &Ctx<'_, S>) -> Result<Answer, StanzaError> {
        let req = self.req;
        let (view, generation) = readable_and_generation(ctx, &req.node).await?;
        if let Some(page) = ctx.ready.kept_mam(&req, generation) {
            return Ok(Answer::Mam { queryid: self.queryid, page });
        }
        let backwards = req.before.is_some() && req.after.is_none() && req.index.is_none();
        let page = ctx.svc.pull_view(&view, req.clone()).await.map_err(fail)?;
        let forms = ctx.ready.forms(&view.view().feed, &page.items);
        let made = MamPage::new(ctx.me, &req.node, &page, &forms, rsm_result(&page), backwards).map_err(|e| {
            tracing::error!(error = %e, node = %req.node, "a MAM page could not be written");
            internal("the page could not be written")
        })?;
        let made = Arc::new(made);
        ctx.ready.keep_mam(req, generation, made.clone());
        Ok(Answer::Mam { queryid: self.queryid, page: made })
    }
}

/// A `get` of the query: the form fields a query of the node may use (XEP-0313 §4.1.5),
/// answered to whoever may pull the node.
pub struct MamFields {
    node: Option<String>,
}

impl MamFields {
    pub fn parse(payload: &Element) -> MamFields {
        MamFields { node: payload.attr("node").map(str::to_string) }
    }

    pub fn node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    pub async fn apply<S: Store>(self, ctx: &Ctx<'_, S>) -> Result<Option<Element>, StanzaError> {
        let Some(node) = self.node else {
            return Err(bad_request(
                "a MAM query to this service names a node (a view): the service has no archive of its own",
            ));
        };
        let view = ctx.svc.readable_node(&ctx.actor, &node).map_err(fail)?;
        ctx.svc.generation(&view).await.map_err(fail)?;
        let field = |var: &str| Field { label: None, ..Field::new(var, FieldType::TextSingle) };
        let form = DataForm::new(DataFormType::Form, ns::MAM, vec![field("start"), field("end")]);
        Ok(Some(Element::builder("query", ns::MAM).append(Element::from(form)).build()))
    }
}

/// The `start` and `end` of a MAM form, Unix ms; any other field is refused by name.
fn window(form: &DataForm) -> Result<(Option<i64>, Option<i64>), StanzaError> {
    if let Some(t) = form.form_type()
        && t != ns::MAM
    {
        return Err(bad_request(&format!("the form's FORM_TYPE is {t}, not {}", ns::MAM)));
    }
    let (mut from, mut to) = (None, None);
    for field in &form.fields {
        match field.var.as_deref() {
            Some("FORM_TYPE") => {}
            Some("start") => from = Some(time(field, "start")?),
            Some("end") => to = Some(time(field, "end")?),
            Some(other) => {
                return Err(bad_request(&format!(
                    "the form field '{other}' is not supported on a view (start and end are)"
                )));
            }
            None => return Err(bad_request("a form field without a var")),
        }
    }
    Ok((from, to))
}

/// A field's one value as a time (XEP-0082), Unix ms.
fn time(field: &Field, name: &str) -> Result<i64, StanzaError> {
    let [value] = field.values.as_slice() else {
        return Err(bad_request(&format!("{name} takes one value")));
    };
    value
        .trim()
        .parse::<xmpp_parsers::date::DateTime>()
        .map(|t| t.0.timestamp_millis())
        .map_err(|_| bad_request(&format!("{name}: '{value}' is not a time (XEP-0082, as 2024-01-31T12:00:00Z)")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(inner: &str) -> Result<Mam, StanzaError> {
        let xml = format!("<query xmlns='urn:xmpp:mam:2' queryid='q1' node='news?order=created'>{inner}</query>");
        Mam::parse(xml.parse().unwrap())
    }

    fn form(fields: &str) -> String {
        format!(
            "<x xmlns='jabber:x:data' type='submit'><field var='FORM_TYPE' type='hidden'><value>urn:xmpp:mam:2</value></field>{fields}</x>"
        )
    }

    fn text(e: StanzaError) -> String {
        e.texts.values().next().cloned().unwrap_or_default()
    }

    #[test]
    fn a_query_is_a_pull_of_its_node_with_its_window_paging_and_order() {
        let inner = format!(
            "{}<set xmlns='http://jabber.org/protocol/rsm'><max>5</max><after>cursor:1_0_2</after></set>\
             <order xmlns='urn:xmpp:order-by:0' by='modification'/>",
            form(
                "<field var='start'><value>2024-01-01T00:00:00Z</value></field><field var='end'><value>2024-01-02T00:00:00.5Z</value></field>"
            )
        );
        let q = parse(&inner).unwrap_or_else(|e| panic!("{}", text(e)));
        assert_eq!(q.queryid.as_deref(), Some("q1"));
        assert_eq!(q.req.node, "news?order=created");
        assert_eq!((q.req.max, q.req.after.as_deref()), (Some(5), Some("cursor:1_0_2")));
        assert_eq!(q.req.order_by, Some(feed::OrderBy::Modified));
        assert_eq!((q.req.from, q.req.to), (Some(1_704_067_200_000), Some(1_704_153_600_500)));
    }

    #[test]
    fn bad_fields_times_orders_and_queries_without_a_node_are_refused_by_name() {
        let e = text(parse(&form("<field var='with'><value>a@b</value></field>")).err().unwrap());
        assert!(e.contains("'with'"), "{e}");
        let e = text(parse(&form("<field var='start'><value>yesterday</value></field>")).err().unwrap());
        assert!(e.contains("start") && e.contains("yesterday"), "{e}");
        let e = text(parse("<order xmlns='urn:xmpp:order-by:1' by='title'/>").err().unwrap());
        assert!(e.contains("'title'"), "{e}");
        let e = text(Mam::parse("<query xmlns='urn:xmpp:mam:2'/>".parse().unwrap()).err().unwrap());
        assert!(e.contains("node"), "{e}");
    }
}
