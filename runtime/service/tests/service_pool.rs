//! The worker pool against a real `redis-server` and real processes
//! (docs/semantics.md#worker-pool-and-actions).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use rulecore::bundle::Action;
use rulecore::event::Event;
use ruled::can::CanSockets;
use ruled::pool::{Performers, Pool, PoolConfig, Refused, Report};
use ruled_engine::pool::Admission;
use ruled_engine::{Job, JobId, StepAction};
use std::sync::Arc;
use std::time::Duration;
use support::{alive, busy_script, runtime, script, wait_for, wait_pid, RedisServer, DEADLINE};
use tokio::sync::mpsc;

fn event(json: &str) -> Arc<Event> {
    Arc::new(Event::decode(json.as_bytes()).unwrap())
}

/// An `exec` job of `command` for a bare event, with a timeout in ms.
fn exec_job(id: u64, command: &str, timeout_ms: u64) -> Job {
    job(
        id,
        Action::Exec {
            command: command.into(),
            timeout_ns: timeout_ms * 1_000_000,
        },
        event(r#"{"topic":"t"}"#),
    )
}

/// A job of `action` (the one step of a one-rule bundle) for `event`,
/// owning no pending record.
fn job(id: u64, action: Action, event: Arc<Event>) -> Job {
    let rule = support::bundles::rule("r", &["t"], vec![support::bundles::step(action, 0)]);
    let action = StepAction::new(Arc::new(support::bundles::single(rule)), 0, 0).unwrap();
    Job {
        id: JobId(id),
        run: format!("r#t-{id}").into(),
        rule: "r".into(),
        step: 0,
        pass: 0,
        action,
        computed: None,
        event,
        drop_record: None,
        guard: None,
        when_read: None,
    }
}

fn no_redis() -> Performers {
    Performers {
        redis: None,
        lane: None,
        can: CanSockets::default(),
        store: None,
    }
}

/// The lane's own connection to the server `client` names.
fn lane(client: &redis::Client) -> Option<ruled::direct::Direct> {
    let target = ruled::direct::Target::new(
        client.get_connection_info().clone(),
        ruled::tls::Tls::default(),
    );
    Some(target.connection(None))
}

/// Collects reports until `count` of them arrived (or 10 s passed).
async fn reports(rx: &mut mpsc::UnboundedReceiver<Report>, count: usize) -> Vec<Report> {
    let mut out = Vec::new();
    while out.len() < count {
        match tokio::time::timeout(support::DEADLINE, rx.recv()).await {
            Ok(Some(report)) => out.push(report),
            _ => panic!("only {} of {count} reports: {out:?}", out.len()),
        }
    }
    out
}

#[test]
fn redis_action_is_one_lpush() {
    let redis = RedisServer::start();
    let rt = runtime();
    rt.block_on(async {
        let client = redis::Client::open(redis.url()).unwrap();
        let manager = redis::aio::ConnectionManager::new(client.clone())
            .await
            .unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut pool = Pool::start(
            PoolConfig::default(),
            Performers {
                lane: lane(&client),
                redis: Some(manager),
                can: CanSockets::default(),
                store: None,
            },
            tx,
        );
        let action = Action::redis("scooter:blinker", "both");
        pool.submit(job(7, action, event(r#"{"topic":"t"}"#)))
            .unwrap();
        let got = reports(&mut rx, 2).await;
        assert_eq!(
            got,
            vec![
                Report::Started(JobId(7)),
                Report::Finished(JobId(7), Ok(()))
            ]
        );
        assert_eq!(pool.stop(Duration::from_secs(1)).await, 0);
    });
    let list: Vec<String> = redis.query(&["LRANGE", "scooter:blinker", "0", "-1"]);
    assert_eq!(list, vec!["both"]);
}

#[test]
fn exec_gets_env_and_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let command = script(
        dir.path(),
        "record.sh",
        &format!(
            "cat > {out}.stdin\nprintf '%s|%s|%s|%s|%s|%s|%s' \"$LS_TOPIC\" \"$LS_SRC\" \"$LS_FROM\" \"$LS_TO\" \"$LS_ID\" \"$LS_DATA_LEVEL\" \"$LS_DATA_SPEED_KMH\" > {out}.env",
            out = out.display()
        ),
    );
    let json = r#"{"id":"e1","topic":"alarm.triggered","src":"alarm","from":"armed","to":"on","data":{"level":2,"speed-kmh":"12"}}"#;
    let rt = runtime();
    rt.block_on(async {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut pool = Pool::start(PoolConfig::default(), no_redis(), tx);
        let action = Action::Exec {
            command,
            timeout_ns: 5_000_000_000,
        };
        pool.submit(job(1, action, event(json))).unwrap();
        let got = reports(&mut rx, 2).await;
        assert_eq!(got[1], Report::Finished(JobId(1), Ok(())), "{got:?}");
        pool.stop(Duration::from_secs(1)).await;
    });
    let env = std::fs::read_to_string(format!("{}.env", out.display())).unwrap();
    assert_eq!(env, "alarm.triggered|alarm|armed|on|e1|2|12");
    let stdin = std::fs::read(format!("{}.stdin", out.display())).unwrap();
    assert_eq!(Event::decode(&stdin).unwrap(), *event(json));
}

#[test]
fn exec_failure_carries_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let command = script(dir.path(), "fail.sh", "echo 'no blinker here' >&2\nexit 3");
    let rt = runtime();
    rt.block_on(async {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut pool = Pool::start(PoolConfig::default(), no_redis(), tx);
        pool.submit(exec_job(1, &command, 5_000)).unwrap();
        pool.submit(exec_job(2, "/nonexistent/command", 5_000))
            .unwrap();
        let got = reports(&mut rx, 4).await;
        let failure = |id| {
            got.iter()
                .find_map(|r| match r {
                    Report::Finished(JobId(i), Err(msg)) if *i == id => Some(msg.clone()),
                    _ => None,
                })
                .unwrap_or_else(|| panic!("no failure for job {id}: {got:?}"))
        };
        let first = failure(1);
        assert!(first.contains("exit status: 3"), "{first}");
        assert!(first.contains("no blinker here"), "{first}");
        assert!(failure(2).contains("cannot start"), "{}", failure(2));
        pool.stop(Duration::from_secs(1)).await;
    });
}

#[test]
fn exec_timeout_kills_the_whole_group() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let command = script(
        dir.path(),
        "hang.sh",
        &format!(
            "sleep 600 &\necho $! > {p}.child\necho $$ > {p}.self\nwait",
            p = pids.display()
        ),
    );
    let rt = runtime();
    rt.block_on(async {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut pool = Pool::start(PoolConfig::default(), no_redis(), tx);
        // Long enough for the script to write both pids on a busy machine.
        pool.submit(exec_job(1, &command, 2_000)).unwrap();
        let got = reports(&mut rx, 2).await;
        match &got[1] {
            Report::Finished(JobId(1), Err(msg)) => assert!(msg.contains("timed out"), "{msg}"),
            other => panic!("expected a timeout, got {other:?}"),
        }
        pool.stop(Duration::from_secs(1)).await;
    });
    let pid = |suffix: &str| wait_pid(&pids.with_extension(suffix));
    let (child, parent) = (pid("child"), pid("self"));
    wait_for("script and its background child gone", || {
        !alive(child) && !alive(parent)
    });
}

#[test]
fn full_queue_refuses_and_stop_abandons_and_kills() {
    let dir = tempfile::tempdir().unwrap();
    let (command, pid_file) = busy_script(dir.path(), "slow.sh");
    let rt = runtime();
    rt.block_on(async {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut pool = Pool::start(
            PoolConfig {
                workers: 1,
                queue: 2,
            },
            no_redis(),
            tx,
        );
        let job = |id| exec_job(id, &command, 600_000);
        pool.submit(job(1)).unwrap();
        // Let the worker take job 1 so the queue is empty again.
        assert_eq!(reports(&mut rx, 1).await, vec![Report::Started(JobId(1))]);
        // Waited for here, not with `wait_pid`: the worker shares this thread.
        let deadline = std::time::Instant::now() + DEADLINE;
        while !std::fs::read_to_string(&pid_file).is_ok_and(|s| s.ends_with('\n')) {
            assert!(
                std::time::Instant::now() < deadline,
                "job 1's script never wrote its pid to {}",
                pid_file.display()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        pool.submit(job(2)).unwrap();
        pool.submit(job(3)).unwrap();
        assert_eq!(pool.submit(job(4)), Err(Refused::QueueFull));
        assert_eq!(pool.queued(), 2);

        let abandoned = pool.stop(Duration::from_secs(5)).await;
        assert_eq!(abandoned, 2);
        let got = reports(&mut rx, 3).await;
        assert!(got.contains(&Report::Abandoned(JobId(2))), "{got:?}");
        assert!(got.contains(&Report::Abandoned(JobId(3))), "{got:?}");
        assert!(
            got.iter()
                .any(|r| matches!(r, Report::Finished(JobId(1), Err(_)))),
            "the running job is killed and reported: {got:?}"
        );
    });
    let pid = wait_pid(&pid_file);
    wait_for("running exec killed at stop", || !alive(pid));
}

/// A pool without Redis whose workers have all registered as idle (they
/// do when they first run).
async fn idle_pool(workers: usize, queue: usize) -> (Pool, mpsc::UnboundedReceiver<Report>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let pool = Pool::start(PoolConfig { workers, queue }, no_redis(), tx);
    tokio::task::yield_now().await;
    (pool, rx)
}

#[test]
fn idle_workers_take_jobs_without_queueing() {
    let dir = tempfile::tempdir().unwrap();
    let command = script(dir.path(), "slow.sh", "exec sleep 600");
    let rt = runtime();
    rt.block_on(async {
        // Queue of zero: only idle workers accept.
        let (mut pool, mut rx) = idle_pool(2, 0).await;
        let job = |id| exec_job(id, &command, 600_000);
        pool.submit(job(1)).unwrap();
        pool.submit(job(2)).unwrap();
        assert_eq!(pool.submit(job(3)), Err(Refused::QueueFull));
        let started = reports(&mut rx, 2).await;
        assert!(
            started.contains(&Report::Started(JobId(1)))
                && started.contains(&Report::Started(JobId(2)))
        );
        assert_eq!(pool.submit(job(4)), Err(Refused::QueueFull));
        pool.stop(Duration::from_secs(5)).await;
        assert_eq!(pool.submit(job(5)), Err(Refused::Stopping));
    });
}

/// A full pool says when it has room again (`Report::Room`, for the
/// engine's due backlog, docs/semantics.md#due-steps-the-pool-refused),
/// once, from the worker that made the room; `room()` says how much.
#[test]
fn a_full_pool_reports_room_once_when_a_worker_frees_a_slot() {
    let dir = tempfile::tempdir().unwrap();
    let quick = script(dir.path(), "quick.sh", "sleep 0.2");
    let rt = runtime();
    rt.block_on(async {
        let (mut pool, mut rx) = idle_pool(1, 1).await;
        assert_eq!(pool.room().workers, 2);
        pool.submit(exec_job(1, &quick, 5_000)).unwrap();
        pool.submit(exec_job(2, &quick, 5_000)).unwrap();
        assert_eq!(pool.room().workers, 0);
        assert_eq!(
            pool.submit(exec_job(3, &quick, 5_000)),
            Err(Refused::QueueFull)
        );
        let got = reports(&mut rx, 4).await;
        assert_eq!(
            got,
            [
                Report::Started(JobId(1)),
                Report::Finished(JobId(1), Ok(())),
                Report::Room,
                Report::Started(JobId(2)),
            ]
        );
        assert_eq!(pool.room().workers, 1, "the queue slot job 2 left");
        // Job 2 ends and the worker goes idle: room grows, but the pool
        // was not full since the last report, so no second one.
        let got = reports(&mut rx, 1).await;
        assert_eq!(got, [Report::Finished(JobId(2), Ok(()))]);
        // The worker went idle before it let this task run (no await
        // between its report and that).
        assert_eq!(pool.room().workers, 2);
        assert!(rx.try_recv().is_err(), "no second room report");
        pool.stop(Duration::from_secs(5)).await;
        assert_eq!(pool.room().total(), 0, "a stopping pool has no room");
    });
}

/// `redis` actions take no worker (docs/service.md#durable-work-in-bulk):
/// with the only worker busy on an `exec`, they still run, all of them in
/// one batch of the Redis lane, which holds as many as the workers and
/// their queue (here 3) and refuses the next; once the batch is done the
/// lane reports its room.
#[test]
fn redis_actions_take_no_worker_and_the_lane_holds_workers_plus_queue() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let slow = script(dir.path(), "slow.sh", "exec sleep 600");
    let rt = runtime();
    rt.block_on(async {
        let client = redis::Client::open(redis.url()).unwrap();
        let manager = redis::aio::ConnectionManager::new(client.clone())
            .await
            .unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let config = PoolConfig {
            workers: 1,
            queue: 2,
        };
        let performers = Performers {
            lane: lane(&client),
            redis: Some(manager),
            ..no_redis()
        };
        let mut pool = Pool::start(config, performers, tx);
        tokio::task::yield_now().await;
        pool.submit(exec_job(1, &slow, 600_000)).unwrap();
        let started = reports(&mut rx, 1).await;
        assert_eq!(started, [Report::Started(JobId(1))]);
        let push =
            |id: u64, value: &str| job(id, Action::redis("lane", value), event(r#"{"topic":"t"}"#));
        for (id, value) in [(2, "a"), (3, "b"), (4, "c")] {
            assert_eq!(pool.try_submit(push(id, value)).ok(), Some(Admission::Lane));
        }
        assert_eq!(pool.room().lane, 0);
        assert!(matches!(
            pool.try_submit(push(5, "d")),
            Err((Refused::QueueFull, _))
        ));
        let got = reports(&mut rx, 7).await;
        assert_eq!(
            got,
            [
                Report::Started(JobId(2)),
                Report::Started(JobId(3)),
                Report::Started(JobId(4)),
                Report::Finished(JobId(2), Ok(())),
                Report::Finished(JobId(3), Ok(())),
                Report::Finished(JobId(4), Ok(())),
                Report::Room,
            ]
        );
        assert_eq!(pool.room().lane, 3);
        pool.stop(Duration::from_secs(5)).await;
    });
    assert_eq!(redis.list("lane"), ["a", "b", "c"]);
}

/// In a batch each action has its own outcome: an error reply fails only
/// its action (`WRONGTYPE` on a key that is not a list).
#[test]
fn an_error_reply_fails_only_its_own_action_of_the_batch() {
    let redis = RedisServer::start();
    let _: () = redis.query(&["SET", "not-a-list", "x"]);
    let rt = runtime();
    rt.block_on(async {
        let client = redis::Client::open(redis.url()).unwrap();
        let manager = redis::aio::ConnectionManager::new(client.clone())
            .await
            .unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let performers = Performers {
            lane: lane(&client),
            redis: Some(manager),
            ..no_redis()
        };
        let mut pool = Pool::start(PoolConfig::default(), performers, tx);
        let event = event(r#"{"topic":"t"}"#);
        for (id, list) in [(1, "ok"), (2, "not-a-list"), (3, "ok")] {
            let action = Action::redis(list, "v");
            pool.submit(job(id, action, Arc::clone(&event))).unwrap();
        }
        let got = reports(&mut rx, 6).await;
        let finished: Vec<_> = got
            .into_iter()
            .filter_map(|report| match report {
                Report::Finished(id, outcome) => Some((id.0, outcome.is_ok())),
                _ => None,
            })
            .collect();
        assert_eq!(finished, [(1, true), (2, false), (3, true)]);
        pool.stop(Duration::from_secs(1)).await;
    });
    assert_eq!(redis.list("ok"), ["v", "v"]);
}
