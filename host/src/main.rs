fn main() -> std::process::ExitCode {
    skillhost::cli::main()
}
