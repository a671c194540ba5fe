//! Arbitrary bytes as a source's document (SPEC §13), read the way a fetch reads it: Atom
//! through quick-xml into minidom (entries kept as written), anything else through feed-rs
//! and written as Atom; then every entry's item id, payload and fields. Nothing may panic
//! or hang, whatever a remote server sends.
#![no_main]

use feed::service::IncomingChange;
use libfuzzer_sys::fuzz_target;

fuzz_target!(
    // libFuzzer's hook aborts on every panic, even one the code under test catches on
    // purpose (minidom's writer panics on some entries; entry_fields refuses them): the
    // default hook again. A panic that is not caught still aborts the run.
    init: drop(std::panic::take_hook()),
    |data: &[u8]| {
        let Ok(doc) = sources::document::parse(data) else { return };
        let _ = (&doc.prev_archive, &doc.hub, &doc.self_link, doc.skipped);
        for entry in &doc.entries {
            assert_eq!(entry.id.len(), 32, "item ids are 128 bits in hex");
            if let IncomingChange::Entry(e) = &entry.change {
                // A stored payload is read back when it is served: it must parse alone.
                let back: Result<minidom::Element, _> = e.xml.parse();
                assert!(back.is_ok(), "the stored entry does not parse: {}", e.xml);
                let _ = (e.author.as_ref().map(String::len), e.categories.len());
            }
        }
    }
);
