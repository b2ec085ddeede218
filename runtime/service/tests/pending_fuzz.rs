//! Random contents of `extensions:pending` against a real `redis-server`
//! (docs/service.md#pending-records-hash-extensionspending): reading them
//! for replay never fails and never hands over an oversized record or a
//! name that is not UTF-8, and the engine's replay of what was read never
//! panics. `cargo xtask fuzz` runs it with fresh seeds (docs/fuzzing.md).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use ruled::connection::connect_manager;
use ruled::record_store::{read_pending_scan, MAX_RECORD_BYTES};
use ruled_engine::{Engine, EngineConfig, Now, PENDING_HASH};
use std::sync::Arc;
use support::bundles::{hazards, single};
use support::{runtime, RedisServer};
use test_kit::fuzz::{Fuzz, Rng};

/// A valid record of the hazards rule's `off` step, to mutate.
fn valid_record(id: &str) -> Vec<u8> {
    let payload = single(hazards(30_000));
    let fingerprint = payload.rules[0].steps[1].fingerprint;
    format!(
        r#"{{"id":"{id}","rule":"hazards-on-alarm","source":"test.toml","step":1,"iter":0,"fire-at":{},"fingerprint":"{fingerprint}","event":{{"topic":"alarm.triggered","data":{{}}}}}}"#,
        1_700_000_000_000i64
    )
    .into_bytes()
}

fn random_bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| (rng.next_u64() & 0xff) as u8).collect()
}

/// One random field: a name (sometimes binary, huge or with newlines) and
/// a value (a record, a mutated record, junk, or oversized).
fn random_field(rng: &mut Rng, n: usize) -> (Vec<u8>, Vec<u8>) {
    let id = format!("hazards-on-alarm#1-{n}");
    let name = match rng.below(6) {
        0 => {
            let len = 1 + rng.below(40);
            random_bytes(rng, len)
        }
        1 => format!("bad\n{id}").into_bytes(),
        2 => vec![b'n'; 1000 + rng.below(2000)],
        _ => id.clone().into_bytes(),
    };
    let mut value = match rng.below(5) {
        0 => {
            let len = rng.below(200);
            random_bytes(rng, len)
        }
        1 => vec![b'{'; MAX_RECORD_BYTES - 10 + rng.below(20)],
        _ => valid_record(&id),
    };
    for _ in 0..rng.below(4) {
        if value.is_empty() {
            break;
        }
        let at = rng.below(value.len());
        value[at] = (rng.next_u64() & 0xff) as u8;
    }
    (name, value)
}

#[test]
fn random_pending_contents_never_stop_a_replay() {
    let fuzz = Fuzz::from_env(
        "pending_fuzz::random_pending_contents_never_stop_a_replay",
        7,
    )
    .unwrap();
    let redis = RedisServer::start();
    let payload = Arc::new(single(hazards(30_000)));
    runtime().block_on(async {
        let client = redis::Client::open(redis.url()).unwrap();
        let mut con = connect_manager(&client).await;
        for case in 0..fuzz.cases(40) as u64 {
            let mut rng = Rng::new(fuzz.seed().wrapping_add(case));
            let _: () = redis::cmd("DEL")
                .arg(PENDING_HASH)
                .query_async(&mut con)
                .await
                .unwrap();
            let fields = rng.below(60);
            for n in 0..fields {
                let (name, value) = random_field(&mut rng, n);
                let _: () = redis::cmd("HSET")
                    .arg(PENDING_HASH)
                    .arg(name)
                    .arg(value)
                    .query_async(&mut con)
                    .await
                    .unwrap();
            }
            let keep_all = |records: &[ruled_engine::PendingRecord]| vec![None; records.len()];
            let (records, _) =
                read_pending_scan(&mut con, &ruled::namespace::Namespace::default(), &keep_all)
                    .await
                    .unwrap();
            for record in &records {
                assert!(record.id.len() <= 1024, "case {case}: {:?}", record.id);
            }
            // Nothing over a bound is left in the store.
            let left: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL")
                .arg(PENDING_HASH)
                .query_async(&mut con)
                .await
                .unwrap();
            for (name, value) in &left {
                assert!(std::str::from_utf8(name).is_ok(), "case {case}: {name:?}");
                assert!(
                    name.len() <= 1024 && value.len() <= MAX_RECORD_BYTES,
                    "case {case}"
                );
            }
            let mut engine = Engine::new(Arc::clone(&payload), EngineConfig::default());
            let count = records.len();
            engine.replay(
                Now::new(ruled_engine::Time::ZERO, 1_700_000_000_000),
                records,
            );
            let drops = engine
                .drain_effects()
                .filter(|e| matches!(e, ruled_engine::Effect::DropRecord { .. }))
                .count();
            // Every record read is either removed or resumed.
            let resumed = engine.counters().runs_active as usize;
            assert_eq!(drops + resumed, count, "case {case}");
        }
    });
}
