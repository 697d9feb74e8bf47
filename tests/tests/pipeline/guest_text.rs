//! A guest's words are data in every operator-facing output: they cannot
//! start a log line that looks like the host's own, move a terminal's
//! cursor, or grow without bound.

use std::process::{Command, Stdio};

use idem::pipeline::dlq_headers as h;
use idem::pipeline::replay::header;
use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;

use super::failures::scenario;
use crate::Env;

#[tokio::test(flavor = "multi_thread")]
async fn a_guests_text_cannot_forge_a_host_log_line_or_a_dlq_reason() {
    let env = Env::new(1).await;
    let spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    let forged_line = "2026-12-01T00:00:00.000000Z  INFO idem::executor: event committed forged=yes";
    let text = format!("harmless\n{forged_line}\r\u{1b}[2K\u{202e}{}", "x".repeat(20_000));
    env.send(0, &scenario("forge-logs", serde_json::json!({ "text": text })).1).await;
    env.send(0, &scenario("ok", serde_json::json!({})).1).await;
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let log = std::env::temp_dir().join(idem_tests::unique_name("guest-text-log"));
    let out = Command::new(idem_tests::idem_bin())
        .args(["run", "--config", config.to_str().expect("path"), "--exit-when-drained"])
        .env("IDEM_LOG", "info")
        .env("IDEM_TEST_PARENT_PID", std::process::id().to_string())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .output()
        .expect("idem run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let logged = std::fs::read_to_string(&log).expect("log");
    let lines: Vec<&str> = logged.lines().collect();
    // Its log lines, its stdout and stderr, the event's failure: the text
    // was shown (escaped), several times, and never as a line of its own.
    let shown = lines.iter().filter(|l| l.contains("event committed forged=yes")).count();
    assert!(shown >= 4, "the guest's text was logged (escaped) in each place: {shown} lines\n{logged}");
    for line in &lines {
        assert!(!line.starts_with("2026-12-01T00:00:00.000000Z"), "a forged line: {line}");
        assert!(!line.contains('\u{1b}') && !line.contains('\r') && !line.contains('\u{202e}'), "raw: {line:?}");
        assert!(line.len() < 20_000, "a line of {} bytes", line.len());
    }
    let dead = kafka::read_all(&format!("{}.scenarios.dlq", env.topic));
    assert_eq!(dead.len(), 1);
    let reason = header(&dead[0], h::REASON).expect("reason");
    assert!(reason.contains("forged=yes") && !reason.contains('\n') && !reason.contains('\u{1b}'), "{reason:?}");
    assert!(reason.len() <= 4_096, "{} bytes", reason.len());
    let _ = std::fs::remove_file(&log);
    env.finish().await;
}
