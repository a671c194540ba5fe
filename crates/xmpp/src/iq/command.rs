//! XEP-0050 `<command/>`: one step of an admin command (see [`crate::adhoc`]).

use super::{Ctx, fail};
use crate::adhoc;
use crate::errors::bad_request;
use crate::payloads::commands::Command;
use feed::ports::Store;
use minidom::Element;
use xmpp_parsers::stanza_error::StanzaError;

pub struct Run {
    command: Command,
}

impl Run {
    pub fn parse(payload: Element) -> Result<Run, StanzaError> {
        let command = Command::try_from(payload).map_err(|e| bad_request(&format!("malformed command: {e}")))?;
        Ok(Run { command })
    }

    pub fn node(&self) -> &str {
        &self.command.node
    }

    pub async fn apply<S: Store>(self, ctx: &Ctx<'_, S>) -> Result<Option<Element>, StanzaError> {
        let reply = adhoc::execute(ctx.svc, &ctx.actor, self.command).await.map_err(fail)?;
        Ok(Some(reply.into()))
    }
}
