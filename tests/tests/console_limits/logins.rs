//! Wrong logins counted per address: past 4,096 addresses, and on a
//! listener that takes IPv4 and IPv6 alike.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use futures::StreamExt as _;

use super::console::login_from;
use super::{Env, Host, READ_TOKEN, TOKEN, loopback};

/// README ("What keeps a browser's attacks out"): wrong tokens are
/// "answered 429 instead of 401 past 10 a minute from an IPv4 address or
/// IPv6 /64 (when 4,096 addresses are being counted, newcomers share one
/// count)", and "The right token is always let in". One wrong login from
/// each of 4,096 loopback addresses fills the count; then a newcomer's ten
/// wrong tries are answered 401 and another newcomer's first 429 (one
/// count between them: with a count per newcomer it would be 401), while
/// the right tokens from newcomers are let in and an address already
/// counted keeps its own count (401 until its own tenth, then 429).
#[tokio::test(flavor = "multi_thread")]
async fn past_4096_counted_addresses_newcomers_share_one_count_and_the_right_token_is_still_let_in() {
    let env = Env::new().await;
    let host = Host::start(&env.config("")).await;
    let to = host.address;
    let started = Instant::now();
    let flood: Vec<(u32, u16)> = futures::stream::iter(0..4096u32)
        .map(|i| async move { (i, login_from(loopback(30, i), to, "wrong-guess").await) })
        .buffer_unordered(32)
        .collect()
        .await;
    let flooded = started.elapsed();
    let refused: Vec<_> = flood.iter().filter(|(_, status)| *status != 401).collect();
    assert!(refused.is_empty(), "a first wrong try from each of 4,096 addresses is a 401: {refused:?}");
    eprintln!("4,096 addresses counted in {flooded:?}");

    // Newcomers: one count between all of them.
    let (first, second, third) = (loopback(31, 1), loopback(31, 2), loopback(31, 3));
    let mut statuses = Vec::new();
    for _ in 0..10 {
        statuses.push(login_from(first, to, "wrong-guess").await);
    }
    assert_eq!(statuses, [401; 10], "a newcomer's first ten wrong tries");
    assert_eq!(
        login_from(second, to, "wrong-guess").await,
        429,
        "another newcomer's first wrong try, on the count newcomers share"
    );
    assert_eq!(login_from(second, to, TOKEN).await, 200, "the right token from a slowed newcomer");
    assert_eq!(login_from(third, to, READ_TOKEN).await, 200, "the read token from a newcomer");
    assert_eq!(login_from(first, to, TOKEN).await, 200, "the right token from the newcomer that failed ten times");

    // An address counted before keeps its own count.
    assert_eq!(login_from(loopback(30, 7), to, "wrong-guess").await, 401, "a counted address's second wrong try");
    let counted = loopback(30, 0);
    let mut statuses = Vec::new();
    for _ in 0..10 {
        statuses.push(login_from(counted, to, "wrong-guess").await);
    }
    assert_eq!(statuses[..9], [401; 9], "a counted address's own tries 2 to 10: {statuses:?}");
    assert_eq!(statuses[9], 429, "its eleventh in the minute: {statuses:?}");
    assert_eq!(login_from(counted, to, TOKEN).await, 200, "the right token from it");
    // The first wrong tries are a minute old after 60 s and forgotten:
    // everything above must have run within that minute.
    let took = started.elapsed();
    assert!(took < Duration::from_secs(55), "the checks ran {took:?} after the first wrong try, not within the minute");
    host.stop().await;
    env.finish().await;
}

/// README: wrong tries are counted "from an IPv4 address or IPv6 /64".
/// On a listener bound to `[::]` (IPv4 and IPv6 on one socket), IPv4
/// clients arrive as IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`); each
/// IPv4 address must still have its own count: after ten wrong tries from
/// 127.0.0.2 (and an eleventh answered 429), 127.0.0.3's first wrong try is
/// a 401. Cut to its "/64", every mapped address is `::`, one count.
#[tokio::test(flavor = "multi_thread")]
async fn on_a_listener_for_ipv4_and_ipv6_each_ipv4_address_has_its_own_count_of_wrong_logins() {
    if std::net::TcpListener::bind("[::]:0").is_err() {
        eprintln!("no IPv6 on this machine: a listener on [::] cannot be tested here");
        return;
    }
    let env = Env::new().await;
    let config = env.config("");
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, text.replacen("listen = \"127.0.0.1:", "listen = \"[::]:", 1)).expect("config");
    let host = Host::start(&config).await;
    let to = host.address;
    let (one, two): (IpAddr, IpAddr) = ([127, 0, 0, 2].into(), [127, 0, 0, 3].into());
    let mut statuses = Vec::new();
    for _ in 0..11 {
        statuses.push(login_from(one, to, "wrong-guess").await);
    }
    assert_eq!(statuses[..10], [401; 10], "{statuses:?}");
    assert_eq!(statuses[10], 429, "past 10 a minute from 127.0.0.2: {statuses:?}");
    assert_eq!(
        login_from(two, to, "wrong-guess").await,
        401,
        "127.0.0.3's first wrong try, counted apart from 127.0.0.2's"
    );
    assert_eq!(login_from(one, to, TOKEN).await, 200, "the right token from the slowed address");
    host.stop().await;
    env.finish().await;
}
