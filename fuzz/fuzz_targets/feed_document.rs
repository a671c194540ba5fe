//! Arbitrary bytes as a feed document fetched from the web (Atom, RSS, JSON Feed), read with
//! feed-rs as sources (SPEC §13) will read them, and every field an imported entry is made
//! of looked at. Nothing may panic or hang, whatever a remote server sends.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(doc) = feed_rs::parser::parse(data) else { return };
    for link in &doc.links {
        let _ = (&link.href, &link.rel);
    }
    for entry in &doc.entries {
        let key =
            if entry.id.is_empty() { entry.links.first().map(|l| l.href.as_str()) } else { Some(entry.id.as_str()) };
        let _ = key.map(str::len);
        let _ = (entry.published, entry.updated);
        let _ = entry.title.as_ref().map(|t| t.content.len());
        let _ = entry.summary.as_ref().map(|t| t.content.len());
        let _ = entry.content.as_ref().and_then(|c| c.body.as_ref()).map(String::len);
        let _ = entry.authors.iter().map(|a| a.name.len()).sum::<usize>();
        let _ = entry.categories.iter().map(|c| c.term.len()).sum::<usize>();
    }
});
