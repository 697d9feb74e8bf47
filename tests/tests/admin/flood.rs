//! Connection floods: half-sent requests from one peer, and idle
//! connections from many under a low open-files limit while events flow.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use idem_tests::{host, kafka};

use super::{Env, Host, client, connect_from, exchange};

/// The start of a request whose headers never end.
const HALF: &[u8] = b"GET /handlers HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: ";

#[tokio::test(flavor = "multi_thread")]
async fn half_sent_requests_beyond_the_cap_are_closed_within_the_header_timeout_and_probes_still_answer() {
    let env = Env::new().await;
    let config =
        env.config(&env.billing(), "header_timeout = \"1s\"\nmax_connections = 64\nmax_connections_per_peer = 8");
    let host = Host::start(&config, None).await;

    // 40 connections from one peer (127.0.0.2), each with half a request:
    // 8 are served (and dropped at the header timeout), 32 refused at once.
    let flooder: IpAddr = "127.0.0.2".parse().expect("ip");
    let started = Instant::now();
    let mut flood = Vec::new();
    for i in 0..40 {
        let mut stream = connect_from(flooder, host.address).await;
        flood.push(tokio::spawn(async move {
            exchange(&mut stream, HALF, Duration::from_secs(10), &format!("half-sent request {i}")).await
        }));
    }
    let opened = started.elapsed();
    // Meanwhile the probes, from another address, answer.
    for _ in 0..5 {
        let probe = tokio::time::timeout(Duration::from_secs(5), client().get(format!("{}/healthz", host.url)).send());
        let status = probe.await.expect("/healthz answered within 5 s during the flood").expect("/healthz").status();
        assert_eq!(status, 200);
    }
    let mut answers = Vec::new();
    for f in flood {
        answers.push(f.await.expect("flood task"));
    }
    let all_closed = started.elapsed();
    assert!(all_closed < Duration::from_secs(10), "every flood connection closed within 10 s, took {all_closed:?}");
    for a in &answers {
        // A refused one may see its 503 or, having sent bytes the server
        // never read, a reset; a served one sees its connection closed.
        assert!(matches!(a.status, 0 | 503), "{a:?}");
        if a.status == 503 {
            assert!(a.body.contains("max_connections_per_peer"), "{a:?}");
            assert!(a.took < Duration::from_secs(1), "a refused connection is answered at once: {a:?}");
        }
    }
    // The cap, exactly: a peer's connection is admitted while fewer than 8
    // of its own are open (`admin/peers.rs`); the 40 were all opened within
    // the header timeout, before any served one was closed.
    assert!(opened < Duration::from_secs(1), "the flood was opened within the header timeout: {opened:?}");
    let timed_out = host.metric("idem_admin_timeouts_total", Some(("phase", "headers"))).await;
    assert_eq!(timed_out, Some(8.0), "the 8 served, and only they, were closed by the header timeout");
    let refused = host.metric("idem_admin_connections_refused_total", Some(("reason", "peer"))).await;
    assert_eq!(refused, Some(32.0), "40 from one peer with max_connections_per_peer = 8: 32 refused");
    let answered = answers.iter().filter(|a| a.status == 503).count();
    assert!(answered <= 32, "no more 503s than refusals: {answered}");
    eprintln!(
        "flood of 40 half-sent requests: all closed after {all_closed:?}; {} answered 503; {refused:?} refused for \
         the per-peer cap",
        answers.iter().filter(|a| a.status == 503).count()
    );
    // Every slot is given back: only the reader of /metrics is connected.
    let open = host.metric_becomes("idem_admin_connections", None, 1.0).await;
    assert_eq!(open, Some(1.0), "connections the listener still counts");
    host.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_idle_connections_under_a_low_open_files_limit_does_not_stop_events_being_committed() {
    let env = Env::new().await;
    let spec = env.billing();
    // Idle connections are kept open for a minute: the flood lasts.
    let config = env.config(&spec, "header_timeout = \"60s\"");
    let host = Host::start(&config, Some(256)).await;

    // 300 idle connections, 15 from each of 20 loopback addresses: more
    // than the whole limit of open files, fewer than the per-peer cap each.
    let mut flood = Vec::new();
    for i in 0..300u32 {
        let from = IpAddr::from([127, 0, 1, u8::try_from(1 + i % 20).expect("small")]);
        flood.push(connect_from(from, host.address).await);
    }
    // The listener is full: a new client is told so at once (nothing
    // written, so nothing unread is reset away).
    let mut late = tokio::net::TcpStream::connect(host.address).await.expect("connect");
    let told = exchange(&mut late, b"", Duration::from_secs(5), "a connection beyond the cap").await;
    assert_eq!(told.status, 503, "{told:?}");
    assert!(told.body.contains("max_connections"), "{told:?}");
    assert!(told.head.to_ascii_lowercase().contains("retry-after: 1"), "{told:?}");

    // Events go on being processed and committed while the flood holds.
    let n = 200i64;
    let records: Vec<(i32, Vec<u8>)> = (0..n).map(|i| ((i % 2) as i32, host::order_payload(i + 1).1)).collect();
    kafka::produce_all(&kafka::producer(), &env.topic, &records).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let charges = "SELECT count(*) FROM billing.charge";
    while env.db.count(charges).await < n {
        assert!(Instant::now() < deadline, "charged {} of {n} within 60 s of the flood", env.db.count(charges).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (group, topic) = (spec.group_id.clone(), env.topic.clone());
    let ends = kafka::high_watermarks(&topic, 2);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let committed = kafka::committed(&group, &topic, 2);
        if committed.iter().zip(&ends).all(|(c, end)| *c == Some(*end)) {
            break;
        }
        assert!(Instant::now() < deadline, "offsets {committed:?} not committed to {ends:?} within 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(env.provider.charges(), n as usize, "each charged once at the provider");

    drop(flood);
    let open = host.metric_becomes("idem_admin_connections", None, 1.0).await;
    assert_eq!(open, Some(1.0), "the flood's slots were given back");
    let refused = host.metric("idem_admin_connections_refused_total", Some(("reason", "total"))).await;
    // 64 served (a quarter of 256), the rest refused.
    assert!(refused.is_some_and(|r| r >= 200.0), "refused for the cap: {refused:?}");
    host.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_never_takes_its_answers_is_dropped_at_the_body_timeout() {
    let env = Env::new().await;
    let config = env.config(&env.billing(), "body_timeout = \"2s\"");
    let host = Host::start(&config, None).await;
    // Pipelined requests for /metrics, none of whose answers is read: the
    // answers fill the socket's buffers and the server's write waits.
    let mut stream = tokio::net::TcpStream::connect(host.address).await.expect("connect");
    let one = format!("GET /metrics HTTP/1.1\r\nhost: {}\r\n{}\r\n", host.address, super::bearer());
    let writer = tokio::spawn(async move {
        let many = one.repeat(100);
        for _ in 0..100 {
            if tokio::io::AsyncWriteExt::write_all(&mut stream, many.as_bytes()).await.is_err() {
                break;
            }
        }
        stream
    });
    let start = Instant::now();
    // Wait until the server is stuck on it (its answers no longer taken),
    // then until it has dropped it: only the reader of /metrics is left.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while host.metric("idem_admin_connections", None).await != Some(1.0) {
        assert!(Instant::now() < deadline, "the connection that takes no answers was still served after 20 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("a client that took no answers was dropped {:?} after it began", start.elapsed());
    let _stream = tokio::time::timeout(Duration::from_secs(10), writer).await;
    host.stop().await;
    env.finish().await;
}
