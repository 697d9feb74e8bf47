//! The `idem` binary; everything lives in the library's `cli` module.

fn main() -> std::process::ExitCode {
    idem::cli::main()
}
