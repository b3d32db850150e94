fn main() -> std::process::ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes away
    // (`skillhost skill list | head`) instead of panicking on the failed write.
    // SAFETY: called first thing in main, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    skillhost::cli::main()
}
