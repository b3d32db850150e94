/// The allocator: a call makes and frees many small objects (the JSON-RPC message, the
/// audit line, wasmtime's per-instance tables), where mimalloc's per-thread free lists
/// spend less than glibc's arenas (see README, Performance).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes away
    // (`skillhost skill list | head`) instead of panicking on the failed write.
    // SAFETY: called first thing in main, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    skillhost::cli::main()
}
