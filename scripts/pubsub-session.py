#!/usr/bin/python3
"""One scripted pubsub session, as alice@localhost (slixmpp, raw XML), against any
XEP-0060 service: disco, node creation, publishes, RSM pages, max_items, order-by,
subscribe (and whether the last item follows), a notification, MAM pages, the node's
meta-data, the service's nodes, the node's configuration. scripts/compare-libervia-pubsub.sh
runs it against libervia-pubsub and smartfeeds on one server, to compare their answers.

Every request and its raw reply go to OUT/NN-name.request.xml / .reply.xml; messages
received (notifications, MAM results) to OUT/NN-name.messages.xml.
Run with Debian's /usr/bin/python3 (python3-slixmpp).
"""
import argparse
import asyncio
import logging
import sys
import time
import xml.dom.minidom
from pathlib import Path

import slixmpp
from slixmpp.exceptions import IqError, IqTimeout
from slixmpp.xmlstream import ET
from slixmpp.xmlstream.handler import Callback
from slixmpp.xmlstream.matcher import MatchXPath

SERVICE = "pubsub.localhost"
NODE = "session"
PUBSUB = "http://jabber.org/protocol/pubsub"
RSM = "http://jabber.org/protocol/rsm"
MAM = "urn:xmpp:mam:2"
ATOM = "http://www.w3.org/2005/Atom"


def pretty(s: str) -> str:
    try:
        return xml.dom.minidom.parseString(s).toprettyxml(indent="  ").split("\n", 1)[1].rstrip()
    except Exception:
        return s


def entry(n: int) -> str:
    return (f"<entry xmlns='{ATOM}'><title>Entry {n}</title>"
            f"<id>urn:uuid:00000000-0000-0000-0000-00000000000{n}</id>"
            f"<updated>2024-01-0{n}T12:00:00Z</updated><published>2024-01-0{n}T12:00:00Z</published>"
            f"<author><name>alice</name></author><content type='text'>Body of entry {n}</content></entry>")


class Client(slixmpp.ClientXMPP):
    def __init__(self, jid, password, out: Path):
        super().__init__(jid, password)
        self.out = out
        self.step = 0
        self.messages = []          # (monotonic time, raw xml)
        self.new_message = asyncio.Event()
        self.ok = True
        self.add_event_handler("session_start", self.start)
        self.add_event_handler("failed_auth", lambda _: self.fail("auth failed"))
        # every <message/>, whatever its payload
        self.register_handler(Callback("all messages", MatchXPath("{jabber:client}message"), self.on_message))

    def fail(self, why):
        print("FAILED:", why)
        self.ok = False
        self.disconnect()

    def on_message(self, msg):
        self.messages.append((time.monotonic(), str(msg)))
        self.new_message.set()

    def save(self, name, suffix, text):
        path = self.out / f"{self.step:02d}-{name}.{suffix}.xml"
        path.write_text(text + "\n")
        return path

    async def request(self, name, itype, payload, to=None, show=True):
        """Send an iq with `payload` (raw XML); return (reply ET element, reply str, error?)"""
        self.step += 1
        iq = self.make_iq(id=self.new_id(), ito=to or SERVICE, itype=itype)
        iq.append(ET.fromstring(payload))
        req = str(iq)
        self.save(name, "request", pretty(req))
        t0 = time.monotonic()
        try:
            reply = await iq.send(timeout=15)
            err = False
        except IqError as e:
            reply = e.iq
            err = True
        except IqTimeout:
            self.save(name, "reply", "<!-- TIMEOUT (15 s) -->")
            print(f"\n=== {self.step:02d} {name}: TIMEOUT")
            return None, "", True
        dt = (time.monotonic() - t0) * 1000
        raw = str(reply)
        self.save(name, "reply", pretty(raw))
        print(f"\n=== {self.step:02d} {name}: {'ERROR ' if err else ''}reply in {dt:.1f} ms")
        if show:
            print(pretty(raw))
        return reply.xml, raw, err

    async def collect(self, since_index, seconds):
        """Messages received from index `since_index` on, waiting up to `seconds` for more."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.new_message.clear()
            try:
                await asyncio.wait_for(self.new_message.wait(), deadline - time.monotonic())
            except asyncio.TimeoutError:
                break
        return [m for _, m in self.messages[since_index:]]

    def save_messages(self, name, msgs):
        body = "\n".join(pretty(m) for m in msgs) if msgs else "<!-- no message received -->"
        self.save(name, "messages", body)
        print(f"--- {len(msgs)} message(s) for {name}:")
        print(body)

    async def start(self, _):
        try:
            await self.run_all()
        except Exception as e:  # keep going to disconnect
            logging.exception("client error")
            self.ok = False
        self.disconnect()

    async def run_all(self):
        self.send_presence()        # so that messages to the bare JID reach this resource
        await self.get_roster()

        # 1. disco#info of the service
        x, _, err = await self.request("disco-info-service", "get",
                                       "<query xmlns='http://jabber.org/protocol/disco#info'/>")
        if x is not None and not err:
            q = x.find("{http://jabber.org/protocol/disco#info}query")
            print("identities:", [(i.get("category"), i.get("type"), i.get("name"))
                                  for i in q.findall("{http://jabber.org/protocol/disco#info}identity")])
            feats = [f.get("var") for f in q.findall("{http://jabber.org/protocol/disco#info}feature")]
            print(f"features ({len(feats)}):")
            for f in feats:
                print("  ", f)

        # 2. create the node
        await self.request("create", "set", f"<pubsub xmlns='{PUBSUB}'><create node='{NODE}'/></pubsub>")

        # 3. publish 5 Atom entries
        for n in range(1, 6):
            await self.request(f"publish-e{n}", "set",
                               f"<pubsub xmlns='{PUBSUB}'><publish node='{NODE}'>"
                               f"<item id='e{n}'>{entry(n)}</item></publish></pubsub>", show=(n == 1))
            await asyncio.sleep(0.05)   # distinct timestamps

        # 4. items with RSM max=2, then the next page, then the last page
        rsm_first = None
        for name, rsm in (("items-rsm-max2", "<max>2</max>"),
                          ("items-rsm-page2", None),
                          ("items-rsm-lastpage", "<max>2</max><before/>"),
                          ("items-rsm-index", "<max>2</max><index>3</index>")):
            if rsm is None:
                rsm = f"<max>2</max><after>{rsm_last}</after>"
            x, _, err = await self.request(
                name, "get", f"<pubsub xmlns='{PUBSUB}'><items node='{NODE}'/>"
                             f"<set xmlns='{RSM}'>{rsm}</set></pubsub>", show=False)
            if x is not None and not err:
                ps = x.find(f"{{{PUBSUB}}}pubsub")
                ids = [i.get("id") for i in ps.iter(f"{{{PUBSUB}}}item")]
                s = ps.find(f"{{{RSM}}}set")
                print("item ids:", ids)
                print("RSM set:", pretty(ET.tostring(s, encoding="unicode")) if s is not None else None)
                if name == "items-rsm-max2" and s is not None:
                    rsm_last = s.findtext(f"{{{RSM}}}last")

        # 4a. without RSM: all items, then legacy max_items=2 (XEP-0060 "most recent")
        for name, attrs in (("items-all", ""), ("items-max_items2", " max_items='2'")):
            x, _, err = await self.request(
                name, "get", f"<pubsub xmlns='{PUBSUB}'><items node='{NODE}'{attrs}/></pubsub>", show=False)
            if x is not None and not err:
                ps = x.find(f"{{{PUBSUB}}}pubsub")
                print("item ids:", [i.get("id") for i in ps.iter(f"{{{PUBSUB}}}item")],
                      "| RSM set present:", ps.find(f"{{{RSM}}}set") is not None)

        # 4b. XEP-0413 order-by (libervia uses urn:xmpp:order-by:0), by creation
        x, _, err = await self.request(
            "items-orderby-creation", "get",
            f"<pubsub xmlns='{PUBSUB}'><items node='{NODE}'/>"
            f"<order xmlns='urn:xmpp:order-by:0' by='creation'/>"
            f"<set xmlns='{RSM}'><max>3</max></set></pubsub>", show=False)
        if x is not None and not err:
            print("item ids:", [i.get("id") for i in x.iter(f"{{{PUBSUB}}}item")])

        # 5. subscribe; does it send the last published item?
        i0 = len(self.messages)
        await self.request("subscribe", "set",
                           f"<pubsub xmlns='{PUBSUB}'><subscribe node='{NODE}' jid='{self.boundjid.bare}'/></pubsub>")
        self.save_messages("after-subscribe", await self.collect(i0, 2.0))

        # 6. publish one more: the notification
        i0 = len(self.messages)
        t0 = time.monotonic()
        await self.request("publish-e6", "set",
                           f"<pubsub xmlns='{PUBSUB}'><publish node='{NODE}'>"
                           f"<item id='e6'>{entry(6)}</item></publish></pubsub>")
        msgs = await self.collect(i0, 2.0)
        if len(self.messages) > i0:
            print(f"notification {1000 * (self.messages[i0][0] - t0):.1f} ms after the publish was sent")
        self.save_messages("notification", msgs)

        # 7. MAM on the node, RSM max 2, then the next page
        after = None
        for page in (1, 2):
            i0 = len(self.messages)
            qid = f"mamq{page}"
            rsm = "<max>2</max>" + (f"<after>{after}</after>" if after else "")
            x, raw, err = await self.request(
                f"mam-page{page}", "set",
                f"<query xmlns='{MAM}' node='{NODE}' queryid='{qid}'><set xmlns='{RSM}'>{rsm}</set></query>")
            msgs = await self.collect(i0, 0.3)
            self.save_messages(f"mam-page{page}", msgs)
            if x is not None and not err:
                fin = x.find(f"{{{MAM}}}fin")
                if fin is not None:
                    after = fin.findtext(f"{{{RSM}}}set/{{{RSM}}}last")

        # 7a. MAM last page (<before/>)
        i0 = len(self.messages)
        await self.request("mam-lastpage", "set",
                           f"<query xmlns='{MAM}' node='{NODE}' queryid='mamlast'>"
                           f"<set xmlns='{RSM}'><max>2</max><before/></set></query>")
        self.save_messages("mam-lastpage", await self.collect(i0, 0.3))

        # 7b. MAM form fields (what filters it offers)
        await self.request("mam-fields", "get", f"<query xmlns='{MAM}' node='{NODE}'/>")

        # 8. disco#info on the node (meta-data form) and disco#items of the service
        await self.request("disco-info-node", "get",
                           f"<query xmlns='http://jabber.org/protocol/disco#info' node='{NODE}'/>")
        await self.request("disco-items-service", "get",
                           "<query xmlns='http://jabber.org/protocol/disco#items'/>")
        # 9. node configuration (owner)
        await self.request("configure-get", "get",
                           f"<pubsub xmlns='{PUBSUB}#owner'><configure node='{NODE}'/></pubsub>")


def main():
    global SERVICE, NODE
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--service", default=SERVICE)
    ap.add_argument("--node", default=NODE)
    ap.add_argument("--debug", action="store_true")
    a = ap.parse_args()
    SERVICE, NODE = a.service, a.node
    logging.basicConfig(level=logging.DEBUG if a.debug else logging.WARNING)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for f in out.glob("[0-9][0-9]-*.xml"):
        f.unlink()
    c = Client("alice@localhost/client", "alicepass", out)
    c["feature_mechanisms"].unencrypted_plain = True   # PLAIN without TLS (loopback only)
    c.connect(("127.0.0.1", a.port), force_starttls=False, disable_starttls=True, use_ssl=False)
    c.loop.run_until_complete(c.disconnected)
    sys.exit(0 if c.ok else 1)


if __name__ == "__main__":
    main()
