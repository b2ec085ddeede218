//! `rulecore-io`: the files `rulec` and `ruled` read and write, kept out of
//! `rulecore` so that it stays pure data and functions. Every input file
//! (rule files, profiles, timelines, bundles, the Redis password and CA
//! files, the control key) is read by [`input_file::read_bounded`]: a
//! regular file only, whole, up to a bound. [`bundle_file`] reads a bundle
//! through it and writes one atomically.

pub mod bundle_file;
pub mod input_file;
