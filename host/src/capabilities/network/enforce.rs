//! `network`: outbound HTTP through wasi:http, allowed only to URLs that match an effective
//! allowlist rule. Raw sockets and name lookup are refused to every skill (see
//! `CallState::new`); no capability grants them.
//!
//! Private, loopback, link-local and metadata addresses are refused even when an allowed
//! *name* resolves to them (DNS rebinding); they are reachable only when the rule names the
//! address itself (`http://127.0.0.1:8080`). The checked address is the one connected to:
//! for plain http the URI is pinned to it (the Host header keeps the name); for https the
//! connection is made to it by [`send_https_pinned`], with the certificate verified for the
//! name, so there is no second resolution to rebind.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use http_body_util::BodyExt;
use wasmtime::component::Linker;
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi_http::{
    Error as HttpError, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView,
};

use crate::capabilities::CapabilityKind;
use crate::capabilities::network::Network;
use crate::capabilities::secrets::held::{CallSecrets, OnFind, ScannedBody};
use crate::capabilities::{NetRule, default_port};
use crate::sandbox::capability::{CallSetup, Enforce};
use crate::sandbox::{CallState, Denial};

/// Bytes (in memory, as wasi-http counts them) one `wasi:http` header map may hold: above
/// what proxies accept on the wire (8 KiB), far below wasi-http's default of 128 KiB.
pub(crate) const FIELD_SIZE_LIMIT: usize = 16 * 1024;

/// The network slice of a call: wasi:http's context and the gate its requests go through.
pub(crate) struct NetworkState {
    pub http: WasiHttpCtx,
    pub gate: NetworkGate,
    /// Raw socket uses refused during the call (see `sockets`).
    pub sockets: crate::sandbox::sockets::SocketRefusals,
}

impl Enforce for Network {
    type State = NetworkState;
    const GOVERNS: &'static [&'static str] = &["wasi:http/outgoing-handler"];

    /// wasi:http (types and the outgoing handler); every request passes [`NetworkGate`].
    fn add_to_linker(linker: &mut Linker<CallState>) -> Result<()> {
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
        crate::sandbox::sockets::add_to_linker(linker)?;
        Ok(())
    }

    fn prepare(
        rules: &Vec<NetRule>,
        call: &CallSetup<'_>,
        _: &mut WasiCtxBuilder,
        _: &mut Vec<Denial>,
    ) -> Result<NetworkState> {
        // Header maps live in host memory, outside the guest's limit: each is capped here and
        // their number by the call's handle cap (`MAX_HANDLES_PER_CALL`), so one call holds at
        // most their product, whatever capabilities it has.
        let mut http = WasiHttpCtx::new();
        http.set_field_size_limit(FIELD_SIZE_LIMIT);
        Ok(NetworkState {
            http,
            gate: NetworkGate::new(rules.clone(), call.secrets.clone()),
            sockets: Default::default(),
        })
    }

    fn take_denials(state: &mut NetworkState) -> Vec<Denial> {
        let mut out = state.gate.denials.take();
        out.extend(state.sockets.take());
        out
    }
}

pub(crate) struct NetworkGate {
    rules: Vec<NetRule>,
    denials: SharedDenials,
    /// Injects the secrets meant for a request's host and scans every request and response
    /// for held values (see `secrets`).
    secrets: Arc<CallSecrets>,
}

#[derive(Clone, Default)]
struct SharedDenials(Arc<Mutex<Vec<Denial>>>);

impl SharedDenials {
    fn push(&self, message: String) {
        if let Ok(mut d) = self.0.lock() {
            d.push(Denial { capability: CapabilityKind::Network.into(), message });
        }
    }

    fn take(&self) -> Vec<Denial> {
        self.0.lock().map(|mut d| std::mem::take(&mut *d)).unwrap_or_default()
    }
}

impl NetworkGate {
    fn new(rules: Vec<NetRule>, secrets: Arc<CallSecrets>) -> NetworkGate {
        NetworkGate { rules, denials: SharedDenials::default(), secrets }
    }
}

/// Addresses a skill must not reach through a name: loopback, private, link-local (which
/// includes the 169.254.169.254 cloud metadata service), unspecified, CGNAT, ULA.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || (o[0] == 100 && (64..128).contains(&o[1]))
                || (o[0] == 198 && (o[1] == 18 || o[1] == 19))
                || o[0] >= 224
                || o[0] == 0
        }
        IpAddr::V6(v6) => {
            let seg0 = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || (seg0 & 0xfe00) == 0xfc00
                || (seg0 & 0xffc0) == 0xfe80
                || v6.is_multicast()
                || v6.to_ipv4_mapped().is_some_and(|v4| is_internal(IpAddr::V4(v4)))
                // NAT64 (64:ff9b::/96) reaches the embedded IPv4 address.
                || (v6.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0] && {
                    let o = v6.octets();
                    is_internal(IpAddr::V4(std::net::Ipv4Addr::new(o[12], o[13], o[14], o[15])))
                })
        }
    }
}

fn denied<T: Send + 'static>(err: HttpError) -> Box<dyn Future<Output = Result<T, HttpError>> + Send> {
    Box::new(async move { Err(err) })
}

type SendResult = Result<(http::Response<WasiBody>, Box<dyn Future<Output = Result<(), HttpError>> + Send>), HttpError>;

impl WasiHttpHooks for NetworkGate {
    fn send_request(
        &mut self,
        mut request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        let uri = request.uri().clone();
        let scheme = uri.scheme_str().unwrap_or("https").to_ascii_lowercase();
        let Some(host) = uri.host().map(|h| h.trim_start_matches('[').trim_end_matches(']').to_string()) else {
            self.denials.push(format!("request to `{uri}` has no host"));
            return denied(HttpError::HttpRequestUriInvalid);
        };
        let port = uri.port_u16().unwrap_or_else(|| default_port(&scheme));
        let path = uri.path().to_string();
        let url = format!("{scheme}://{host}:{port}{path}");
        if self.rules.is_empty() {
            self.denials.push(format!("HTTP request to {url} denied: the skill holds no `network` capability"));
            return denied(HttpError::HttpRequestDenied);
        }
        if !self.rules.iter().any(|r| r.matches(&scheme, &host, port, &path)) {
            let allowed: Vec<String> = self.rules.iter().map(ToString::to_string).collect();
            self.denials
                .push(format!("HTTP request to {url} denied: not in the effective allowlist [{}]", allowed.join(", ")));
            return denied(HttpError::HttpRequestDenied);
        }
        let carries_secret = match self.secrets.prepare_request(&mut request, &scheme, &host, port, &url) {
            Ok(carried) => carried,
            Err(e) => return denied(e),
        };
        let scanning = !self.secrets.scanner.is_empty();
        let request = if scanning {
            let secrets = self.secrets.clone();
            let url = url.clone();
            request.map(move |b| ScannedBody::new(b, secrets, OnFind::Block, url).boxed_unsync())
        } else {
            request
        };
        let mut request = request;
        let secrets = self.secrets.clone();
        let literal_ip: Option<IpAddr> = host.parse().ok();
        let denials = self.denials.clone();
        let options = Some(options.unwrap_or(RequestOptions {
            connect_timeout: Some(Duration::from_secs(10)),
            first_byte_timeout: Some(Duration::from_secs(30)),
            between_bytes_timeout: Some(Duration::from_secs(30)),
        }));
        Box::new(async move {
            // The address the checks below approve is the one connected to: a name is not
            // resolved a second time (DNS rebinding).
            let mut checked: Option<IpAddr> = literal_ip;
            if literal_ip.is_none() {
                // A name: every address it resolves to must be public.
                let addrs: Vec<IpAddr> = match tokio::net::lookup_host((host.as_str(), port)).await {
                    Ok(a) => a.map(|s| s.ip()).collect(),
                    Err(e) => {
                        return Err(HttpError::DnsError { rcode: Some(e.to_string()), info_code: None });
                    }
                };
                if let Some(bad) = addrs.iter().find(|ip| is_internal(**ip)) {
                    denials.push(format!(
                        "HTTP request to {url} denied: {host} resolves to the internal address {bad}; grant the address itself to allow it"
                    ));
                    return Err(HttpError::DestinationIpProhibited);
                }
                checked = addrs.first().copied();
                if scheme == "http"
                    && let Some(ip) = checked
                {
                    let authority = match ip {
                        IpAddr::V4(v4) => format!("{v4}:{port}"),
                        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
                    };
                    let mut parts = uri.clone().into_parts();
                    parts.authority = authority.parse().ok();
                    if let Ok(pinned) = http::Uri::from_parts(parts) {
                        *request.uri_mut() = pinned;
                    }
                }
            }
            let (res, io): (http::Response<WasiBody>, Box<dyn Future<Output = Result<(), HttpError>> + Send>) =
                match (scheme.as_str(), checked) {
                    ("https", Some(ip)) => send_https_pinned(request, (ip, port).into(), &host, options).await?,
                    ("https", None) => return Err(HttpError::DestinationNotFound),
                    _ => {
                        let (res, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
                        (res.map(BodyExt::boxed_unsync), Box::new(io))
                    }
                };
            let mut res = res;
            if carries_secret {
                secrets.check_response_coding(&url, res.headers())?;
            }
            if scanning {
                secrets.mask_response_headers(&url, res.headers_mut());
                res = res.map(|b| ScannedBody::new(b, secrets, OnFind::Mask, url).boxed_unsync());
            }
            Ok((res, io))
        })
    }
}

/// An https request over a connection to `addr`, the address the gate checked, with the
/// certificate verified for `host` (webpki roots, rustls on ring, as wasi-http's default).
/// wasi-http's own sender connects by name, which would resolve the name again.
async fn send_https_pinned(
    mut request: http::Request<WasiBody>,
    addr: std::net::SocketAddr,
    host: &str,
    options: Option<RequestOptions>,
) -> Result<(http::Response<WasiBody>, Box<dyn Future<Output = Result<(), HttpError>> + Send>), HttpError> {
    use tokio_rustls::rustls;
    let connect_timeout = options.and_then(|o| o.connect_timeout).unwrap_or(Duration::from_secs(10));
    let first_byte_timeout = options.and_then(|o| o.first_byte_timeout).unwrap_or(Duration::from_secs(30));
    let tcp = match tokio::time::timeout(connect_timeout, tokio::net::TcpStream::connect(addr)).await {
        Ok(stream) => stream.map_err(HttpError::Connect)?,
        Err(_) => return Err(HttpError::ConnectionTimeout),
    };
    // The TLS handshake and a streamed request body go out as several small writes; with
    // Nagle's algorithm each would wait for the server's delayed ACK.
    tcp.set_nodelay(true).map_err(HttpError::Connect)?;
    let server_name = match host.parse::<IpAddr>() {
        Ok(ip) => rustls::pki_types::ServerName::from(ip),
        Err(_) => rustls::pki_types::ServerName::try_from(host.to_string()).map_err(HttpError::InvalidDnsNameError)?,
    };
    let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.into() };
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| HttpError::InternalError(Some(e.to_string())))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tls =
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(server_name, tcp).await.map_err(HttpError::Tls)?;
    let (mut sender, conn) =
        tokio::time::timeout(connect_timeout, hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)))
            .await
            .map_err(|_| HttpError::ConnectionTimeout)??;
    // On the wire the request line holds only the path; the Host header names the host.
    let path = request.uri().path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| "/".into());
    *request.uri_mut() =
        http::Uri::builder().path_and_query(path).build().map_err(|_| HttpError::HttpRequestUriInvalid)?;
    let mut conn = Box::pin(async move { conn.await.map_err(HttpError::from) });
    let response = tokio::select! {
        res = tokio::time::timeout(first_byte_timeout, sender.send_request(request)) => {
            res.map_err(|_| HttpError::ConnectionReadTimeout)?.map_err(HttpError::from)?
        }
        ended = &mut conn => {
            ended?;
            return Err(HttpError::HttpResponseIncomplete);
        }
    };
    let response = response.map(|body| body.map_err(HttpError::from).boxed_unsync());
    Ok((response, Box::new(conn)))
}

/// wasi:http's host functions see the call's HTTP context and this gate, and nothing else.
impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        let net = &mut self.caps.network;
        WasiHttpCtxView { ctx: &mut net.http, table: &mut self.table, hooks: &mut net.gate }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "172.16.5.5",
            "169.254.169.254",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "100.64.0.1",
            "64:ff9b::7f00:1",
            "224.0.0.1",
            "198.18.0.1",
            "ff02::1",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "2606:4700::1111", "8.8.8.8", "64:ff9b::808:808"] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
    }
}
