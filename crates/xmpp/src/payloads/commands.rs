//! XEP-0050 ad-hoc commands: the `<command/>` element (xmpp-parsers has none).

use xmpp_parsers::data_forms::DataForm;
use xso::{AsXml, FromXml};

/// `http://jabber.org/protocol/commands`.
pub const COMMANDS: &str = "http://jabber.org/protocol/commands";

/// `<command node sessionid action status>` with an optional data form and note.
#[derive(FromXml, AsXml, Debug, Clone, PartialEq)]
#[xml(namespace = COMMANDS, name = "command")]
pub struct Command {
    #[xml(attribute)]
    pub node: String,
    #[xml(attribute(default))]
    pub sessionid: Option<String>,
    /// `execute` (also when absent), `complete`, `next`, `prev` or `cancel`.
    #[xml(attribute(default))]
    pub action: Option<String>,
    /// In replies: `executing`, `completed` or `canceled`.
    #[xml(attribute(default))]
    pub status: Option<String>,
    #[xml(child(default))]
    pub actions: Option<Actions>,
    #[xml(child(default))]
    pub note: Option<Note>,
    #[xml(child(default))]
    pub form: Option<DataForm>,
}

/// `<actions execute="complete"><complete/></actions>`: what the client may do next.
#[derive(FromXml, AsXml, Debug, Clone, PartialEq)]
#[xml(namespace = COMMANDS, name = "actions")]
pub struct Actions {
    #[xml(attribute(default))]
    pub execute: Option<String>,
    #[xml(flag)]
    pub complete: bool,
}

/// `<note type="info|warn|error">text</note>`.
#[derive(FromXml, AsXml, Debug, Clone, PartialEq)]
#[xml(namespace = COMMANDS, name = "note")]
pub struct Note {
    #[xml(attribute(name = "type", default))]
    pub type_: Option<String>,
    #[xml(text)]
    pub text: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use minidom::Element;

    #[test]
    fn execute_request_and_completed_reply() {
        let el: Element =
            "<command xmlns='http://jabber.org/protocol/commands' node='stats' action='execute'/>".parse().unwrap();
        let c = Command::try_from(el).unwrap();
        assert_eq!((c.node.as_str(), c.action.as_deref()), ("stats", Some("execute")));
        let reply = Command {
            node: "stats".into(),
            sessionid: Some("s1".into()),
            action: None,
            status: Some("executing".into()),
            actions: Some(Actions { execute: Some("complete".into()), complete: true }),
            note: Some(Note { type_: Some("info".into()), text: "ok".into() }),
            form: None,
        };
        let xml = String::from(&Element::from(reply.clone()));
        assert!(xml.contains("<actions execute='complete'><complete/></actions>"), "{xml}");
        assert_eq!(Command::try_from(xml.parse::<Element>().unwrap()).unwrap(), reply);
    }
}
