//! idem's OCI image (scripts/image) under podman, as the image's and the
//! fleet's tests run it: the harness's config and every file it names
//! mounted read-only at /etc/idem, a read-only root filesystem, a tmpfs for
//! the compiled components, the host's network.
//!
//! podman runs it with runc: this machine's kernel mounts cgroups in hybrid
//! mode, which crun (podman's default runtime here) refuses; and with the
//! rlimits this machine allows (podman's defaults exceed its hard limits).
//! IDEM_PODMAN_RUNTIME names another runtime.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

/// Any podman command's bound.
const LIMIT: Duration = Duration::from_secs(120);

/// The image scripts/image built (IDEM_IMAGE; scripts/test and
/// scripts/test-fleet set it).
pub fn image() -> String {
    std::env::var("IDEM_IMAGE")
        .unwrap_or_else(|_| panic!("IDEM_IMAGE is not set: run `export IDEM_IMAGE=$(scripts/image)`"))
}

/// A folder to mount at /etc/idem: the config (and its DLQ key file), every
/// absolute path it names copied in as `files/<n>-<name>` and renamed so.
pub fn stage(config: &Path) -> PathBuf {
    let fail = |what: &str, e: std::io::Error| -> ! { panic!("staging {}: {what}: {e}", config.display()) };
    let dir = config.with_file_name("mounted");
    std::fs::create_dir_all(dir.join("files")).unwrap_or_else(|e| fail("folder", e));
    std::fs::copy(config.with_file_name("dlq.key"), dir.join("dlq.key")).unwrap_or_else(|e| fail("dlq.key", e));
    let mut text = std::fs::read_to_string(config).unwrap_or_else(|e| fail("config", e));
    let quoted: Vec<String> =
        text.split('"').skip(1).step_by(2).filter(|s| s.starts_with('/')).map(str::to_owned).collect();
    for (n, path) in quoted.iter().enumerate() {
        let from = Path::new(path);
        let name = format!("{n}-{}", from.file_name().map(|f| f.to_string_lossy()).unwrap_or_default());
        copy(from, &dir.join("files").join(&name));
        text = text.replace(&format!("\"{path}\""), &format!("\"/etc/idem/files/{name}\""));
    }
    std::fs::write(dir.join("idem.toml"), text).unwrap_or_else(|e| fail("config", e));
    dir
}

fn copy(from: &Path, to: &Path) {
    let fail = |e: std::io::Error| -> ! { panic!("copy {} to {}: {e}", from.display(), to.display()) };
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap_or_else(|e| fail(e));
        for entry in std::fs::read_dir(from).unwrap_or_else(|e| fail(e)) {
            let entry = entry.unwrap_or_else(|e| fail(e));
            copy(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        std::fs::copy(from, to).unwrap_or_else(|e| fail(e));
    }
}

/// `podman run` of `image` with `options` and idem's `args`, as this machine
/// allows (see the module's doc), `mounted` at /etc/idem read-only.
pub fn run(image: &str, mounted: &Path, options: &[&str], args: &[&str]) -> (ExitStatus, String) {
    let runtime = std::env::var("IDEM_PODMAN_RUNTIME").unwrap_or_else(|_| "runc".into());
    let files = open_files_limit();
    let mut cmd = Command::new("podman");
    cmd.args(["--runtime", &runtime, "run"])
        .args(options)
        .args(["--network", "host", "--read-only", "--tmpfs", "/var/cache/idem:rw,mode=1777"])
        // Processes: far above idem's threads (this machine refuses its own hard limit there).
        .args(["--ulimit", &format!("nofile={files}:{files}"), "--ulimit", "nproc=4096:4096"])
        // Labelled, for scripts/test-fleet to remove what a killed run left.
        .args([
            "--label",
            "idem-test=1",
            "-e",
            "IDEM_LOG=warn",
            "-v",
            &format!("{}:/etc/idem:ro", mounted.display()),
            image,
        ])
        .args(args);
    crate::output_and_errors(&mut cmd, "podman run", LIMIT)
}

/// This process's hard limit of open files ("Max open files  20000  20000  files").
fn open_files_limit() -> String {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_else(|e| panic!("/proc/self/limits: {e}"));
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap_or("Max open files 1024 1024 files");
    let words: Vec<&str> = line.split_whitespace().collect();
    words[words.len() - 2].replace("unlimited", "65536")
}

/// A container by name, removed however the test ends.
pub struct Container(pub String);

impl Container {
    pub fn inspect(&self, format: &str) -> String {
        let (status, out) = crate::output_and_errors(
            Command::new("podman").args(["inspect", "--format", format, &self.0]),
            "podman inspect",
            LIMIT,
        );
        assert!(status.success(), "podman inspect {}: {out}", self.0);
        out.trim().to_owned()
    }

    pub fn logs(&self) -> String {
        crate::output_and_errors(Command::new("podman").args(["logs", &self.0]), "podman logs", LIMIT).1
    }

    /// Sends `signal` (TERM, KILL, USR1) to idem in the container.
    pub fn signal(&self, signal: &str) {
        let (status, out) = crate::output_and_errors(
            Command::new("podman").args(["kill", "--signal", signal, &self.0]),
            "podman kill",
            LIMIT,
        );
        assert!(status.success(), "podman kill --signal {signal} {}: {out}", self.0);
    }

    /// Waits for the container to exit (within 120 s): its exit code.
    pub fn wait(&self) -> i32 {
        let (status, out) =
            crate::output_and_errors(Command::new("podman").args(["wait", &self.0]), "podman wait", LIMIT);
        assert!(status.success(), "podman wait {}: {out}", self.0);
        out.trim().parse().unwrap_or_else(|_| panic!("podman wait {}: {out}", self.0))
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("podman").args(["rm", "-f", "-t", "0", &self.0]).output();
    }
}
