-- mod_component_multicast: XEP-0033 (Extended Stanza Addressing) bcc multicast for the
-- external components named in this module's configuration, and for nobody else.
--
-- Why: a component that pushes the same message to thousands of users (smartfeeds'
-- notifications) otherwise writes, and Prosody parses, one full stanza per user. With this
-- service the component sends one message carrying the recipients in
-- <addresses xmlns="http://jabber.org/protocol/address"><address type="bcc" jid="…"/>…,
-- Prosody parses it once, and this module routes one copy per address. Prosody 0.12 ships
-- no XEP-0033 service of its own.
--
-- Load it as an internal component, a subdomain of the VirtualHost, so that disco#items on
-- the host lists it:
--
--   Component "multicast.example.com" "component_multicast"
--       multicast_senders = { "feeds.example.com" }   -- component domains allowed to use it
--       multicast_max_addresses = 10000               -- addresses per message (default)
--
-- What it does, and why each rule:
-- * Only messages from an external component whose domain is in `multicast_senders` are
--   multicast; any other sender (users, other components, other servers) gets `forbidden`
--   back, so this is never an open relay.
-- * Only `bcc` addresses are accepted (and no `delivered`, no `uri`, no extended types):
--   anything else is `bad-request`, and a message with more than `multicast_max_addresses`
--   addresses is `not-acceptable`. The message is checked whole before any copy leaves, so
--   a refused message delivers nothing and the sender can fall back to sending it itself.
-- * Each copy is the original message with its `to` set to one address and the
--   <addresses/> element left out (XEP-0033 §4.6: a bcc recipient must not see the list).
--   The copies share the other child elements of the parsed message (they are not deep
--   cloned: nothing on the delivery path changes them), so a copy costs a table, not a
--   re-parse or a tree copy.
-- * A copy is routed with the sender's own session as its origin, exactly as if the
--   component had sent it: delivery errors go back to the component from each recipient.
-- * disco#info on the service: identity service/multicast, the feature
--   http://jabber.org/protocol/address, and the limit as a XEP-0128 form (FORM_TYPE
--   http://jabber.org/protocol/address, field `message`), the form ejabberd's
--   mod_multicast answers with, so one client reads both.

local st = require "util.stanza";
local jid_prep = require "util.jid".prep;
local dataform = require "util.dataforms".new;

local core_post_stanza = prosody.core_post_stanza;
local full_sessions, bare_sessions, hosts = prosody.full_sessions, prosody.bare_sessions, prosody.hosts;

local xmlns_address = "http://jabber.org/protocol/address";

local senders, max_addresses;

-- The options, read at load and again whenever the configuration is reloaded (SIGHUP,
-- `prosodyctl reload`), so an operator can withdraw a component's right without a restart.
local function read_options()
	senders = module:get_option_set("multicast_senders", {});
	max_addresses = module:get_option_number("multicast_max_addresses", 10000, 1);
	module:log("info", "multicast offered to: %s (at most %d addresses)", tostring(senders), max_addresses);
	if senders:empty() then
		module:log("warn", "multicast_senders is empty: every multicast will be refused");
	end
end
read_options();
module:hook_global("config-reloaded", read_options);

module:depends("disco");
module:add_identity("service", "multicast", "Multicast for components");
module:add_feature(xmlns_address);
module:add_extension(dataform {
	{ name = "FORM_TYPE", type = "hidden", value = xmlns_address },
	{ name = "message", type = "text-single" },
}:form({ message = tostring(max_addresses) }, "result"));

-- The recipients of a message's <addresses/>, prepped, or nil and why not.
local function bcc_recipients(addresses)
	local recipients, n = {}, 0;
	for address in addresses:childtags("address", xmlns_address) do
		local attr = address.attr;
		if attr.type ~= "bcc" then
			return nil, "bad-request", "only bcc addresses are supported";
		elseif attr.uri or attr.node or attr.delivered then
			return nil, "bad-request", "addresses must be plain JIDs, not yet delivered";
		end
		local to = attr.jid;
		-- Prosody's router skips prepping for JIDs it already knows; do the same.
		if not (to and (full_sessions[to] or bare_sessions[to] or hosts[to])) then
			to = to and jid_prep(to);
			if not to then
				return nil, "jid-malformed", "an address is not a valid JID";
			end
		end
		n = n + 1;
		if n > max_addresses then
			return nil, "not-acceptable", "more than " .. max_addresses .. " addresses";
		end
		recipients[n] = to;
	end
	if n == 0 then
		return nil, "bad-request", "no addresses";
	end
	return recipients;
end

-- The message without its <addresses/>, sharing every other child with the original.
local function without(stanza, skip)
	local copy = st.clone(stanza, true); -- the top element and its attributes only
	local tags = copy.tags;
	for i = 1, #stanza do
		local child = stanza[i];
		if child ~= skip then
			copy[#copy + 1] = child;
			if child.name then
				tags[#tags + 1] = child;
			end
		end
	end
	return copy;
end

local function refuse(origin, stanza, error_type, condition, text)
	if stanza.attr.type ~= "error" then
		origin.send(st.error_reply(stanza, error_type, condition, text));
	end
	return true;
end

module:hook("message/host", function (event)
	local origin, stanza = event.origin, event.stanza;
	if stanza.attr.type == "error" then
		return true; -- a bounce of something we relayed: nothing to do with it
	end
	if origin.type ~= "component" or not senders:contains(origin.host) then
		module:log("debug", "refused multicast from %s (%s)", stanza.attr.from, origin.type);
		return refuse(origin, stanza, "auth", "forbidden", "multicast is only offered to configured components");
	end
	local addresses = stanza:get_child("addresses", xmlns_address);
	if not addresses then
		return refuse(origin, stanza, "modify", "bad-request", "no addresses element");
	end
	local recipients, condition, text = bcc_recipients(addresses);
	if not recipients then
		return refuse(origin, stanza, "modify", condition, text);
	end
	for i = 1, #recipients do
		local copy = without(stanza, addresses);
		copy.attr.to = recipients[i];
		core_post_stanza(origin, copy);
	end
	return true;
end);

-- XEP-0033 multicasts messages and presence; this service carries messages only.
module:hook("presence/host", function (event)
	local origin, stanza = event.origin, event.stanza;
	local t = stanza.attr.type;
	if t ~= "error" and stanza:get_child("addresses", xmlns_address) then
		return refuse(origin, stanza, "cancel", "service-unavailable", "only messages are multicast");
	end
	return true;
end);
