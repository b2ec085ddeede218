//! `cargo xtask bench box` lives in `benches/box.rs`; this library is empty.
