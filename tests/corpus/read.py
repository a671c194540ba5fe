#!/usr/bin/python3
"""Reads one feed document as an independent parser does, and prints its entries as JSON.

    read.py URL FILE     (FILE "-" is standard input)

URL is where the document was served: relative links are resolved against it. XML
documents (Atom 0.3/1.0, RSS 0.9x/1.0/2.0) are read by Python's feedparser (Debian
python3-feedparser). feedparser 6.0 has no JSON Feed reader, so a JSON document is read
here by the field names of the JSON Feed 1.0 and 1.1 specifications, dates to UTC as
feedparser gives them.

Prints {"bozo": bool, "error": str|null, "entries": [{"id", "title", "link", "authors":
[{"name", "email"}], "categories", "published", "updated"}]}: absent values are null,
dates are UTC, "YYYY-MM-DDTHH:MM:SSZ".
"""

import datetime
import email.utils
import json
import sys
import time
import urllib.parse

try:
    import feedparser
except ImportError:
    sys.exit("python3-feedparser is not installed (Debian package python3-feedparser)")


def stamp(parsed):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", parsed) if parsed else None


def xml_entry(e):
    authors = [{"name": a.get("name"), "email": a.get("email")} for a in e.get("authors", []) if a]
    return {
        "id": e.get("id"),
        "title": e.get("title"),
        "link": e.get("link"),
        "authors": authors,
        "categories": [t.get("term") for t in e.get("tags", []) if t.get("term")],
        "published": stamp(e.get("published_parsed")),
        "updated": stamp(e.get("updated_parsed")),
    }


def json_date(text):
    if not isinstance(text, str):
        return None
    try:
        t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        # Not RFC 3339: an RFC 822 date, as feedparser would read it too.
        try:
            t = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    return t.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def people(item):
    return item.get("authors") or ([item["author"]] if isinstance(item.get("author"), dict) else [])


def json_entry(item, base, feed):
    """An item; without authors of its own, the feed's are its authors (JSON Feed 1.1)."""
    authors = people(item) or people(feed)
    url = item.get("url")
    return {
        "id": str(item["id"]) if item.get("id") is not None else None,
        "title": item.get("title"),
        "link": urllib.parse.urljoin(base, url) if isinstance(url, str) else None,
        "authors": [{"name": p.get("name"), "email": None} for p in authors if isinstance(p, dict)],
        "categories": [t for t in item.get("tags", []) if isinstance(t, str)],
        "published": json_date(item.get("date_published")),
        "updated": json_date(item.get("date_modified")),
    }


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    base, path = sys.argv[1], sys.argv[2]
    data = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()
    if data.lstrip()[:1] == b"{":
        try:
            doc = json.loads(data)
            out = {"bozo": False, "error": None, "entries": [json_entry(i, base, doc) for i in doc.get("items", [])]}
        except (ValueError, AttributeError, TypeError) as err:
            out = {"bozo": True, "error": str(err), "entries": []}
    else:
        d = feedparser.parse(data, response_headers={"content-location": base, "content-type": "application/xml"})
        out = {
            "bozo": bool(d.bozo),
            "error": str(d.get("bozo_exception")) if d.bozo else None,
            "version": d.version,
            "entries": [xml_entry(e) for e in d.entries],
        }
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    print()


main()
