"""Pages a pubsub node with slixmpp's own RSM iterator (XEP-0059) and queries it with its
own MAM iterator (XEP-0313), as a client that nobody here wrote would: the test compares
what it prints with the service's own pulls.

Usage: /usr/bin/python3 slixmpp_reader.py PORT JID PASSWORD SERVICE NODE MAX
Prints one JSON object: {"rsm": [[ids of each page]...], "rsm_sets": [...],
"mam": [[item ids of each page]...], "mam_ids": [[result ids]...], "complete": [...]}.

slixmpp 1.8's MAM query names no `node` (XEP-0442 adds it for pubsub archives): the one
attribute is set on the query the plugin builds, everything else is the plugin's.
"""

import asyncio
import json
import logging
import sys

import slixmpp
from slixmpp.xmlstream import register_stanza_plugin


async def main():
    port, jid, password, service, node, amount = sys.argv[1:7]
    amount = int(amount)
    xmpp = slixmpp.ClientXMPP(jid, password)
    for plugin in ("xep_0030", "xep_0059", "xep_0060", "xep_0297", "xep_0313"):
        xmpp.register_plugin(plugin)
    xmpp["feature_mechanisms"].unencrypted_plain = True
    started = asyncio.get_running_loop().create_future()
    xmpp.add_event_handler("session_start", lambda _: started.done() or started.set_result(True))
    xmpp.add_event_handler("failed_auth", lambda _: started.done() or started.set_exception(RuntimeError("auth failed")))
    xmpp.connect(address=("127.0.0.1", int(port)), force_starttls=False, disable_starttls=True)
    await asyncio.wait_for(started, 30)

    out = {"rsm": [], "rsm_sets": [], "mam": [], "mam_ids": [], "complete": []}
    # RSM: the library's iterator pages with <after> the last <last> until first@index +
    # the page's size reaches <count>.
    # slixmpp's pubsub stanza does not carry its RSM <set/> until the RSM plugin's stanza is
    # registered on it (its get_items(iterator=True) expects it to be).
    register_stanza_plugin(xmpp["xep_0060"].stanza.Pubsub, xmpp["xep_0059"].stanza.Set)
    query = xmpp.Iq(sto=service, stype="get")
    query["pubsub"]["items"]["node"] = node
    async for page in xmpp["xep_0059"].iterate(query, "pubsub", "items", amount=amount):
        items = page["pubsub"]["items"]
        out["rsm"].append([item["id"] for item in items])
        rsm = page["pubsub"]["rsm"]
        out["rsm_sets"].append({"first": rsm["first"], "first_index": rsm["first_index"], "last": rsm["last"],
                                "count": rsm["count"]})
        if len(out["rsm"]) > 1000:
            raise RuntimeError("RSM paging does not end")

    # MAM: the plugin's query and result collection, paged by the same iterator.
    mam = xmpp["xep_0313"]
    build = mam._pre_mam_retrieve

    def with_node(*args, **kwargs):
        iq, mask = build(*args, **kwargs)
        iq["mam"].xml.set("node", node)
        return iq, mask

    mam._pre_mam_retrieve = with_node
    async for page in mam.retrieve(jid=slixmpp.JID(service), iterator=True, rsm={"max": amount}):
        results = page["mam"]["results"]
        ids, items = [], []
        for message in results:
            result = message["mam_result"]
            ids.append(result["id"])
            forwarded = result["forwarded"]["stanza"]
            event = forwarded.xml.find("{http://jabber.org/protocol/pubsub#event}event")
            item = event.find("{http://jabber.org/protocol/pubsub#event}items/{http://jabber.org/protocol/pubsub#event}item")
            items.append(item.get("id"))
        out["mam"].append(items)
        out["mam_ids"].append(ids)
        # slixmpp 1.8's Fin stanza has no `complete` interface: the attribute as received.
        fin = page.xml.find("{urn:xmpp:mam:2}fin")
        out["complete"].append(fin is not None and fin.get("complete") == "true")
        if len(out["mam"]) > 1000:
            raise RuntimeError("MAM paging does not end")
    print(json.dumps(out))
    xmpp.disconnect()


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main())
