//! The `idem` command line, built as a binary of this package so that
//! `cargo test` always rebuilds it before the integration tests that spawn
//! it (it does not rebuild another package's binaries).
//!
//! With `IDEM_TEST_PARENT_PID` set (the harness sets it), it exits when that
//! process is gone: a test that fails before it stops its `idem run` leaves
//! no process behind to hold connections and consume.
//!
//! It registers the harness's native handlers (`native = "billing"`), which
//! the `idem` binary does not have.

fn main() -> std::process::ExitCode {
    if let Some(parent) = std::env::var("IDEM_TEST_PARENT_PID").ok().and_then(|p| p.parse::<u32>().ok()) {
        std::thread::spawn(move || {
            while std::path::Path::new(&format!("/proc/{parent}")).exists() {
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            // Not eprintln!: with the test gone its stderr may be a closed
            // pipe, and a failed eprintln! panics this thread instead of
            // ending the process.
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                format!("idem-under-test: the test process {parent} is gone; exiting\n").as_bytes(),
            );
            std::process::exit(3);
        });
    }
    idem::cli::main_with(idem_tests::native::handlers())
}
