//! Uploads from clients that never finish, or declare too much.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use idem_tests::guests;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::{Answer, Env, Host, TOKEN, bearer, client, exchange, parse, request};

fn billing_bytes() -> Vec<u8> {
    std::fs::read(guests::component("billing")).expect("billing component")
}

/// A chunked upload that sends one byte every 200 ms and never ends (for
/// `lasts` at most); what the server answered, `took` since the headers.
async fn slowloris(address: SocketAddr, lasts: Duration) -> Answer {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    let head = format!(
        "PUT /handlers/billing/module HTTP/1.1\r\nhost: {address}\r\n{}transfer-encoding: chunked\r\n\r\n",
        bearer()
    );
    stream.write_all(head.as_bytes()).await.expect("headers");
    let start = Instant::now();
    let (mut read, mut write) = stream.into_split();
    let dribble = tokio::spawn(async move {
        while start.elapsed() < lasts && write.write_all(b"1\r\nx\r\n").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let mut bytes = Vec::new();
    let _ = tokio::time::timeout(lasts, read.read_to_end(&mut bytes)).await;
    dribble.abort();
    parse(&bytes, start.elapsed())
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_uploads_lose_their_slots_at_the_body_timeout_and_another_upload_gets_through() {
    let env = Env::new().await;
    let config = env.config(&env.billing(), "body_timeout = \"2s\"");
    let host = Host::start(&config, None).await;

    // Two uploads that would never finish take both upload slots.
    let lasts = Duration::from_secs(120);
    let slow: Vec<_> = (0..2).map(|_| tokio::spawn(slowloris(host.address, lasts))).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while host.metric("idem_admin_uploads", None).await != Some(2.0) {
        assert!(Instant::now() < deadline, "the slow uploads did not take both slots");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A real upload waits at most until their body timeout (plus its own
    // validation), not for as long as they dribble.
    let start = Instant::now();
    let bytes = guests::with_marker(&billing_bytes(), "v2");
    let response = client()
        .put(format!("{}/handlers/billing/module", host.url))
        .bearer_auth(TOKEN)
        .body(bytes)
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .expect("the upload was answered within 60 s");
    let took = start.elapsed();
    assert_eq!(response.status(), 201, "{:?}", response.text().await);
    for s in slow {
        let answer = s.await.expect("slow upload");
        assert_eq!(answer.status, 408, "{answer:?}");
        assert!(answer.body.contains("did not arrive within 2s ([admin] body_timeout)"), "{answer:?}");
        assert!(answer.took < Duration::from_secs(20), "answered {:?} after the headers", answer.took);
    }
    eprintln!("an upload behind two never-ending ones was stored {took:?} after it was sent");

    // The slots are free again: two uploads at once both get through.
    assert_eq!(host.metric_becomes("idem_admin_uploads", None, 0.0).await, Some(0.0));
    assert_eq!(host.metric("idem_admin_timeouts_total", Some(("phase", "body"))).await, Some(2.0));
    let both = (0..2).map(|i| {
        let url = format!("{}/handlers/billing/module", host.url);
        let bytes = guests::with_marker(&billing_bytes(), &format!("v3-{i}"));
        async move { client().put(url).bearer_auth(TOKEN).body(bytes).send().await.expect("upload").status() }
    });
    let statuses = futures::future::join_all(both).await;
    assert_eq!(statuses, [201, 201]);
    host.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_declared_length_over_the_limit_is_refused_before_the_body_is_sent() {
    let env = Env::new().await;
    let mut spec = env.billing();
    spec.extra = "max_module_mib = 1\n".into();
    let config = env.config(&spec, "");
    let host = Host::start(&config, None).await;

    // Headers only: the answer comes without a byte of the body.
    let declared = "content-length: 10485760\r\n";
    let answer = request(host.address, "PUT", "/handlers/billing/module", &format!("{}{declared}", bearer())).await;
    assert_eq!(answer.status, 413, "{answer:?}");
    assert!(
        answer.body.contains("10485760 bytes (Content-Length), larger than 1048576 bytes, the limit of `billing`"),
        "{answer:?}"
    );
    assert!(answer.took < Duration::from_secs(5), "answered at once: {answer:?}");
    // Without the token the same request is refused for that first.
    let answer = request(host.address, "PUT", "/handlers/billing/module", declared).await;
    assert_eq!(answer.status, 401, "{answer:?}");
    // A chunked body over the limit is refused once the limit is passed.
    let mut stream = TcpStream::connect(host.address).await.expect("connect");
    let head = format!(
        "PUT /handlers/billing/module HTTP/1.1\r\nhost: {}\r\n{}transfer-encoding: chunked\r\nconnection: close\r\n\r\n",
        host.address,
        bearer()
    );
    stream.write_all(head.as_bytes()).await.expect("headers");
    let chunk = format!("{:x}\r\n{}\r\n", 1 << 16, "x".repeat(1 << 16));
    for _ in 0..17 {
        if stream.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
    }
    let answer = exchange(&mut stream, b"", Duration::from_secs(10), "an oversized chunked upload").await;
    // The answer may be lost to a reset when the server closes with bytes unread.
    assert!(matches!(answer.status, 0 | 413), "{answer:?}");
    if answer.status == 413 {
        assert!(answer.body.contains("larger than 1048576 bytes"), "{answer:?}");
    }
    assert_eq!(host.metric("idem_admin_uploads", None).await, Some(0.0));
    host.stop().await;
    env.finish().await;
}
