//! Bus profiles (docs/sources.md): a profile directory (or the built-in
//! `librescoot` one) read, checked and lowered into the bundle's
//! `rulecore::profile::Profile`, with the [`Catalogue`] `rulec check`
//! holds rules against.

pub mod catalogue;

pub use catalogue::Catalogue;
