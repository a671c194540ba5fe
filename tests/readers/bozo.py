"""Reads each document named on the command line (a URL, or a file) with feedparser, the
parser most Python feed readers use, and prints one JSON line per document: its name,
whether feedparser set its bozo flag (the document is not well-formed for it), why, and
the entries' titles and dates as feedparser read them. Exits 1 when any is bozo."""

import json
import sys

import feedparser

bozo = False
for name in sys.argv[1:]:
    d = feedparser.parse(name)
    bozo = bozo or bool(d.bozo)
    print(json.dumps({
        "name": name,
        "bozo": bool(d.bozo),
        "why": str(d.get("bozo_exception", "")),
        "version": d.get("version", ""),
        "entries": [
            {"title": e.get("title"), "published": e.get("published"), "updated": e.get("updated")}
            for e in d.entries
        ],
    }))
sys.exit(1 if bozo else 0)
