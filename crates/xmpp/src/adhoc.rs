//! XEP-0050 ad-hoc commands for admins: list feeds with counts, create a feed, show a
//! feed's subscribers, remove a subscription, statistics. Commands that need input answer
//! the first `execute` with a form and finish when it comes back; the form carries all the
//! state, so no session is kept between the two steps.

use super::payloads::commands::{Actions, COMMANDS, Command, Note};
use feed::FeedError;
use feed::ports::Store;
use feed::service::Service;
use xmpp_parsers::data_forms::{DataForm, DataFormType, Field, FieldType};

/// The commands, as `(node, name)` for disco#items.
pub const COMMAND_LIST: [(&str, &str); 5] = [
    ("list-feeds", "List feeds with their counts"),
    ("create-feed", "Create a feed"),
    ("subscribers", "Show a feed's subscribers"),
    ("remove-subscription", "Remove a subscription"),
    ("stats", "Statistics"),
];

/// The form each command asks for (`None`: it needs no input).
fn input_form(node: &str) -> Option<DataForm> {
    let field = |var: &str, label: &str| Field {
        label: Some(label.into()),
        required: true,
        ..Field::new(var, FieldType::TextSingle)
    };
    let fields = match node {
        "create-feed" => vec![field("name", "Feed name"), Field { required: false, ..field("title", "Title") }],
        "subscribers" => vec![field("feed", "Feed name")],
        "remove-subscription" => {
            vec![field("node", "Node (feed and view) as subscribed"), field("jid", "Subscribed JID")]
        }
        _ => return None,
    };
    Some(DataForm::new(DataFormType::Form, COMMANDS, fields))
}

fn value<'a>(form: &'a DataForm, var: &str) -> Option<&'a str> {
    form.fields.iter().find(|f| f.var.as_deref() == Some(var)).and_then(|f| f.values.first()).map(String::as_str)
}

fn required<'a>(form: &'a DataForm, var: &str) -> Result<&'a str, FeedError> {
    value(form, var)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| FeedError::BadRequest(format!("the form needs a value for {var}")))
}

fn lines(var: &str, label: &str, values: Vec<String>) -> Field {
    Field { label: Some(label.into()), values, ..Field::new(var, FieldType::TextMulti) }
}

fn reply(node: String, sessionid: String, status: &str) -> Command {
    Command {
        node,
        sessionid: Some(sessionid),
        action: None,
        status: Some(status.into()),
        actions: None,
        note: None,
        form: None,
    }
}

/// Runs one step of a command for `actor`.
pub async fn execute<S: Store>(svc: &Service<S>, actor: &str, cmd: Command) -> Result<Command, FeedError> {
    svc.check_admin(actor)?;
    if !COMMAND_LIST.iter().any(|(n, _)| *n == cmd.node) {
        return Err(FeedError::ItemNotFound(cmd.node));
    }
    let sessionid = cmd.sessionid.clone().unwrap_or_else(|| format!("{:016x}", rand::random::<u64>()));
    let mut out = reply(cmd.node.clone(), sessionid, "completed");
    if cmd.action.as_deref() == Some("cancel") {
        out.status = Some("canceled".into());
        return Ok(out);
    }
    // Commands with input: the first step hands out the form.
    let submitted = cmd.form.filter(|f| f.type_ == DataFormType::Submit);
    let needs_input = input_form(&cmd.node);
    if let (Some(form), None) = (&needs_input, &submitted) {
        out.status = Some("executing".into());
        out.actions = Some(Actions { execute: Some("complete".into()), complete: true });
        out.form = Some(form.clone());
        return Ok(out);
    }
    let input = submitted.unwrap_or_else(|| DataForm::new(DataFormType::Submit, COMMANDS, vec![]));
    let (note, fields) = match cmd.node.as_str() {
        "list-feeds" => {
            let feeds = svc.admin_feeds(actor).await?;
            let rows = feeds
                .iter()
                .map(|(f, subs)| match svc.sources().get(&f.name) {
                    Some(source) => {
                        format!("{}: {} items, {} subscriptions; {}", f.name, f.items, subs, source.describe())
                    }
                    None => format!("{}: {} items, {} subscriptions", f.name, f.items, subs),
                })
                .collect();
            (format!("{} feeds", feeds.len()), vec![lines("feeds", "Feeds", rows)])
        }
        "stats" => {
            let feeds = svc.admin_feeds(actor).await?;
            let items: u64 = feeds.iter().map(|(f, _)| f.items).sum();
            let subs: u64 = feeds.iter().map(|(_, s)| s).sum();
            let fields = vec![
                Field::text_single("feeds", &feeds.len().to_string()),
                Field::text_single("items", &items.to_string()),
                Field::text_single("subscriptions", &subs.to_string()),
            ];
            ("statistics".to_string(), fields)
        }
        "create-feed" => {
            let name = required(&input, "name")?;
            let created = svc.admin_create_feed(actor, name).await?;
            let note = if created { format!("feed {name} created") } else { format!("feed {name} already exists") };
            (note, vec![])
        }
        "subscribers" => {
            let feed = required(&input, "feed")?;
            let subs = svc.admin_subscribers(actor, feed).await?;
            let rows = subs.iter().map(|s| format!("{} {}", s.jid, s.node)).collect();
            (format!("{} subscriptions to {feed}", subs.len()), vec![lines("subscriptions", "JID and node", rows)])
        }
        "remove-subscription" => {
            let (node, jid) = (required(&input, "node")?, required(&input, "jid")?);
            svc.admin_unsubscribe(actor, node, jid).await?;
            (format!("{jid} is no longer subscribed to {node}"), vec![])
        }
        _ => unreachable!("checked against COMMAND_LIST above"),
    };
    out.note = Some(Note { type_: Some("info".into()), text: note });
    if !fields.is_empty() {
        out.form = Some(DataForm::new(DataFormType::Result_, COMMANDS, fields));
    }
    Ok(out)
}
