//! `just bench`: audit appends per second into the one PostgreSQL chain from 3 hosts, next to
//! the local file log measured in the same run, as a ratio.
//!
//! PostgreSQL: a throwaway server (tests/common/postgres.rs: Debian's PostgreSQL on a Unix
//! socket, fsync on), one migrated database per figure. "3 hosts" is measured twice: as 3
//! pools in this process (3 writers, each group-committing its host's appends), and as 3
//! processes (this binary re-executed as a host). Each host appends from `APPENDERS`
//! threads, as a server's concurrent calls do; every append returns only once its
//! transaction committed. The file log: 3 `AuditLog` values on one file (each its own
//! group commit, as 3 processes would be), the same threads, every append synced before it
//! returns (the CLI's default; a server's background sync would be faster and less durable).
//! Both chains are verified after each run; each figure is the median of 3 interleaved runs.
//! On 2 shared cores this measures overhead, not scaling.

#[path = "../../tests/common/postgres.rs"]
mod postgres;

use std::time::{Duration, Instant};

use skillhost::audit::{AuditLog, EntryKind, new_entry};

/// Threads appending per host.
const APPENDERS: usize = 16;
/// Appends per thread.
const EACH: usize = 150;
const HOSTS: usize = 3;
/// Runs of each figure; the median is shown.
const ROUNDS: usize = 3;

/// Re-executed as one host: `SKILLHOST_BENCH_HOST=URL` appends `EACH` lines from each of
/// `APPENDERS` threads and prints the time it took.
const CHILD: &str = "SKILLHOST_BENCH_HOST";

fn entry(host: usize, thread: usize, i: usize) -> serde_json::Map<String, serde_json::Value> {
    let mut e = new_entry(EntryKind::Call, &format!("bench-h{host}-t{thread}"));
    e.insert("skill".into(), "probe".into());
    e.insert("status".into(), "success".into());
    e.insert("params".into(), serde_json::json!({ "mode": "noop", "i": i }));
    e.insert("elapsed_us".into(), 42.into());
    e
}

/// `APPENDERS` threads per log in `logs`, `each` appends per thread; the wall time.
fn append_from_threads(logs: &[AuditLog], appenders: usize, each: usize) -> Duration {
    let started = Instant::now();
    std::thread::scope(|s| {
        for (h, log) in logs.iter().enumerate() {
            for t in 0..appenders {
                s.spawn(move || {
                    for i in 0..each {
                        log.append(entry(h, t, i)).unwrap();
                    }
                });
            }
        }
    });
    started.elapsed()
}

fn child(url: &str) {
    let url = match url.parse::<skillhost::store::StoreUrl>().unwrap() {
        skillhost::store::StoreUrl::Postgres(u) => u,
        skillhost::store::StoreUrl::Local => unreachable!(),
    };
    let log = AuditLog::postgres(&skillhost::store::PgStore::open(&url).unwrap());
    // Connected and ready: wait for the parent's go (a line on stdin) so the hosts start together.
    println!("ready");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let took = append_from_threads(std::slice::from_ref(&log), APPENDERS, EACH);
    println!("{} {}", took.as_secs_f64(), log.syncs());
}

struct Figure {
    lines: usize,
    took: Duration,
    transactions: u64,
}

impl Figure {
    fn per_s(&self) -> f64 {
        self.lines as f64 / self.took.as_secs_f64()
    }
}

fn pg_pools(appenders: usize, each: usize) -> Figure {
    let db = postgres::database();
    db.migrated();
    let logs: Vec<AuditLog> = (0..HOSTS).map(|_| AuditLog::postgres(&db.connect())).collect();
    let took = append_from_threads(&logs, appenders, each);
    let lines = HOSTS * appenders * each;
    assert_eq!(logs[0].verify().unwrap().entries, lines as u64);
    Figure { lines, took, transactions: logs.iter().map(AuditLog::syncs).sum() }
}

fn pg_processes() -> Figure {
    use std::io::{BufRead as _, Write as _};
    let db = postgres::database();
    db.migrated();
    let mut hosts: Vec<_> = (0..HOSTS)
        .map(|_| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .env(CHILD, db.url())
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut outs: Vec<_> = hosts.iter_mut().map(|c| std::io::BufReader::new(c.stdout.take().unwrap())).collect();
    for out in &mut outs {
        let mut ready = String::new();
        out.read_line(&mut ready).unwrap();
        assert_eq!(ready.trim(), "ready");
    }
    let started = Instant::now();
    for c in &mut hosts {
        writeln!(c.stdin.as_mut().unwrap(), "go").unwrap();
    }
    let mut transactions = 0;
    for (c, out) in hosts.iter_mut().zip(&mut outs) {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert!(c.wait().unwrap().success());
        transactions += line.split_whitespace().nth(1).and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
    }
    let took = started.elapsed();
    let lines = HOSTS * APPENDERS * EACH;
    let log = AuditLog::postgres(&db.migrated());
    assert_eq!(log.verify().unwrap().entries, lines as u64);
    Figure { lines, took, transactions }
}

fn file_log(appenders: usize, each: usize) -> Figure {
    let home = tempfile::tempdir().unwrap();
    let logs: Vec<AuditLog> = (0..HOSTS).map(|_| AuditLog::in_home(home.path())).collect();
    let took = append_from_threads(&logs, appenders, each);
    let lines = HOSTS * appenders * each;
    assert_eq!(logs[0].verify().unwrap().entries, lines as u64);
    Figure { lines, took, transactions: logs.iter().map(AuditLog::syncs).sum() }
}

fn median(mut runs: Vec<Figure>) -> Figure {
    runs.sort_by(|a, b| a.per_s().total_cmp(&b.per_s()));
    runs.swap_remove(runs.len() / 2)
}

fn row(label: &str, f: &Figure, baseline: Option<&Figure>) {
    let ratio = baseline.map_or(String::new(), |b| format!("{:>8.2}x", f.per_s() / b.per_s()));
    println!(
        "{label:<58} {:>7} lines {:>8.0} lines/s {:>6} commits {:>7.1} lines/commit {ratio}",
        f.lines,
        f.per_s(),
        f.transactions,
        f.lines as f64 / f.transactions.max(1) as f64
    );
}

fn main() {
    if let Ok(url) = std::env::var(CHILD) {
        child(&url);
        return;
    }
    // `cargo bench` passes `--bench`; nothing else is taken.
    println!("audit appends: {HOSTS} hosts x {APPENDERS} appending threads, every append durable before it returns");
    println!(
        "(median of {ROUNDS} interleaved runs; ratio: to the file log with the same hosts and threads, measured in this run)\n"
    );
    // Warm the server (first database, catalog caches) outside the figures.
    pg_pools(1, 5);
    // Each figure ROUNDS times, interleaved, and the median taken: the machine is shared,
    // and a compile next door would otherwise decide the ratio.
    let (mut file, mut pools, mut processes, mut file_one, mut pools_one) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..ROUNDS {
        file.push(file_log(APPENDERS, EACH));
        pools.push(pg_pools(APPENDERS, EACH));
        processes.push(pg_processes());
        file_one.push(file_log(1, 200));
        pools_one.push(pg_pools(1, 200));
    }
    let (file, pools, processes, file_one, pools_one) =
        (median(file), median(pools), median(processes), median(file_one), median(pools_one));
    row("local file log (3 logs on one file, fsync per group)", &file, None);
    row("PostgreSQL, 3 hosts = 3 pools in one process", &pools, Some(&file));
    row("PostgreSQL, 3 hosts = 3 processes", &processes, Some(&file));
    println!();
    row("local file log, 1 appending thread per host", &file_one, None);
    row("PostgreSQL, 3 pools, 1 appending thread per host", &pools_one, Some(&file_one));
    let target = 2000.0;
    let worst = pools.per_s().min(processes.per_s());
    println!(
        "\ntarget: >= {target:.0} lines/s from 3 hosts: {} ({worst:.0} lines/s, the lower of the two 3-host figures)",
        if worst >= target { "met" } else { "NOT met" }
    );
}
