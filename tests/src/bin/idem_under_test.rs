//! The `idem` command line, built as a binary of this package so that
//! `cargo test` always rebuilds it before the integration tests that spawn
//! it (it does not rebuild another package's binaries).

fn main() -> std::process::ExitCode {
    idem::cli::main()
}
