//! Ad-hoc commands (XEP-0050) as an admin runs them against smartfeeds: the request with
//! its form, and what the reply's form holds.

use minidom::Element;

use super::pubsub::DATA_FORMS;
use super::server::COMPONENT_DOMAIN;
use super::xml::{to_xml, xml};

/// The ad-hoc commands namespace.
pub const COMMANDS: &str = "http://jabber.org/protocol/commands";

/// Executes the command `node`, submitting the form `fields` (see [`field`]) when given.
pub fn command(node: &str, fields: Option<&str>) -> Element {
    let body = fields.map_or(String::new(), |f| format!("<x xmlns='{DATA_FORMS}' type='submit'>{f}</x>"));
    xml(&format!(
        "<iq type='set' to='{COMPONENT_DOMAIN}'><command xmlns='{COMMANDS}' node='{node}' action='execute'>{body}</command></iq>"
    ))
}

/// A form field with one value.
pub fn field(var: &str, value: &str) -> String {
    format!("<field var='{var}'><value>{value}</value></field>")
}

/// The values of the field `var` of the form in a command's reply; panics if the reply has
/// no command with a form.
#[track_caller]
pub fn values(reply: &Element, var: &str) -> Vec<String> {
    let cmd = reply.get_child("command", COMMANDS).unwrap_or_else(|| panic!("no command in {}", to_xml(reply)));
    let form = cmd.get_child("x", DATA_FORMS).unwrap_or_else(|| panic!("no form in {}", to_xml(reply)));
    form.children()
        .filter(|f| f.attr("var") == Some(var))
        .flat_map(|f| f.children().filter(|v| v.name() == "value").map(|v| v.text()))
        .collect()
}

/// The `status` of a command's reply (`completed`, …), or `""`.
pub fn status(reply: &Element) -> String {
    reply.get_child("command", COMMANDS).and_then(|c| c.attr("status")).unwrap_or("").to_string()
}
