//! The service: tokio, Redis, the worker pool, processes and CAN, driving
//! the pure [`ruled_engine`] and performing its effects (docs/semantics.md).

pub mod action_log;
pub mod bounded_read;
pub mod bundle;
pub mod bus;
pub mod can;
pub mod clock;
pub mod connection;
pub mod control;
pub mod direct;
pub mod driver;
pub mod effect_log;
pub mod exec;
pub mod guard_read;
pub mod intake;
pub mod lane;
pub mod logging;
pub mod namespace;
pub mod notify;
pub mod owner;
pub mod pending_file;
pub mod pool;
pub mod pubsub;
pub mod rebuild;
pub mod record;
pub mod record_store;
pub mod resp;
pub mod rules_dir;
pub mod schedule;
pub mod signals;
pub(crate) mod socket;
pub mod stats;
pub mod subscriptions;
pub mod tls;
pub(crate) mod waker_slot;
