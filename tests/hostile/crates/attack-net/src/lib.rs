//! Network attacker: requests to hosts the skill was not given, loopback spelled every way
//! an allowlist might miss, redirects to an unlisted host, path-prefix tricks (`..;`, double
//! encoding), smuggled headers, raw sockets and name lookups. The loopback servers the test
//! runs record every byte: what they receive is the verdict, not what this returns.

use attack_kit::{Request, http};
use serde::Deserialize;
use skillhost_sdk::{Context, Skill, SkillError, SkillResult, export_skill};

#[derive(Deserialize)]
struct Params {
    attack: String,
    /// URLs (or `ip:port`, or names), one a line: each is tried in turn.
    #[serde(default)]
    url: String,
    #[serde(default)]
    method: String,
    /// Request headers, `Name: value` a line (`\n` in the value is an escaped newline).
    #[serde(default)]
    headers: String,
    #[serde(default)]
    body: String,
}

struct AttackNet;

fn tcp(addr: &str) -> Result<String, String> {
    use wasip2::sockets::instance_network::instance_network;
    use wasip2::sockets::network::{IpAddressFamily, IpSocketAddress, Ipv4SocketAddress, Ipv6SocketAddress};
    use wasip2::sockets::tcp_create_socket::create_tcp_socket;

    let parsed: std::net::SocketAddr = addr.parse().map_err(|e| format!("`{addr}`: {e}"))?;
    let network = instance_network();
    let (family, remote) = match parsed {
        std::net::SocketAddr::V4(a) => {
            let o = a.ip().octets();
            (
                IpAddressFamily::Ipv4,
                IpSocketAddress::Ipv4(Ipv4SocketAddress { port: a.port(), address: (o[0], o[1], o[2], o[3]) }),
            )
        }
        std::net::SocketAddr::V6(a) => {
            let s = a.ip().segments();
            let address = (s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]);
            (
                IpAddressFamily::Ipv6,
                IpSocketAddress::Ipv6(Ipv6SocketAddress { port: a.port(), address, flow_info: 0, scope_id: 0 }),
            )
        }
    };
    let socket = create_tcp_socket(family).map_err(|e| format!("create-tcp-socket: {e:?}"))?;
    socket.start_connect(&network, remote).map_err(|e| format!("start-connect: {e:?}"))?;
    socket.subscribe().block();
    let (input, output) = socket.finish_connect().map_err(|e| format!("finish-connect: {e:?}"))?;
    output.blocking_write_and_flush(b"GET /raw-socket HTTP/1.0\r\n\r\n").map_err(|e| format!("write: {e:?}"))?;
    let got = input.blocking_read(4096).unwrap_or_default();
    Ok(format!("connected, read {} bytes", got.len()))
}

fn udp(addr: &str) -> Result<String, String> {
    use wasip2::sockets::network::IpAddressFamily;
    use wasip2::sockets::udp_create_socket::create_udp_socket;
    let _ = addr;
    let socket = create_udp_socket(IpAddressFamily::Ipv4).map_err(|e| format!("create-udp-socket: {e:?}"))?;
    drop(socket);
    Ok("udp socket created".into())
}

fn lookup(name: &str) -> Result<String, String> {
    use wasip2::sockets::instance_network::instance_network;
    use wasip2::sockets::ip_name_lookup::resolve_addresses;
    let stream = resolve_addresses(&instance_network(), name).map_err(|e| format!("resolve-addresses: {e:?}"))?;
    let mut found = Vec::new();
    loop {
        match stream.resolve_next_address() {
            Ok(Some(a)) => found.push(format!("{a:?}")),
            Ok(None) => break,
            Err(wasip2::sockets::network::ErrorCode::WouldBlock) => stream.subscribe().block(),
            Err(e) => return Err(format!("resolve-next-address: {e:?}")),
        }
    }
    Ok(found.join(", "))
}

impl Skill for AttackNet {
    type Params = Params;

    fn execute(p: Params, _ctx: &Context) -> Result<SkillResult, SkillError> {
        let headers = p.headers.replace("\\n", "\n").replace("\\r", "\r");
        let mut lines = Vec::new();
        let mut any_ok = false;
        for target in p.url.lines().filter(|l| !l.trim().is_empty()) {
            let target = &target.replace("\\r", "\r").replace("\\n", "\n");
            let r = match p.attack.as_str() {
                "http" => http(&Request {
                    method: &p.method,
                    url: target,
                    headers: &headers,
                    body: if p.body.is_empty() { vec![] } else { vec![p.body.as_bytes().to_vec()] },
                }),
                "tcp" => tcp(target),
                "udp" => udp(target),
                "dns" => lookup(target),
                other => return Err(SkillError::invalid(format!("unknown attack {other}"))),
            };
            any_ok |= r.is_ok();
            lines.push(format!("{target} => {r:?}"));
        }
        let text = lines.join("\n");
        if any_ok { Ok(SkillResult::success(text)) } else { Err(SkillError::failed(text)) }
    }
}

export_skill!(AttackNet);
