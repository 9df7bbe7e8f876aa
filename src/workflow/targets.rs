//! Which addresses workflow callbacks may reach (`--callback-allow`).
//!
//! A run's `notify_url` and a callback node's `url` come from whoever starts runs or writes
//! pipelines. Where those are not the operators themselves (several teams or tenants on one
//! deployment), an unrestricted sender is a server-side request forgery: a POST to the cloud's
//! metadata address, to the database's host, to an admin port on localhost. The setting names what
//! the sender may connect to:
//!
//! ```text
//!   any                      everything (the default: callbacks go to the operator's own services)
//!   public                   global unicast addresses only: no loopback, private, link-local
//!                            (169.254.169.254 included), shared (100.64/10), ULA, multicast, ...
//!   10.1.2.0/24,2001:db8::/32, 192.0.2.7
//!                            these networks (and `public` may be listed beside them)
//! ```
//!
//! The check is on the address connected to, not on the URL's text: a host name is resolved by
//! [`TargetResolver`] (the HTTP client's resolver), which keeps only the allowed addresses, so a
//! name that resolves to an internal address, now or after a rebinding, gets no connection. An IP
//! literal in the URL never reaches a resolver and is checked by [`Targets::check_url`].
//! Redirects are not followed and proxies are not used when a restriction is set.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use ipnet::IpNet;

/// The addresses callbacks may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Targets {
    /// No restriction.
    any: bool,
    /// Global unicast addresses.
    public: bool,
    /// These networks.
    nets: Vec<IpNet>,
}

impl Default for Targets {
    fn default() -> Self {
        Targets { any: true, public: false, nets: Vec::new() }
    }
}

impl FromStr for Targets {
    type Err = String;

    /// `any`, or a comma-separated list of `public`, networks (CIDR) and single addresses.
    fn from_str(text: &str) -> Result<Self, String> {
        let items: Vec<&str> = text.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
        if items.is_empty() {
            return Err("an empty list allows nothing: name networks, `public` or `any`".into());
        }
        if items.contains(&"any") {
            return if items.len() == 1 {
                Ok(Targets::default())
            } else {
                Err("`any` allows everything and cannot be combined with other targets".into())
            };
        }
        let mut targets = Targets { any: false, public: false, nets: Vec::new() };
        for item in items {
            if item == "public" {
                targets.public = true;
            } else if let Ok(net) = item.parse::<IpNet>() {
                targets.nets.push(as_ipv4_net(net.trunc()));
            } else if let Ok(ip) = item.parse::<IpAddr>() {
                targets.nets.push(as_ipv4_net(IpNet::from(ip)));
            } else {
                return Err(format!("{item:?} is neither `public`, `any`, a network (10.0.0.0/8) nor an address"));
            }
        }
        Ok(targets)
    }
}

/// An IPv4 network written as IPv6 (`::ffff:10.0.0.0/104`) as the IPv4 network it is, since
/// addresses are judged in their IPv4 form.
fn as_ipv4_net(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.addr().to_ipv4_mapped() {
            Some(v4) => ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).map(IpNet::V4).unwrap_or(net),
            None => net,
        },
        other => other,
    }
}

impl std::fmt::Display for Targets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.any {
            return f.write_str("any");
        }
        let mut items: Vec<String> = self.public.then(|| "public".to_string()).into_iter().collect();
        items.extend(self.nets.iter().map(|n| n.to_string()));
        f.write_str(&items.join(","))
    }
}

impl Targets {
    /// Whether every address is allowed.
    pub fn is_any(&self) -> bool {
        self.any
    }

    /// Whether a connection to `ip` is allowed. An IPv4 address written as IPv6 (`::ffff:a.b.c.d`)
    /// is judged as the IPv4 address it is.
    pub fn allows(&self, ip: IpAddr) -> bool {
        if self.any {
            return true;
        }
        let as_v4 = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        (self.public && is_public(as_v4)) || self.nets.iter().any(|n| n.contains(&as_v4))
    }

    /// The refusal for a URL whose host is an IP literal that is not allowed (or that is no
    /// URL); None otherwise (host names are checked at resolution).
    pub fn check_url(&self, url: &str) -> Option<Refused> {
        if self.any {
            return None;
        }
        let parsed = match url::Url::parse(url) {
            Ok(u) => u,
            Err(e) => return Some(Refused(format!("not a URL: {e}"))),
        };
        let ip = match parsed.host()? {
            url::Host::Ipv4(v4) => IpAddr::V4(v4),
            url::Host::Ipv6(v6) => IpAddr::V6(v6),
            url::Host::Domain(_) => return None,
        };
        (!self.allows(ip)).then(|| self.refusal(&ip.to_string()))
    }

    fn refusal(&self, what: &str) -> Refused {
        Refused(format!("{what} is not an allowed callback target (--callback-allow {self})"))
    }
}

/// A callback target the setting does not allow. The answer stays the same at every attempt
/// (only the operator changes the setting), so a refused callback is not retried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// A global unicast address: not unspecified, loopback, private, shared, link-local, multicast,
/// documentation, benchmarking or reserved space (IPv4 inside IPv6 is judged as IPv4).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0                                          // "this" network
        || a == 10                                    // private
        || (a == 100 && (64..128).contains(&b))       // shared (carrier-grade NAT)
        || a == 127                                   // loopback
        || (a == 169 && b == 254)                     // link-local, cloud metadata
        || (a == 172 && (16..32).contains(&b))        // private
        || (a == 192 && b == 0 && c == 0)             // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2)             // documentation
        || (a == 192 && b == 88 && c == 99)           // 6to4 relay anycast (deprecated)
        || (a == 192 && b == 168)                     // private
        || (a == 198 && (18..20).contains(&b))        // benchmarking
        || (a == 198 && b == 51 && c == 100)          // documentation
        || (a == 203 && b == 0 && c == 113)           // documentation
        || a >= 224) // multicast, reserved, broadcast
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let s = ip.segments();
    // NAT64's well-known prefix (64:ff9b::/96) reaches the IPv4 address in its last 32 bits
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return is_public_v4(Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8));
    }
    // Global unicast is 2000::/3; everything else (loopback, unspecified, unique local,
    // link-local, site-local, multicast, the local-use NAT64 prefix 64:ff9b:1::/48, discard-only
    // 100::/64, IPv4-compatible ::/96, reserved space) is not. Within it, left out: the IETF
    // protocol assignments 2001::/23 (Teredo, benchmarking, ORCHID among them), documentation
    // 2001:db8::/32 and 3fff::/20, and 6to4 2002::/16, whose addresses lead to an IPv4 one.
    (s[0] & 0xe000) == 0x2000
        && !(s[0] == 0x2001 && s[1] < 0x0200)
        && !(s[0] == 0x2001 && s[1] == 0x0db8)
        && s[0] != 0x2002
        && !(s[0] == 0x3fff && s[1] < 0x1000)
}

/// The HTTP client's resolver when callbacks are restricted: resolves a host name and keeps only
/// the allowed addresses; none left is an error naming the host (its addresses are traced).
#[derive(Debug, Clone)]
pub struct TargetResolver {
    targets: Arc<Targets>,
}

impl TargetResolver {
    /// A resolver that keeps `targets`.
    pub fn new(targets: Targets) -> Self {
        TargetResolver { targets: Arc::new(targets) }
    }
}

impl reqwest::dns::Resolve for TargetResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let targets = self.targets.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found.iter().copied().filter(|a| targets.allows(a.ip())).collect();
            if allowed.is_empty() {
                // the addresses go to the operator's log, not to the callback's (whoever starts
                // runs could otherwise read the internal DNS through it)
                let ips: Vec<String> = found.iter().map(|a| a.ip().to_string()).collect();
                tracing::warn!(host = %host, addresses = %ips.join(", "), "callback target refused");
                return Err(targets.refusal(&format!("{host} (as resolved)")).into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn settings_are_read_strictly() {
        assert_eq!("any".parse::<Targets>().unwrap(), Targets::default());
        let t: Targets = "public, 10.1.2.0/24,192.0.2.7, fd00::/8".parse().unwrap();
        assert_eq!(t.to_string(), "public,10.1.2.0/24,192.0.2.7/32,fd00::/8");
        assert_eq!("10.1.2.9/24".parse::<Targets>().unwrap().to_string(), "10.1.2.0/24", "host bits dropped");
        for bad in ["", " , ", "any,public", "10.0.0.0/33", "example.com", "publik"] {
            assert!(bad.parse::<Targets>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn public_leaves_out_every_internal_range() {
        for internal in [
            "0.0.0.0",
            "10.0.0.1",
            "100.64.0.1",
            "127.0.0.1",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "192.0.2.1",
            "198.18.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "fd12::1",
            "fe80::1",
            "ff02::1",
            "2001:db8::1",
            "::127.0.0.1",
            "64:ff9b:1::a9fe:a9fe",
            "2002:a9fe:a9fe::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001:2::1",
            "2001:10::1",
            "fec0::1",
            "3fff::1",
            "100:0:0:1::1",
            "5f00::1",
        ] {
            assert!(!is_public(ip(internal)), "{internal}");
        }
        for public in
            ["1.1.1.1", "8.8.8.8", "100.128.0.1", "172.32.0.1", "2606:4700::1111", "::ffff:8.8.8.8", "2a00:1450::1"]
        {
            assert!(is_public(ip(public)), "{public}");
        }
    }

    #[test]
    fn a_restriction_allows_its_networks_and_judges_mapped_addresses_as_ipv4() {
        let t: Targets = "127.0.0.0/8".parse().unwrap();
        assert!(t.allows(ip("127.0.0.1")) && t.allows(ip("::ffff:127.0.0.1")));
        assert!(!t.allows(ip("10.0.0.1")) && !t.allows(ip("8.8.8.8")));
        let p: Targets = "public".parse().unwrap();
        assert!(p.allows(ip("8.8.8.8")) && !p.allows(ip("::ffff:10.0.0.1")));
        assert!(Targets::default().allows(ip("169.254.169.254")));
        // an IPv4 network written as IPv6 is the same network
        let mapped: Targets = "::ffff:10.0.0.0/104, ::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(mapped.to_string(), "10.0.0.0/8,192.0.2.7/32");
        assert!(mapped.allows(ip("::ffff:10.1.2.3")) && mapped.allows(ip("10.1.2.3")));
        assert!(!mapped.allows(ip("11.0.0.1")));
    }

    #[test]
    fn ip_literals_in_urls_are_checked_and_names_are_left_to_the_resolver() {
        let p: Targets = "public".parse().unwrap();
        let refused = p.check_url("http://169.254.169.254/latest/meta-data").unwrap().0;
        assert!(refused.contains("169.254.169.254 is not an allowed callback target"), "{refused}");
        assert!(p.check_url("http://[::1]:8080/x").is_some());
        assert!(p.check_url("https://8.8.8.8/hook").is_none());
        assert!(p.check_url("https://hooks.example.com/x").is_none());
        assert!(Targets::default().check_url("http://127.0.0.1/x").is_none());
    }
}
