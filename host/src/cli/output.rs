//! Human output shared by the command handlers: one-line excerpts, labelled lists, a skill
//! call's report.

use crate::library::RunReport;

pub(super) fn one_line(text: &str, max_chars: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max_chars {
        return flat;
    }
    let cut: String = flat.chars().take(max_chars - 1).collect();
    format!("{cut}…")
}

pub(super) fn print_list(label: &str, items: &[String]) {
    if items.is_empty() {
        println!("  {label}: nothing");
    } else {
        println!("  {label}:");
        for i in items {
            println!("    - {i}");
        }
    }
}

pub(super) fn print_run(r: &RunReport) {
    match &r.result {
        Ok(o) => {
            println!("{}", o.output);
            println!("--");
            println!("status: {:?}", o.status);
            for (k, v) in &o.metadata {
                println!("  {k}: {v}");
            }
        }
        Err(e) => println!("error: {e}"),
    }
    for m in &r.memories.stored {
        println!("memory stored: #{m}");
    }
    for d in &r.denials {
        println!("denied ({}): {}", d.capability, d.message);
    }
    if !r.not_granted.is_empty() {
        println!("not granted (the call ran without it): {}", r.not_granted.join("; "));
    }
    for l in &r.logs {
        eprintln!("[{}] {}", l.level, l.message);
    }
    eprintln!("({} us, peak memory {} KiB, session {})", r.elapsed_us, r.memory_peak_bytes / 1024, r.session);
}
