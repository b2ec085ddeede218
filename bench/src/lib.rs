//! `cargo xtask bench box` lives in `benches/box.rs`; this library holds
//! the floor relay the service's benchmarks measure `ruled` against.

pub mod floor;
