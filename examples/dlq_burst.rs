//! An outage makes many calls give up at once: a burst of dead letters, and what it does to
//! everything else on the runtime.
//!
//! ```text
//! cargo run --release --example dlq_burst -- --sink jsonl|sqlite [--dir D] [--keep]
//! ```
//!
//! 64 tasks × 50 calls of a real `#[retryable(max = 1, dlq(...))]` function that always fails
//! (3,200 give-ups, ~200-byte originals), on a Tokio runtime with 2 workers, while a heartbeat
//! task ticks every 5 ms and records how late it ever ran: a sink that writes or syncs on a
//! runtime worker stalls the heartbeat with it. Prints letters per second, the worst heartbeat
//! lateness and, for JSONL, the group commits (one fsync each), then reads the store back and

//!
//! The store goes to a new file in `--dir` (default: a temporary directory), removed at the end
//! unless `--keep`. Run it on the disk the service would use: fsync costs are the disk's.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const TASKS: usize = 64;
const CALLS: usize = 50;
const HEARTBEAT: Duration = Duration::from_millis(5);

#[path = "../tests/common/burst.rs"]
mod burst;

use burst::{SendError, Sink, send, stored, transfer};

struct Args {
    jsonl: bool,
    dir: Option<PathBuf>,
    keep: bool,
}

fn args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let (mut sink, mut dir, mut keep) = (None, None, false);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--sink" => sink = args.next(),
            "--dir" => dir = args.next().map(PathBuf::from),
            "--keep" => keep = true,
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let jsonl = match sink.as_deref() {
        Some("jsonl") => true,
        Some("sqlite") => false,
        _ => return Err("--sink jsonl|sqlite is required".into()),
    };
    Ok(Args { jsonl, dir, keep })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = match args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("dlq_burst: {e}\nusage: dlq_burst --sink jsonl|sqlite [--dir D] [--keep]");
            return ExitCode::from(2);
        }
    };
    let temporary = args.dir.is_none();
    let dir = args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("retry-core-dlq-burst-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir).expect("the directory for the store");
    let name = if args.jsonl { "jsonl" } else { "sqlite" };
    let path = dir.join(format!("dlq-burst-{}.{name}", std::process::id()));

    let sink = Arc::new(open(&path, args.jsonl));
    println!("sink: {name} at {}", path.display());
    println!(
        "burst: {TASKS} tasks x {CALLS} give-ups, on 2 runtime workers, heartbeat every {} ms",
        HEARTBEAT.as_millis()
    );

    let worst_micros = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let heartbeat = tokio::spawn(heartbeat(Arc::clone(&worst_micros), Arc::clone(&stop)));
    // Let the heartbeat start ticking before the burst.
    tokio::time::sleep(HEARTBEAT * 4).await;

    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let sink = Arc::clone(&sink);
            tokio::spawn(async move {
                let mut not_parked = Vec::new();
                for call in 0..CALLS {
                    match send(&sink, transfer(task, call)).await {
                        Err(SendError::Unavailable) => {}
                        Err(SendError::NotParked(failed)) => not_parked.push(failed.to_string()),
                        Ok(()) => unreachable!("the upstream is down"),
                    }
                }
                not_parked
            })
        })
        .collect();
    let mut not_parked = Vec::new();
    for task in tasks {
        not_parked.extend(task.await.expect("a burst task"));
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    heartbeat.await.expect("the heartbeat");

    let letters = TASKS * CALLS;
    let rate = letters as f64 / elapsed.as_secs_f64();
    let worst = Duration::from_micros(worst_micros.load(Ordering::Relaxed));
    println!(
        "parked: {} of {letters} in {:.3} s: {rate:.0} letters/s (target: >= 10000)",
        letters - not_parked.len(),
        elapsed.as_secs_f64()
    );
    println!(
        "heartbeat: worst {:.1} ms late (target: <= 20 ms)",
        worst.as_secs_f64() * 1000.0
    );
    match &*sink {
        Sink::Jsonl(sink) => {
            let commits = sink.group_commits();
            println!(
                "group commits: {commits} (one write and one fdatasync each): {:.1} letters per fsync",
                letters as f64 / commits.max(1) as f64
            );
        }
        Sink::Sqlite(_) => println!("group commits: not counted for SQLite"),
    }
    drop(sink);

    let verdict = verify(&path, args.jsonl, &not_parked).await;
    if temporary && !args.keep {
        let _ = std::fs::remove_dir_all(&dir);
    } else if !args.keep {
        for suffix in ["", "-wal", "-shm", ".torn"] {
            let mut file = path.clone().into_os_string();
            file.push(suffix);
            let _ = std::fs::remove_file(file);
        }
    }
    match verdict {
        Ok(()) => {
            println!("verified: all {letters} letters are in the store, each exactly once");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn open(path: &Path, jsonl: bool) -> Sink {
    Sink::open(path, jsonl).expect("open the store")
}

/// Ticks every [`HEARTBEAT`] until `stop`, recording the worst lateness in microseconds.
async fn heartbeat(worst_micros: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    let mut ticks = tokio::time::interval(HEARTBEAT);
    while !stop.load(Ordering::Relaxed) {
        let due = ticks.tick().await;
        let late = Instant::now().saturating_duration_since(due.into_std());
        worst_micros.fetch_max(late.as_micros() as u64, Ordering::Relaxed);
    }
}

/// Reads the store back: every letter once, with the one attempt it was parked with.
async fn verify(path: &Path, jsonl: bool, not_parked: &[String]) -> Result<(), String> {
    if let Some(first) = not_parked.first() {
        return Err(format!(
            "{} give-ups were not parked; the first: {first}",
            not_parked.len()
        ));
    }
    let letters = stored(path, jsonl).await?;
    let expected: HashSet<String> = (0..TASKS)
        .flat_map(|task| (0..CALLS).map(move |call| transfer(task, call).id))
        .collect();
    let mut seen = HashSet::new();
    for letter in &letters {
        if !seen.insert(letter.msg_id.clone()) {
            return Err(format!("{} is listed twice", letter.msg_id));
        }
        if letter.attempts != 1 {
            return Err(format!(
                "{} has {} attempts: parked more than once",
                letter.msg_id, letter.attempts
            ));
        }
    }
    let lost: Vec<_> = expected.difference(&seen).collect();
    if !lost.is_empty() {
        return Err(format!("{} letters lost, e.g. {}", lost.len(), lost[0]));
    }
    let strangers: Vec<_> = seen.difference(&expected).collect();
    if !strangers.is_empty() {
        return Err(format!("unexpected letters, e.g. {}", strangers[0]));
    }
    Ok(())
}
