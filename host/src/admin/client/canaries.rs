//! `idem status`'s canary lines: each handler's canary, this host's
//! executions per version, and how its last canary ended
//! (`GET /handlers/{name}/canary`).

use std::fmt::Write as _;

use serde_json::Value;

/// The canary lines of `handlers` (nothing for one that never had one, or
/// when the host cannot say).
pub(super) async fn lines(client: &reqwest::Client, url: &str, token: Option<&str>, handlers: &[String]) -> String {
    let answers = super::shadows::each(client, url, token, handlers, "canary").await;
    answers.iter().map(|(handler, answer)| render(handler, answer)).collect()
}

/// One handler's canary as lines.
pub(super) fn render(handler: &str, answer: &Value) -> String {
    let mut out = String::new();
    let ran = |v: &Value| {
        let n = |k: &str| answer["counts"][v.to_string()][k].as_u64().unwrap_or(0);
        (n("processed") + n("duplicates") + n("failed"), n("failed"))
    };
    let canary = &answer["canary"];
    if !canary.is_null() {
        let (n, failed) = ran(&canary["version"]);
        let _ = writeln!(
            out,
            "\ncanary of {handler}: version {} on {}% of the keys since {}; this host ran it {n} time(s), {failed} \
             failed (idem deploy --promote | --abort)",
            canary["version"],
            canary["percent"],
            canary["since"].as_str().unwrap_or("-"),
        );
    }
    if let Some(last) = answer["verdicts"].as_array().and_then(|v| v.first())
        && canary.is_null()
    {
        let _ = writeln!(
            out,
            "\nlast canary of {handler}: version {} {} at {}: {}",
            last["version"],
            last["verdict"].as_str().unwrap_or(""),
            last["at"].as_str().unwrap_or(""),
            last["reason"].as_str().unwrap_or(""),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_canary_and_a_rolled_back_one_read_as_such() {
        let running = serde_json::json!({
            "canary": {"version": 2, "percent": 20, "since": "2026-12-06T10:00:00Z"},
            "counts": {"2": {"processed": 7, "duplicates": 0, "failed": 3}}, "verdicts": [],
        });
        let text = render("billing", &running);
        assert!(text.contains("canary of billing: version 2 on 20% of the keys since 2026-12-06T10:00:00Z"), "{text}");
        assert!(text.contains("this host ran it 10 time(s), 3 failed"), "{text}");
        let ended = serde_json::json!({"canary": null, "counts": {}, "verdicts": [
            {"version": 2, "verdict": "rolled back", "at": "2026-12-06T10:05:00Z", "reason": "failed 30%"}]});
        let text = render("billing", &ended);
        assert!(
            text.contains("last canary of billing: version 2 rolled back at 2026-12-06T10:05:00Z: failed 30%"),
            "{text}"
        );
    }
}
