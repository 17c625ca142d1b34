//! Bodies of the cargo-fuzz targets on this crate's codecs (`fuzz/fuzz_targets/`). The targets
//! call them, and `tests/fuzz_corpus.rs` replays the committed corpus and seeded mutants of it
//! through them in the normal test suite. Each panics on a broken property.

use crate::wire::{emit, parse, WireHeader, HEADER_BYTES};

/// Arbitrary bytes into the Canary header decoder (what the UDP software switch parses off the
/// wire): no panic, every error names a field, and whatever decodes re-encodes to the same 19
/// bytes. The same bytes as a whole protocol frame (`wire::parse`): no panic, named errors, and
/// parse ∘ emit is the identity on what parses.
pub fn canary_header(data: &[u8]) {
    match WireHeader::decode(data) {
        Ok(h) => {
            let mut out = [0u8; HEADER_BYTES as usize];
            h.encode(&mut out);
            assert_eq!(&out[..], &data[..HEADER_BYTES as usize]);
        }
        Err(e) => assert!(!e.field.is_empty() && !e.reason.is_empty()),
    }
    match parse(data) {
        Ok((h, v)) => {
            let mut again = Vec::new();
            if emit(&h, Some(&v), &mut again).is_ok() {
                assert_eq!(parse(&again).expect("an emitted frame parses"), (h, v));
            }
        }
        Err(e) => assert!(!e.field.is_empty() && !e.reason.is_empty()),
    }
}
