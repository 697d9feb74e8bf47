//! Where a handler's requests may go: the allowlist, matched after the
//! URL's normalisation, and the addresses a name may resolve to.
//!
//! A request reaches a private address (loopback, RFC 1918, link-local —
//! where cloud metadata services live —, unique-local, CGNAT, unspecified,
//! multicast, …) only when the allowlist entry it matches is also listed in
//! `allow_private`: by IP literal or by a name that resolves there alike.
//! Each handler's client resolves names through [`GuardedResolver`], which
//! drops the addresses the policy refuses and hands the rest to the
//! connector: the address checked is the address connected to, with no
//! second resolution in between. Proxies from the environment are ignored.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::policy::HttpPolicy;

/// The allowlist entry `url` lies under, if any: same scheme, host and
/// port, path under the entry's path at a segment boundary. A path with an
/// encoded slash or backslash is refused first (a server may decode it and
/// leave the prefix); dot segments are resolved by the URL parser before.
pub(crate) fn matching_entry<'a>(allow: &'a [String], url: &Url) -> Option<&'a str> {
    let raw = url.path().to_ascii_lowercase();
    if raw.contains("%2f") || raw.contains("%5c") || raw.contains('\\') || raw.contains("%2e") {
        return None;
    }
    allow.iter().map(String::as_str).find(|base| {
        let Ok(base) = Url::parse(base) else { return false };
        let prefix = base.path().trim_end_matches('/');
        let path_ok = url.path().strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
        base.scheme() == url.scheme()
            && base.host_str().map(str::to_ascii_lowercase) == url.host_str().map(str::to_ascii_lowercase)
            && base.port_or_known_default() == url.port_or_known_default()
            && path_ok
    })
}

/// Whether `ip` is a public unicast address.
pub(crate) fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    !(ip.is_private()
        || ip.is_loopback()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && ip.octets()[2] == 0)
        || (a == 198 && (b == 18 || b == 19)) // benchmarking, often internal
        || a >= 240)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00 // unique local, fd00:ec2::254 among them
        || (first & 0xffc0) == 0xfe80 // link-local
        || (first & 0xffc0) == 0xfec0 // site-local (deprecated)
        || first == 0x2001 && ip.segments()[1] == 0x0db8 // documentation
        || first == 0x0064 && ip.segments()[1] == 0xff9b // NAT64 to anything
        || first == 0x2002 // 6to4: embeds any IPv4 address
        || ip.segments()[..6] == [0; 6]) // IPv4-compatible (deprecated)
}

/// Hosts whose names may resolve to private addresses: those of the
/// policy's `allow_private` entries.
fn private_hosts(policy: &HttpPolicy) -> Vec<String> {
    policy.allow_private.iter().filter_map(|u| Url::parse(u).ok()?.host_str().map(str::to_ascii_lowercase)).collect()
}

/// Why a request to `url` (already matched to `entry`) is refused before
/// any connection, if its host is an IP literal the policy refuses.
pub(crate) fn check_literal(policy: &HttpPolicy, entry: &str, url: &Url) -> Result<(), String> {
    let host = url.host_str().unwrap_or_default();
    let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() else { return Ok(()) };
    if is_public(ip) || policy.allow_private.iter().any(|p| p == entry) {
        return Ok(());
    }
    Err(format!("`{url}` is a private address ({ip}); list `{entry}` in http.allow_private to permit it"))
}

/// Resolves names for one handler's client, keeping only the addresses its
/// policy permits.
#[derive(Debug)]
pub(crate) struct GuardedResolver {
    private_hosts: Vec<String>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().trim_end_matches('.').to_ascii_lowercase();
        let private_ok = self.private_hosts.contains(&host);
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept: Vec<SocketAddr> = found.iter().copied().filter(|a| private_ok || is_public(a.ip())).collect();
            if kept.is_empty() {
                let shown: Vec<String> = found.iter().map(|a| a.ip().to_string()).collect();
                return Err(format!(
                    "`{host}` resolves only to private addresses ({}); list its base URL in http.allow_private \
                     to permit them",
                    shown.join(", ")
                )
                .into());
            }
            Ok(Box::new(kept.into_iter()) as Addrs)
        })
    }
}

/// The client of one handler: no redirects, no proxies from the
/// environment, names resolved through [`GuardedResolver`].
pub fn client(policy: &HttpPolicy) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(GuardedResolver { private_hosts: private_hosts(policy) }))
        .build()
}

/// As [`client`], every request sent through the HTTP proxy at `proxy`
/// (`idem test`'s recorder) instead of to its host, trusting the
/// certificate authority `ca` (DER) as well as the public ones: the
/// recorder's own, which issues the certificates of the `https` hosts it
/// stands in for.
pub fn client_via(policy: &HttpPolicy, proxy: &str, ca: &[u8]) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .proxy(reqwest::Proxy::all(proxy)?)
        .add_root_certificate(reqwest::Certificate::from_der(ca)?)
        .dns_resolver(Arc::new(GuardedResolver { private_hosts: private_hosts(policy) }))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowlist_matches_scheme_host_port_and_path_prefix() {
        let allow = vec!["http://127.0.0.1:18080".to_owned(), "https://pay.example/v1/".to_owned()];
        let ok = |u: &str| matching_entry(&allow, &Url::parse(u).expect("test URL")).is_some();
        assert!(ok("http://127.0.0.1:18080/v1/charges"));
        assert!(ok("https://pay.example/v1/charges"));
        assert!(ok("https://PAY.example:443/v1"));
        assert!(!ok("http://127.0.0.1:18081/v1/charges"));
        assert!(!ok("https://127.0.0.1:18080/"));
        assert!(!ok("https://pay.example/v10/charges"));
        assert!(!ok("https://pay.example.evil.test/v1/charges"));
        assert!(!ok("http://localhost:18080/"));
        assert!(!ok("https://pay.example/v1/../admin"), "dot segments are resolved before matching");
        assert!(!ok("https://pay.example/v1/%2e%2e/admin"));
        assert!(!ok("https://pay.example/v1/..%2Fadmin"), "an encoded slash is refused");
        assert!(!ok("https://pay.example/v1/x%5cy"));
        assert!(matching_entry(&[], &Url::parse("http://127.0.0.1:18080/").expect("test URL")).is_none());
    }

    #[test]
    fn private_and_metadata_addresses_are_not_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "2002:7f00:1::",
            "198.18.0.1",
        ] {
            assert!(!is_public(ip.parse().expect("ip")), "{ip}");
        }
        for ip in ["1.1.1.1", "93.184.216.34", "2606:4700:4700::1111"] {
            assert!(is_public(ip.parse().expect("ip")), "{ip}");
        }
    }

    #[test]
    fn an_ip_literal_needs_allow_private() {
        let mut policy = HttpPolicy { allow: vec!["http://169.254.169.254".into()], ..HttpPolicy::default() };
        let url = Url::parse("http://169.254.169.254/latest/meta-data/").expect("url");
        let why = check_literal(&policy, "http://169.254.169.254", &url).expect_err("metadata");
        assert!(why.contains("allow_private"), "{why}");
        policy.allow_private = vec!["http://169.254.169.254".into()];
        assert_eq!(check_literal(&policy, "http://169.254.169.254", &url), Ok(()));
    }
}
