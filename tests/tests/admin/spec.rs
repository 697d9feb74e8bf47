//! Answers the fuzzing run found to differ from `docs/admin-api.json`:
//! versions out of its range, NUL bytes in filters, and methods it does
//! not list on the probes.

use serde_json::Value;

use super::{Env, Host, bearer, request};

#[tokio::test(flavor = "multi_thread")]
async fn out_of_range_versions_nul_bytes_and_unlisted_methods_are_answered_as_the_openapi_document_says() {
    let doc: Value = serde_json::from_str(include_str!("../../../docs/admin-api.json")).expect("valid JSON");
    let version = &doc["paths"]["/handlers/{name}/activate"]["post"]["parameters"][1];
    assert_eq!(version["name"], "version");
    assert_eq!(
        (version["schema"]["minimum"].as_i64(), version["schema"]["maximum"].as_i64()),
        (Some(1), Some(2147483647))
    );

    let env = Env::new().await;
    let config = env.config(&env.billing(), "");
    let host = Host::start(&config, None).await;
    let auth = bearer();
    for (query, says) in [
        ("version=0", "version 0 is out of range: versions are 1 to 2147483647"),
        ("version=-1", "version -1 is out of range"),
        ("version=2147483648", "version 2147483648 is out of range"),
        ("version=99999999999999999999999", "version 99999999999999999999999 is out of range"),
        ("version=1.0", "version `1.0` is not a whole number"),
        ("version=one", "version `one` is not a whole number"),
        ("", "`?version=N`"),
        ("version=1&version=1", "once"),
    ] {
        let answer = request(host.address, "POST", &format!("/handlers/billing/activate?{query}"), &auth).await;
        assert_eq!(answer.status, 400, "?{query}: {answer:?}");
        let body: Value = serde_json::from_str(&answer.body).unwrap_or(Value::Null);
        let message = body["error"].as_str().unwrap_or_default();
        assert!(message.contains(says), "?{query}: `{message}` does not say `{says}`");
        assert!(answer.head.to_ascii_lowercase().contains("content-type: application/json"), "{answer:?}");
    }
    // A NUL byte in a filter is the request's fault, not the database's;
    // in a name it names nothing.
    for (path, status) in [
        ("/outbox?producer=a%00b", 400),
        ("/audit?handler=%00", 400),
        ("/audit?actor=a%00", 400),
        ("/handlers/billing%00/pauses", 404),
    ] {
        let answer = request(host.address, "GET", path, &auth).await;
        assert_eq!(answer.status, status, "{path}: {answer:?}");
        assert!(answer.body.contains("NUL"), "{path}: {answer:?}");
    }
    // In range but not stored: 404, as before.
    let answer = request(host.address, "POST", "/handlers/billing/activate?version=2147483647", &auth).await;
    assert_eq!(answer.status, 404, "{answer:?}");

    for probe in ["/healthz", "/readyz"] {
        let documented = doc["paths"][probe].as_object().map(|o| o.keys().cloned().collect::<Vec<_>>());
        assert_eq!(documented, Some(vec!["get".to_owned(), "head".to_owned()]), "{probe}");
        // HEAD is GET without a body, with no token, like GET.
        let head = request(host.address, "HEAD", probe, "").await;
        assert_eq!(head.status, 200, "HEAD {probe}: {head:?}");
        assert!(head.body.is_empty(), "HEAD {probe}: {head:?}");
        // Any other method: 405 naming the ones there are, token or not.
        for (method, headers) in [("TRACE", ""), ("POST", ""), ("DELETE", auth.as_str())] {
            let answer = request(host.address, method, probe, headers).await;
            assert_eq!(answer.status, 405, "{method} {probe}: {answer:?}");
            let allow =
                answer.head.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("allow: ").map(str::to_owned));
            assert!(
                allow.as_deref().is_some_and(|a| a.contains("get") && a.contains("head")),
                "{method} {probe}: {allow:?}"
            );
        }
    }
    // Elsewhere the token comes first: without it, 401 whatever the method.
    for (method, path) in [("TRACE", "/handlers"), ("DELETE", "/handlers/billing"), ("GET", "/no-such-path")] {
        let answer = request(host.address, method, path, "").await;
        assert_eq!(answer.status, 401, "{method} {path}: {answer:?}");
    }
    let answer = request(host.address, "TRACE", "/handlers", &auth).await;
    assert_eq!(answer.status, 405, "{answer:?}");
    host.stop().await;
    env.finish().await;
}
