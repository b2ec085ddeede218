//! docs/bundle.md: the loader "never panics on any input" — and a small file
//! cannot make it allocate a lot: a length prefix claiming gigabytes is
//! refused before anything that large is reserved. Counted with a
//! per-thread allocator that tracks the peak of live heap bytes.

#![allow(unsafe_code)] // a GlobalAlloc impl is unsafe by definition; it only forwards to System
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rulecore::codec::{decode, frame, BundleError};
use std::cell::Cell;

mod counting;
use counting::{LIVE, PEAK};

/// The most heap `f` holds at once, beyond what was live before.
fn peak_during(f: impl FnOnce()) -> usize {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    f();
    PEAK.with(Cell::get) - base
}

/// postcard's varint encoding of `n`.
fn varint(mut n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// `prefix`, then a length claiming 4 GiB (or 2^62) entries, then 2 KB of
/// filler, framed.
fn claiming(prefix: &[u8], claim: u64) -> Vec<u8> {
    let mut body = prefix.to_vec();
    body.extend(varint(claim));
    body.extend(std::iter::repeat_n(0x01u8, 2048));
    frame(&body)
}

const LIMIT: usize = 4 << 20;

#[test]
fn huge_length_prefixes_allocate_little() {
    let claims = [u64::from(u32::MAX), 1 << 32, 1 << 62];
    // Where the lie sits: the compiler version string, the file table, the
    // runs of rules per file, the rules vector, the first rule's name, its
    // `on` patterns, its `when` ops, its options' `cancel_on` patterns.
    let prefixes: [&[u8]; 8] = [
        &[],
        &[0x00],
        &[0x00, 0x00],
        &[0x00, 0x00, 0x00],
        // version "", files [""], runs [1 rule in file 0], 1 rule
        &[0x00, 0x01, 0x00, 0x01, 0x00, 0x01, 0x01],
        // ... name "", enabled, Restart
        &[0x00, 0x01, 0x00, 0x01, 0x00, 0x01, 0x01, 0x00, 0x01, 0x00],
        // ... on [], when Some(..)
        &[
            0x00, 0x01, 0x00, 0x01, 0x00, 0x01, 0x01, 0x00, 0x01, 0x00, 0x00, 0x01,
        ],
        // ... on [], no when, steps [], options Some(..)
        &[
            0x00, 0x01, 0x00, 0x01, 0x00, 0x01, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x01,
        ],
    ];
    for prefix in prefixes {
        for claim in claims {
            let bytes = claiming(prefix, claim);
            let mut result = None;
            let peak = peak_during(|| result = Some(decode(&bytes)));
            let result = result.unwrap();
            assert!(
                matches!(result, Err(BundleError::Decode(_))),
                "prefix {prefix:?}, claim {claim}: {result:?}"
            );
            assert!(
                peak < LIMIT,
                "prefix {prefix:?}, claim {claim}: {peak} bytes at peak for a {}-byte file",
                bytes.len()
            );
        }
    }
}

#[test]
fn a_header_claiming_a_huge_payload_allocates_nothing_for_it() {
    let mut bytes = frame(&[0u8; 2048]);
    bytes[42..50].copy_from_slice(&(4u64 << 30).to_le_bytes());
    let mut result = None;
    let peak = peak_during(|| result = Some(decode(&bytes)));
    assert!(matches!(
        result.unwrap(),
        Err(BundleError::Truncated { declared, .. }) if declared == 4 << 30
    ));
    assert!(peak < 64 * 1024, "{peak}");
}

/// Random bodies behind a valid header, rich in long varints (runs of
/// `0xff`), so that length prefixes claim huge counts at random places: none
/// may make the decoder reserve much. Fixed seed and count by default;
/// `RULES_FUZZ_SEED` / `RULES_FUZZ_SCALE` explore further (docs/fuzzing.md).
#[test]
fn random_bodies_allocate_little() {
    let fuzz =
        test_kit::fuzz::Fuzz::from_env("codec_alloc::random_bodies_allocate_little", 0xA110C)
            .unwrap();
    let mut rng = test_kit::fuzz::Rng::new(fuzz.seed());
    let mut next = move || rng.next_u64();
    for _ in 0..fuzz.cases(3_000) {
        let len = (next() % 512) as usize;
        let mut body = Vec::with_capacity(len);
        while body.len() < len {
            match next() % 8 {
                0 => body.extend(std::iter::repeat_n(0xffu8, 1 + (next() % 9) as usize)),
                1..=3 => body.push((next() % 4) as u8),
                _ => body.push(next() as u8),
            }
        }
        let bytes = frame(&body);
        let mut result = None;
        let peak = peak_during(|| result = Some(decode(&bytes)));
        assert!(
            peak < LIMIT,
            "{peak} bytes at peak for a {}-byte file: {body:02x?} -> {:?}",
            bytes.len(),
            result
        );
    }
}
