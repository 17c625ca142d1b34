//! Bodies of the cargo-fuzz targets on this crate's codecs (`fuzz/fuzz_targets/`). The targets
//! call them, and `tests/fuzz_corpus.rs` replays the committed corpus and seeded mutants of it
//! through them in the normal test suite. Each panics on a broken property.

use crate::pool_wire;
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

/// Arbitrary bytes into the pool protocols' frame decoder (`pool_wire::parse_into`, what the
/// software switch and its hosts parse off the wire for SwitchML, ATP and DSA): no panic, every
/// error names a field, the flag accessors never panic, and a frame that parses is exactly the
/// frame `emit` makes of the packet (with the frame's ECN mark and tree child set again).
pub fn pool_frame(data: &[u8]) {
    let (ecn, child) = (pool_wire::ecn(data), pool_wire::tree_child(data));
    let mut values = vec![0i32; u16::MAX as usize];
    match pool_wire::parse_into(data, &mut values) {
        Ok(p) => {
            assert!(p.well_formed());
            let mut again = Vec::new();
            pool_wire::emit(&p, Some(&values[..p.elems as usize]), &mut again).expect("a parsed packet emits");
            if ecn {
                pool_wire::mark_ecn(&mut again);
            }
            if let Some(c) = child {
                pool_wire::set_tree_child(&mut again, c);
            }
            assert_eq!(again, data);
        }
        Err(e) => assert!(!e.field.is_empty() && !e.reason.is_empty()),
    }
    // The addressed form (the registry's ATP and DSA allreduces) of the same bytes: what parses
    // emits back to the same frame.
    let mut addressed = data.to_vec();
    if let Some(m) = addressed.first_mut() {
        *m = pool_wire::MAGIC_ADDRESSED;
    }
    match pool_wire::parse_addressed(&addressed) {
        Ok((h, payload)) => {
            let mut v = vec![0i32; payload.len() / 4];
            crate::wire::values_into(payload, &mut v).expect("whole words");
            let mut again = Vec::new();
            pool_wire::emit_addressed(&h, Some(&v), &mut again).expect("a parsed header emits");
            assert_eq!(again, addressed);
        }
        Err(e) => assert!(!e.field.is_empty() && !e.reason.is_empty()),
    }
}
