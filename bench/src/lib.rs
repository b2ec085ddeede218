//! `cargo xtask bench box` lives in `benches/box.rs`; this library holds
//! the floor relay the service's benchmarks measure `ruled` against, and
//! its twin on tokio.

pub mod floor;
mod tokio_relay;
