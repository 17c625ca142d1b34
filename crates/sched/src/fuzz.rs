//! Body of the cargo-fuzz target on the MSCCL XML importer (`fuzz/fuzz_targets/msccl_import.rs`).
//! The target calls it, and `tests/fuzz_corpus.rs` replays the committed corpus
//! (`fuzz/corpus/msccl_import/`) and seeded mutants of it through it in the normal test suite.
//! It panics on a broken property.

/// Arbitrary bytes (as UTF-8) into the importer: no panic; every error names a reason; a
/// schedule it accepts passes the checker (it was proven) and has the XML's rank count.
pub fn msccl_xml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match crate::msccl_import::from_msccl_xml(text) {
        Ok(s) => {
            crate::check(&s).expect("an imported schedule passes the checker");
            assert_eq!(s.programs.len(), s.ranks as usize);
            assert!(s.algorithm.starts_with("msccl:"));
        }
        Err(e) => assert!(!e.is_empty()),
    }
}
