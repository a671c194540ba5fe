
"use strict";
// The page works without this script; with it, older items load in place, new ones arrive
// live through the view's event stream, and times in words stay fresh. Items are always
// rendered (and sanitised) by the server: the script asks the page for their HTML.
(() => {
  const list = document.getElementById("items");
  if (!list) return;
  const status = document.getElementById("status");
  const newestOnTop = list.dataset.newest === "top";
  const movesOnChange = list.dataset.by === "modified";
  const say = (text) => { status.textContent = text; };
  const byId = (id) => list.querySelector('li[data-id="' + CSS.escape(id) + '"]');

  // Times in words, as the server writes them; the exact time on hover in the visitor's zone.
  const units = [[31536000, "year"], [2592000, "month"], [86400, "day"], [3600, "hour"], [60, "minute"]];
  function ago(t) {
    const s = Math.floor((Date.now() - t) / 1000);
    for (const [len, unit] of units) {
      if (s >= len) { const n = Math.floor(s / len); return n + " " + unit + (n === 1 ? "" : "s") + " ago"; }
    }
    return "just now";
  }
  function freshen(root) {
    for (const el of root.querySelectorAll("time[datetime]")) {
      const t = Date.parse(el.dateTime);
      if (!Number.isNaN(t)) { el.textContent = ago(t); el.title = new Date(t).toLocaleString(); }
    }
  }
  freshen(document);
  setInterval(() => freshen(list), 30000);

  // A page of the server's, parsed (never run: parsed documents run no scripts).
  async function fetchPage(url) {
    const res = await fetch(url, { headers: { Accept: "text/html" } });
    if (!res.ok) throw new Error(res.status + " " + res.statusText);
    return new DOMParser().parseFromString(await res.text(), "text/html");
  }
  function focusItem(li) {
    const article = li.querySelector("article");
    article.tabIndex = -1;
    article.focus();
  }

  // Older items, in place; the link stays a plain link for everything but a plain click.
  document.addEventListener("click", async (event) => {
    const link = event.target.closest("a.older");
    if (!link || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    if (link.getAttribute("aria-busy") === "true") return;
    link.setAttribute("aria-busy", "true");
    say("Loading older items…");
    try {
      const doc = await fetchPage(link.href);
      const fresh = [...doc.querySelectorAll("#items > li")].filter((li) => !byId(li.dataset.id));
      for (const li of fresh) freshen(li);
      if (newestOnTop) list.append(...fresh); else list.prepend(...fresh);
      const nav = doc.querySelector("nav.paging");
      // The older page's own way on (its "newest" link is this page, already shown).
      nav?.querySelector("a.newest")?.remove();
      link.closest("nav.paging").replaceWith(nav || "");
      say(fresh.length + (fresh.length === 1 ? " older item" : " older items") + " loaded.");
      if (fresh.length) focusItem(newestOnTop ? fresh[0] : fresh[fresh.length - 1]);
    } catch (err) {
      link.removeAttribute("aria-busy");
      say("Older items could not be loaded (" + err.message + ").");
    }
  });

  // New items, live. Each event names an item; the server renders it for the page. Events
  // are handled one after the other, so items land in the order they came.
  const stream = list.dataset.stream;
  if (!stream) return;
  const liveText = newestOnTop ? "Live: new items appear at the top." : "Live: new items appear at the end.";
  let queue = Promise.resolve();
  async function arrive(event) {
    const id = JSON.parse(event.data).id;
    const doc = await fetchPage(list.dataset.item + encodeURIComponent(id));
    const li = doc.querySelector("li.item");
    if (!li) return;
    freshen(li);
    const old = byId(id);
    if (old && !movesOnChange) {
      old.replaceWith(li);
    } else {
      old?.remove();
      if (newestOnTop) list.prepend(li); else list.append(li);
      // The newest item names the tab, so it shows while the page is in the background.
      if (!li.classList.contains("retracted")) document.title = li.querySelector("h3").textContent.trim() + " · " + list.dataset.title;
    }
    document.querySelector("p.empty")?.remove();
    say(liveText + " Latest: " + li.querySelector("h3").textContent.trim());
  }
  const source = new EventSource(stream);
  const onEvent = (event) => { queue = queue.then(() => arrive(event)).catch((err) => say("A new item could not be shown (" + err.message + ").")); };
  source.addEventListener("item", onEvent);
  source.addEventListener("retract", onEvent);
  source.addEventListener("open", () => { say(liveText); document.documentElement.dataset.live = "open"; });
  source.addEventListener("error", () => { say("Reconnecting…"); document.documentElement.dataset.live = "reconnecting"; });
})();
