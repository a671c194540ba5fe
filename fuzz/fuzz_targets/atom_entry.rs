//! Arbitrary bodies through the check of an HTTP publish (`PUT`/`POST` of an Atom entry):
//! UTF-8, the XML declaration, the XML parser, the entry's fields. Nothing may panic, and an
//! accepted entry must be one Atom `<entry/>` within the size limit whose stored form parses
//! back to the same fields (it is what pulls and pushes serve).
#![no_main]

use libfuzzer_sys::fuzz_target;

const LIMIT: usize = 16 << 10;

fuzz_target!(
    // libFuzzer's hook aborts on every panic, even one the code under test catches on
    // purpose (minidom's writer panics on some entries; entry_fields refuses them): the
    // default hook again. A panic that is not caught still aborts the run.
    init: drop(std::panic::take_hook()),
    |data: &[u8]| {
        if let Ok(entry) = http::writes::entry_from_body(data, LIMIT) {
            assert!(entry.xml.len() <= LIMIT);
            let stored = feed::atom::parse_stored(&entry.xml).expect("a stored entry parses");
            let again = feed::atom::entry_fields(&stored).expect("a stored entry is an entry");
            assert_eq!(again.atom_id, entry.atom_id);
            assert_eq!(again.author, entry.author);
            assert_eq!(again.categories, entry.categories);
        }
    }
);
