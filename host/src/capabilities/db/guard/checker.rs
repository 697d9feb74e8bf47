//! Where long statements are checked: one thread for the host, one job at
//! a time per handler, and a share of a core per handler.
//!
//! Parsing and walking a long statement is the most CPU a guest can make
//! the host spend for it (a 60 KB ARRAY took 0.2 s). Running it at nice 19
//! was not enough: on the project's 2-core machine, a niced thread (or a
//! niced process) that keeps a core busy still cost the billing handler
//! beside it a fifth of its throughput, because its pipeline waits on many
//! short steps and each finds the other core taken. So each handler's
//! checks are also paced: a token bucket of CPU time, refilled at
//! [`SHARE`] of a core and holding at most [`BURST`], charged with what
//! each check took (the checker thread's own CPU clock). A handler whose
//! bucket is empty waits, asleep, before its next long statement is
//! checked; the wait is part of the statement's call, so the invocation's
//! deadline ends it. A handler that sends a long statement now and then
//! never waits; one that sends them in a loop gets a tenth of a core.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use super::{CACHED_BYTES, check, check_uncached};

/// The share of one core a handler's long-statement checks may use over time.
const SHARE: f64 = 0.1;
/// The CPU seconds of checks a handler may spend at once, after a pause:
/// one of the longest statements (a 60 KB ARRAY takes about 0.2 s).
const BURST: f64 = 0.25;

/// [`check`] as the `db` capability runs it. A short statement (most are,
/// and most are cached) is checked at once. A long one waits for its
/// handler's lane: the one job the handler may have at the checker, and
/// the CPU its bucket allows (see the module's comment). The job holds the
/// lane's permit until it ends, even when the invocation's deadline cut
/// off the wait for its answer.
pub(crate) async fn check_for(handler: &str, sql: &str) -> Result<(), String> {
    if sql.len() <= CACHED_BYTES {
        return check(sql);
    }
    let lane = lane_of(handler);
    let Ok(permit) = lane.permit.clone().acquire_owned().await else {
        return Err("the statement checker is gone".into());
    };
    loop {
        let wait = lane.bucket().wait(Instant::now());
        if wait.is_zero() {
            break;
        }
        tokio::time::sleep(wait).await;
    }
    let (reply, verdict) = oneshot::channel();
    let Some(checker) = checker() else { return check_uncached(sql) };
    if checker.try_send(Job { sql: sql.to_owned(), reply, lane: lane.clone(), _permit: permit }).is_err() {
        return Err("the statement checker is busy with other handlers' long statements: try again".into());
    }
    verdict.await.unwrap_or_else(|_| Err("the statement checker stopped".into()))
}

/// A handler's way to the checker.
struct Lane {
    /// One long-statement check at a time.
    permit: Arc<Semaphore>,
    bucket: Mutex<Bucket>,
}

impl Lane {
    fn bucket(&self) -> std::sync::MutexGuard<'_, Bucket> {
        self.bucket.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// CPU seconds a handler may spend on checks; below zero after a check
/// that cost more than was left, and then it waits until it is positive.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    seconds: f64,
    at: Instant,
}

impl Bucket {
    fn full(now: Instant) -> Self {
        Bucket { seconds: BURST, at: now }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.seconds = (self.seconds + elapsed * SHARE).min(BURST);
        self.at = now;
    }

    /// How long to wait before the next check may start.
    fn wait(&mut self, now: Instant) -> Duration {
        self.refill(now);
        match self.seconds > 0.0 {
            true => Duration::ZERO,
            false => Duration::from_secs_f64(-self.seconds / SHARE),
        }
    }

    /// A check that took `cpu`.
    fn charge(&mut self, now: Instant, cpu: Duration) {
        self.refill(now);
        self.seconds -= cpu.as_secs_f64();
    }
}

fn lane_of(handler: &str) -> Arc<Lane> {
    static LANES: LazyLock<Mutex<HashMap<String, Arc<Lane>>>> = LazyLock::new(Default::default);
    let mut lanes = LANES.lock().unwrap_or_else(|e| e.into_inner());
    lanes
        .entry(handler.to_owned())
        .or_insert_with(|| {
            Arc::new(Lane { permit: Arc::new(Semaphore::new(1)), bucket: Mutex::new(Bucket::full(Instant::now())) })
        })
        .clone()
}

/// A long statement to check, its answer, and its handler's lane (and
/// permit).
struct Job {
    sql: String,
    reply: oneshot::Sender<Result<(), String>>,
    lane: Arc<Lane>,
    _permit: OwnedSemaphorePermit,
}

/// The thread that checks long statements, at nice 19, charging each
/// check's CPU to its handler's bucket. Its queue holds one job per
/// handler at most (the permits), bounded at 256 handlers. `None`: the
/// thread could not be started (the caller checks inline).
fn checker() -> Option<&'static std::sync::mpsc::SyncSender<Job>> {
    static CHECKER: LazyLock<Option<std::sync::mpsc::SyncSender<Job>>> = LazyLock::new(|| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(256);
        let started = std::thread::Builder::new().name("idem-guard".into()).spawn(move || {
            if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19) {
                tracing::warn!("the statement checker runs at normal priority ({e})");
            }
            for job in rx {
                let start = thread_cpu();
                let verdict = check_uncached(&job.sql);
                job.lane.bucket().charge(Instant::now(), thread_cpu().saturating_sub(start));
                let _ = job.reply.send(verdict);
            }
        });
        started.ok().map(|_| tx)
    });
    CHECKER.as_ref()
}

/// The CPU time the calling thread has used.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec.try_into().unwrap_or(0), t.tv_nsec.try_into().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handler_checking_in_a_loop_gets_its_share_and_one_now_and_then_never_waits() {
        let t0 = Instant::now();
        let mut bucket = Bucket::full(t0);
        // Now and then: a 0.2 s check every 5 s never waits.
        for i in 0..10 {
            let now = t0 + Duration::from_secs(5 * i);
            assert_eq!(bucket.wait(now), Duration::ZERO);
            bucket.charge(now, Duration::from_millis(200));
        }
        // In a loop: over 100 s, checks of 0.2 s each, started as soon as
        // the bucket allows, use at most SHARE of the time plus the burst.
        let mut now = t0 + Duration::from_secs(100);
        let end = now + Duration::from_secs(100);
        let mut cpu = 0.0;
        while now < end {
            now += bucket.wait(now);
            bucket.charge(now, Duration::from_millis(200));
            cpu += 0.2;
            now += Duration::from_millis(200);
        }
        // (At most the burst, and one check past the last refill.)
        assert!(cpu <= 100.0 * SHARE + BURST + 0.4, "{cpu} s of checks in 100 s");
        assert!(cpu >= 100.0 * SHARE - 0.2, "{cpu} s of checks in 100 s: less than the share");
    }
}
