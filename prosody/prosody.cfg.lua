-- Prosody 0.12 configuration for smartfeeds: local demo and end-to-end tests.
--
-- This file is a TEMPLATE. Placeholders of the form @NAME@ are replaced before use:
--   @C2S_PORT@        client-to-server port (demo: 5222)
--   @COMPONENT_PORT@  XEP-0114 external component port (demo: 5347)
--   @DATA@            absolute path of the run directory: data, pid file and log go there
--   @SECRET@          shared secret of the feeds.localhost and bench.localhost components
--                     (demo: "secret")
--   @LOG_LEVEL@       minimum log level: debug, info, warn or error (demo: info)
--   @PLUGIN_DIR@      absolute path of this directory (prosody/), where our own module
--                     mod_component_multicast.lua lives
-- prosody/start.sh fills them in for the demo; tests/common/server/prosody.rs does the same for
-- every test (free ports, temporary directory). Keep both in step with this file.
--
-- Everything listens on 127.0.0.1 only, without TLS: never expose this setup.

run_as_root = true            -- the test containers run as root; Prosody refuses otherwise
-- Foreground: start with `prosody -F --config FILE` (the 'daemonize' option is deprecated
-- in 0.12 and logs a warning); the caller manages the process.
pidfile = "@DATA@/prosody.pid"
data_path = "@DATA@"
certificates = "@DATA@/certs"  -- unused (no TLS); an empty directory avoids an error line
log = {
	{ levels = { min = "@LOG_LEVEL@" }, to = "file", filename = "@DATA@/prosody.log" };
}

admins = { "admin@localhost" }

-- Our own modules (mod_component_multicast) beside Prosody's.
plugin_paths = { "@PLUGIN_DIR@" }

-- Keep the module set minimal: what a c2s login, presence and iq routing need.
-- presence, message, iq, c2s (and offline) are loaded by Prosody itself.
modules_enabled = {
	"roster";    -- rosters; clients expect it
	"saslauth";  -- SASL authentication (PLAIN here)
	"disco";     -- service discovery; lists the components as disco items of localhost
	"ping";      -- XEP-0199 replies
	"posix";     -- pid file, run_as_root, signals
	"dialback";  -- server-to-server authentication (XEP-0220); disabled below with s2s
}
-- No server-to-server: nothing listens on 5269, so several instances can run side by side.
-- (The federation test, tests/common/federation.rs, puts its s2s settings in place of
-- these lines.)
modules_disabled = { "s2s"; "s2s_auth_certs"; "dialback"; "tls" }
s2s_ports = {}

-- A component's stream carries large stanzas in bursts (pages of 50 entries, fan-out to
-- thousands). Prosody's defaults read 4 KiB per turn of its loop and, while more is
-- waiting, pause that connection for at least 1 ms before the next 4 KiB; and they keep
-- Nagle's algorithm on, so the tail of a large write waits for the peer's delayed ACK.
-- Measured here (50-item pages, 32 in flight): 181 pages/s with the defaults, 356 with
-- these two settings, where Prosody's own CPU becomes the bound. They apply to every
-- connection, its own pubsub's included.
network_default_read_size = 65536
network_settings = { nagle = false }

interfaces = { "127.0.0.1" }
c2s_ports = { @C2S_PORT@ }
c2s_direct_tls_ports = {}
component_interfaces = { "127.0.0.1" }
component_ports = { @COMPONENT_PORT@ }

-- Plain-text login over loopback.
c2s_require_encryption = false
allow_unencrypted_plain_auth = true
authentication = "internal_plain"   -- accounts are @DATA@/localhost/accounts/NAME.dat
storage = "internal"

VirtualHost "localhost"

-- smartfeeds connects here (XEP-0114).
Component "feeds.localhost"
	component_secret = "@SECRET@"

-- XEP-0033 multicast, offered to feeds.localhost only (prosody/mod_component_multicast.lua):
-- smartfeeds finds it through disco#items on localhost and sends each change once per
-- view, with the subscribers as bcc addresses, instead of once per subscriber. Start Prosody
-- with SMARTFEEDS_PROSODY_MULTICAST=off in its environment to leave it out (smartfeeds
-- then sends one message per subscriber, as it does with any server without multicast).
if ENV_SMARTFEEDS_PROSODY_MULTICAST ~= "off" then
	Component "multicast.localhost" "component_multicast"
		multicast_senders = { "feeds.localhost" }
end

-- The load tool (smartfeeds-load) connects here, so it needs no client accounts: a
-- component may send from any JID of its domain (sub1@bench.localhost, …). Same secret.
Component "bench.localhost"
	component_secret = "@SECRET@"

-- The load tool's publisher, when it publishes apart from its subscribers
-- (smartfeeds-load fanout --publisher).
Component "publisher.localhost"
	component_secret = "@SECRET@"

-- The load tool as a service answering every items request with one canned page
-- (smartfeeds-load canned): the baseline of pulls through this server.
Component "canned.localhost"
	component_secret = "@SECRET@"

-- libervia-pubsub, the other external pubsub component (its Debian package, on
-- PostgreSQL), when scripts/bench-peers.sh runs it beside smartfeeds. Same secret.
Component "libervia.localhost"
	component_secret = "@SECRET@"

-- Prosody's own pubsub service, for side-by-side comparisons with smartfeeds
-- (scripts/bench-peers.sh). It keeps items in Prosody's file store ("internal"). The load
-- tool (bench.localhost) is an admin here so that it may create nodes.
Component "pubsub.localhost" "pubsub"
	admins = { "bench.localhost" }

-- Anonymous logins (SASL ANONYMOUS: a made-up name, gone when the session ends) on
-- anon.localhost, for the load tool's client sessions (smartfeeds-load fanout --sessions).
-- Left out unless Prosody starts with PROSODY_ANONYMOUS=1 in its environment.
if ENV_PROSODY_ANONYMOUS == "1" then
	VirtualHost "anon.localhost"
		authentication = "anonymous"
end

-- The same service with Prosody's in-memory store: nothing is written to disk, so nothing
-- survives a restart; its figures show what the file store costs.
Component "pubsub-mem.localhost" "pubsub"
	admins = { "bench.localhost" }
	storage = "memory"
