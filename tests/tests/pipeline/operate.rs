//! Calls on the admin API of a running host, and the hosts' names and
//! partitions, for the tests of operators' levers (`pauses`, `rewinds`).

use serde_json::Value;
use std::time::Duration;

pub(crate) async fn post(admin: &str, path: &str, body: Value) -> (u16, Value) {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("client");
    let response = client.post(format!("{admin}{path}")).json(&body).send().await.expect("the admin API answers");
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

pub(crate) async fn get(admin: &str, path: &str) -> Option<String> {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("client");
    client.get(format!("{admin}{path}")).send().await.ok()?.text().await.ok()
}

/// `config` with the host's own static-membership name.
pub(crate) fn named(config: &std::path::Path, name: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(config).expect("config");
    std::fs::write(config, text.replace("[kafka]\n", &format!("[kafka]\ninstance_id = \"{name}\"\n"))).expect("config");
    config.to_path_buf()
}

/// Which hosts own the four partitions, as `GET /fleet` says.
pub(crate) async fn owners(admin: &str) -> Vec<String> {
    let Some(text) = get(admin, "/fleet").await else { return Vec::new() };
    let fleet: Value = serde_json::from_str(&text).unwrap_or_default();
    let partitions = fleet["partitions"].as_array().cloned().unwrap_or_default();
    partitions.iter().filter(|p| p["owned"] == true).filter_map(|p| p["host"].as_str().map(str::to_owned)).collect()
}
