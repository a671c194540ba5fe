//! Which addresses and names an outbound request may reach when private ones are not allowed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `ip` is an address anyone on the Internet could reach: not loopback, private,
/// shared (CGNAT), link-local, multicast, broadcast, documentation, benchmarking, reserved or
/// unspecified. An IPv6 address that carries an IPv4 one (IPv4-mapped `::ffff:a.b.c.d`,
/// IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`, 6to4 `2002:AABB:CCDD::`) is judged
/// by the IPv4 address, since that is where a packet to it may end up.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

/// `localhost`, any name under `.localhost` (RFC 6761: always the host itself), with or
/// without the final dot, in any case.
pub fn is_local_name(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    host == "localhost" || host.ends_with(".localhost")
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_unspecified()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 192 && b == 88 && c == 99)
        || (a == 198 && (b == 18 || b == 19))
        || a >= 240)
}

/// The IPv4 address an IPv6 one stands for, if it is one of the forms that embed one.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    // IPv4-compatible (deprecated, ::/96 but :: and ::1, which are judged as IPv6).
    if s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1) {
        return Some(low);
    }
    // NAT64, the well-known prefix.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(low);
    }
    // 6to4: the IPv4 address follows the prefix.
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8));
    }
    None
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // unique local
        || (s[0] & 0xffc0) == 0xfe80 // link-local
        || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x2001 && s[1] == 0) // Teredo: tunnels to anywhere
        || (s[0] == 0x0064 && s[1] == 0xff9b) // NAT64, local-use prefixes
        || (s[0] == 0x0100 && s[1..4] == [0, 0, 0])) // discard-only
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_global_addresses_are_public() {
        for private in [
            "127.0.0.1",
            "127.255.0.9",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "192.0.0.8",
            "198.18.0.1",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fec0::1",
            "fd00::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "::ffff:0.0.0.0",
            "64:ff9b::7f00:1",
            "64:ff9b:1::1",
            "2002:7f00:1::",
            "2002:c0a8:101::1",
            "2001:0:4136:e378::1",
            "2001:db8::1",
            "100::1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in
            ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"]
        {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn localhost_in_every_spelling_is_local() {
        for name in ["localhost", "LocalHost", "localhost.", "a.localhost", "x.y.LOCALHOST."] {
            assert!(is_local_name(name), "{name}");
        }
        for name in ["localhost.example.com", "notlocalhost", "example.com"] {
            assert!(!is_local_name(name), "{name}");
        }
    }
}
