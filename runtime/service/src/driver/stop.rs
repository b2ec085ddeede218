//! Stop (docs/service.md#start-and-stop), step by step: close the subscription, stop the
//! engine (drop timers and queues, keep records), stop the pool (kill exec
//! groups, count abandoned jobs), write the last counters and `state =
//! stopped`, close.

use super::Service;
use crate::effect_log::log_effect;
use crate::logging::{self, Throttle};
use crate::notify;
use crate::record_store::StoreWriter;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// How long stopping waits for running actions after killing exec groups.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How long stopping waits for the last writes (the shipped unit's
/// TimeoutStopSec is 15 s: grace + flush stay well under it).
const STOP_FLUSH: Duration = Duration::from_secs(3);

impl Service {
    /// Stops in the order of docs/service.md#start-and-stop; see the module documentation.
    pub(super) async fn stop(mut self) {
        tracing::info!("stopping");
        notify::notify("STOPPING=1");
        // No request is answered from here on.
        if let Some(control) = self.control.as_mut() {
            control.close();
        }
        self.intake.close();
        // The records kept must name the right instants on the clock the
        // next start reads.
        self.check_clock();
        self.engine.stop();
        self.perform_effects();
        self.reader_task.abort();
        // Derived events already queued still go out, bounded: the lane
        // sends them before it ends (`lane::publish_at_stop`).
        self.publisher.close();
        let abandoned = self.pool.stop(STOP_GRACE).await;
        self.settle_reports();
        self.write_pending_file_at_stop();
        if abandoned > 0 {
            tracing::warn!(
                abandoned,
                "actions still queued at stop were abandoned (counted in `dropped`); those of durable steps keep their pending records"
            );
        }
        self.stats.write_stopped(&self.engine, &self.writer);
        flush_store(self.writer, self.writer_task).await;
        tracing::info!("stopped");
    }

    /// The reports of jobs that were running or queued at stop: a job that
    /// started still removes its record; abandoned ones keep theirs. What
    /// the engine hands back now is only logged.
    fn settle_reports(&mut self) {
        self.take_started();
        while let Ok(report) = self.reports.try_recv() {
            self.take_started();
            self.on_report(report);
        }
        for effect in self.engine.drain_effects() {
            log_effect(&effect, &mut self.throttle);
        }
        // What the last window held back, said before the process ends.
        logging::log_held(&self.throttle.roll(Instant::now() + Throttle::WINDOW));
    }
}

/// Waits for the last writes, bounded: with Redis gone the writer may be
/// retrying, and systemd kills a slow stop (TimeoutStopSec). The records
/// are already written or lost; only the last counters can still be
/// missing.
async fn flush_store(writer: StoreWriter, writer_task: JoinHandle<()>) {
    let flushed = tokio::time::timeout(STOP_FLUSH, writer.flush()).await;
    drop(writer);
    if flushed.is_ok() {
        if let Err(e) = writer_task.await {
            tracing::error!("store writer task failed: {e}");
        }
    } else {
        tracing::warn!(
            "the last record and counter writes did not finish within {}ms \
             (Redis slow or gone); stopping without them: a pending record whose \
             removal was among them runs its step again at the next start",
            STOP_FLUSH.as_millis()
        );
        writer_task.abort();
    }
}
