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
//!
//! Then latency, local home vs PostgreSQL store in the same run (issue 33's target: a skill
//! call on PostgreSQL within 2x of local): p50/p99 of a trivial skill call through the
//! Library (the probe's `noop`, with its audit line: an fsynced file append vs a committed
//! row), of a memory add (local redb commit vs a log append under the head lock plus the
//! local replica's commit), and of a memory search over a few hundred records (both answer
//! from a local index: the replica is caught up before the searches). One block of figures
//! with ratios PostgreSQL/local, for the note.

#[path = "../../tests/common/postgres.rs"]
mod postgres;

use std::time::{Duration, Instant};

use skillhost::audit::{AuditLog, EntryKind, new_entry};
use skillhost::library::{Library, RunOptions};
use skillhost::memory::{MemoryKind, NewRecord, Provenance, SearchFilter};

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

/// Records added (and timed) before the searches.
const RECORDS: usize = 300;
const CALLS: usize = 1000;
const SEARCHES: usize = 300;

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * p).round() as usize]
}

fn timed(n: usize, mut f: impl FnMut(usize)) -> Vec<Duration> {
    (0..n)
        .map(|i| {
            let t = Instant::now();
            f(i);
            t.elapsed()
        })
        .collect()
}

/// p50/p99 of a skill call, a memory add and a memory search on `lib`.
struct Latency {
    call: Vec<Duration>,
    add: Vec<Duration>,
    search: Vec<Duration>,
    semantic: bool,
}

const SUBJECTS: [&str; 12] = [
    "kettle", "router", "garden", "invoice", "piano", "bicycle", "laptop", "window", "printer", "boiler", "tractor",
    "compiler",
];
const FACTS: [&str; 5] = ["is blue", "needs repair", "belongs to Ann", "was bought in May", "stays in the attic"];

/// Install the probe on `lib` and warm its call path.
fn install_probe(lib: &Library, probe: &std::path::Path, rt: &tokio::runtime::Runtime) {
    let install = || lib.install(probe, &|_| Ok(None)).map(|_| ());
    match lib.home_sync() {
        Some(sync) => sync.change(install).unwrap(),
        None => install().unwrap(),
    }
    for _ in 0..100 {
        probe_call(lib, rt);
    }
}

fn probe_call(lib: &Library, rt: &tokio::runtime::Runtime) {
    let opts = RunOptions { session: "bench".into(), ..Default::default() };
    rt.block_on(lib.run("probe", serde_json::json!({"mode": "noop"}), &opts)).unwrap();
}

/// Memory adds, then searches over them, on `lib`.
fn memory_latency(lib: &Library) -> Latency {
    let memory = lib.memory().unwrap();
    let add = timed(RECORDS, |i| {
        let content = format!(
            "The {} number {i} {} according to note {}",
            SUBJECTS[i % SUBJECTS.len()],
            FACTS[i % FACTS.len()],
            i * 7919
        );
        memory
            .add(NewRecord {
                namespace: "default".into(),
                kind: MemoryKind::Fact,
                content,
                priority: 3,
                tags: vec![],
                provenance: Provenance {
                    skill: "user".into(),
                    skill_hash: String::new(),
                    session: "bench".into(),
                    step: 0,
                },
            })
            .unwrap();
    });
    let search = timed(SEARCHES, |i| {
        let q = format!("which {} {}", SUBJECTS[i % SUBJECTS.len()], FACTS[(i / 3) % FACTS.len()]);
        assert!(!memory.search(&q, &SearchFilter::default(), 5).unwrap().is_empty(), "{q}");
    });
    Latency { call: Vec::new(), add, search, semantic: memory.semantic_stats().is_some() }
}

/// Rounds the calls are measured in, local and PostgreSQL alternating, so that a burst of
/// load next door lands on both.
const CALL_ROUNDS: usize = 10;

fn latency_block() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let probe = repo.join("target/skills/probe");
    assert!(probe.join("skill.wasm").exists(), "run `just build-skills` first (no {})", probe.display());
    let tmp = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let local_lib = Library::open(&tmp.path().join("local"), Some(tmp.path()), None).unwrap();
    let db = postgres::database();
    let mut pg_lib = Library::open(&tmp.path().join("pg-host"), Some(tmp.path()), None).unwrap();
    pg_lib.use_postgres(db.migrated()).unwrap();
    install_probe(&local_lib, &probe, &rt);
    install_probe(&pg_lib, &probe, &rt);
    let (mut local_calls, mut pg_calls) = (Vec::new(), Vec::new());
    for _ in 0..CALL_ROUNDS {
        local_calls.extend(timed(CALLS / CALL_ROUNDS, |_| probe_call(&local_lib, &rt)));
        pg_calls.extend(timed(CALLS / CALL_ROUNDS, |_| probe_call(&pg_lib, &rt)));
    }
    let (one_trip, missed) = pg_lib.audit_log().one_trip_appends();
    // What a call costs beyond the skill, item by item: the barrier alone, and an audit
    // append alone (awaited as a call awaits it), on each store.
    let sync = pg_lib.home_sync().expect("a PostgreSQL library has a shared home");
    let mut barrier = timed(CALLS / 2, |_| rt.block_on(sync.ensure_current()).unwrap());
    let append = |lib: &Library| {
        let log = lib.audit_log();
        timed(CALLS / 2, |i| {
            rt.block_on(log.append_async(entry(0, 0, i))).unwrap();
        })
    };
    let (mut local_append, mut pg_append) = (append(&local_lib), append(&pg_lib));
    let mut local = memory_latency(&local_lib);
    drop(local_lib);
    let mut pg = memory_latency(&pg_lib);
    (local.call, pg.call) = (local_calls, pg_calls);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "\nlatency, local home vs PostgreSQL store (Unix socket, fsync on), one process, one caller; memory semantic search: {}",
        if local.semantic && pg.semantic { "on" } else { "off (lexical only)" }
    );
    println!(
        "{:<44} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8}",
        "", "local p50", "local p99", "pg p50", "pg p99", "p50 x", "p99 x"
    );
    let rows: [(&str, &mut Vec<Duration>, &mut Vec<Duration>); 3] = [
        ("skill call via Library (noop + audit line)", &mut local.call, &mut pg.call),
        ("memory add", &mut local.add, &mut pg.add),
        ("memory search (300 records, top 5)", &mut local.search, &mut pg.search),
    ];
    let mut call_ratio = 0.0;
    for (label, l, p) in rows {
        let (l50, l99, p50, p99) = (percentile(l, 0.5), percentile(l, 0.99), percentile(p, 0.5), percentile(p, 0.99));
        let r50 = p50.as_secs_f64() / l50.as_secs_f64();
        if call_ratio == 0.0 {
            call_ratio = r50;
        }
        println!(
            "{label:<44} {:>8.3}ms {:>8.3}ms {:>8.3}ms {:>8.3}ms {:>7.2}x {:>7.2}x",
            ms(l50),
            ms(l99),
            ms(p50),
            ms(p99),
            r50,
            p99.as_secs_f64() / l99.as_secs_f64()
        );
    }
    println!(
        "{:<44} {:>8.3}ms {:>8.3}ms {:>8.3}ms {:>8.3}ms",
        "  of which: audit append alone",
        ms(percentile(&mut local_append, 0.5)),
        ms(percentile(&mut local_append, 0.99)),
        ms(percentile(&mut pg_append, 0.5)),
        ms(percentile(&mut pg_append, 0.99))
    );
    println!(
        "{:<44} {:>10} {:>10} {:>8.3}ms {:>8.3}ms",
        "  of which: the shared home's barrier alone",
        "-",
        "-",
        ms(percentile(&mut barrier, 0.5)),
        ms(percentile(&mut barrier, 0.99))
    );
    println!(
        "(calls: {CALL_ROUNDS} rounds of {} calls, local and PostgreSQL alternating; audit appends in one round trip: {one_trip}, guesses missed: {missed})",
        CALLS / CALL_ROUNDS
    );
    println!(
        "target: a skill call on PostgreSQL within 2x of local (p50): {} ({call_ratio:.2}x)",
        if call_ratio <= 2.0 { "met" } else { "NOT met" }
    );
}

fn main() {
    if let Ok(url) = std::env::var(CHILD) {
        child(&url);
        return;
    }
    if std::env::var_os("SKILLHOST_BENCH_LATENCY_ONLY").is_some() {
        latency_block();
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
    latency_block();
}
