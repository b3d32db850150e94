//! Raw sockets (`wasi:sockets`) are linked so that components from every toolchain
//! instantiate, and refused to every skill (`CallState::new` turns TCP, UDP and name lookup
//! off). This module makes each refusal visible: the three entry points, creating a TCP or
//! UDP socket and resolving a name, are re-linked over wasmtime-wasi's own through a view
//! that forwards to it and records a [`Denial`] when it refuses, so the model and the
//! audit log see that the skill tried. Everything else of `wasi:sockets` needs a socket or
//! a resolve stream, which a refused call never hands out.

use anyhow::Result;
use wasmtime::component::{HasData, Linker, Resource};
use wasmtime_wasi::p2::bindings::sockets::ip_name_lookup::{self, ResolveAddressStream};
use wasmtime_wasi::p2::bindings::sockets::network::{self, ErrorCode, IpAddress, IpAddressFamily, Network};
use wasmtime_wasi::p2::bindings::sockets::{tcp_create_socket, udp_create_socket};
use wasmtime_wasi::p2::{DynPollable, SocketError, SocketResult, TcpSocket, UdpSocket};
use wasmtime_wasi::sockets::WasiSocketsCtxView;

use super::{CallState, Denial, DenialKind};

/// Refusals recorded one by one; a guest that retries in a loop gets one summary line for
/// the rest, so its denials cannot grow host memory.
const MAX_RECORDED: usize = 16;

/// One call's socket refusals.
#[derive(Default)]
pub(crate) struct SocketRefusals {
    recorded: Vec<Denial>,
    more: u64,
}

impl SocketRefusals {
    fn refused(&mut self, what: &str) {
        if self.recorded.len() >= MAX_RECORDED {
            self.more += 1;
            return;
        }
        self.recorded.push(Denial {
            capability: DenialKind::Sockets,
            message: format!(
                "{what} refused: skills get no raw sockets or name lookup; outbound HTTP goes through wasi:http and a `network` grant"
            ),
        });
    }

    pub(crate) fn take(&mut self) -> Vec<Denial> {
        let mut out = std::mem::take(&mut self.recorded);
        if self.more > 0 {
            out.push(Denial {
                capability: DenialKind::Sockets,
                message: format!("{} more uses of wasi:sockets refused", std::mem::take(&mut self.more)),
            });
        }
        out
    }
}

/// wasmtime-wasi's sockets view, and where its refusals go.
pub(crate) struct AuditedSockets<'a> {
    inner: WasiSocketsCtxView<'a>,
    refusals: &'a mut SocketRefusals,
}

struct AuditedSocketsView;

impl HasData for AuditedSocketsView {
    type Data<'a> = AuditedSockets<'a>;
}

fn view(s: &mut CallState) -> AuditedSockets<'_> {
    AuditedSockets {
        inner: WasiSocketsCtxView { ctx: s.wasi.sockets(), table: &mut s.table },
        refusals: &mut s.caps.network.sockets,
    }
}

/// Re-link the socket entry points over wasmtime-wasi's (which must be linked already).
pub(crate) fn add_to_linker(linker: &mut Linker<CallState>) -> Result<()> {
    linker.allow_shadowing(true);
    let linked = relink(linker);
    linker.allow_shadowing(false);
    linked
}

fn relink(linker: &mut Linker<CallState>) -> Result<()> {
    tcp_create_socket::add_to_linker::<CallState, AuditedSocketsView>(linker, view)?;
    udp_create_socket::add_to_linker::<CallState, AuditedSocketsView>(linker, view)?;
    ip_name_lookup::add_to_linker::<CallState, AuditedSocketsView>(linker, view)?;
    Ok(())
}

// The interfaces above use `wasi:sockets/network`'s types: their traits require its host
// trait too (error conversion, the network resource). Forwarded unchanged.
impl network::Host for AuditedSockets<'_> {
    fn convert_error_code(&mut self, error: SocketError) -> wasmtime::Result<ErrorCode> {
        network::Host::convert_error_code(&mut self.inner, error)
    }

    fn network_error_code(&mut self, err: Resource<network::Error>) -> wasmtime::Result<Option<ErrorCode>> {
        network::Host::network_error_code(&mut self.inner, err)
    }
}

impl network::HostNetwork for AuditedSockets<'_> {
    fn drop(&mut self, this: Resource<Network>) -> wasmtime::Result<()> {
        network::HostNetwork::drop(&mut self.inner, this)
    }
}

impl tcp_create_socket::Host for AuditedSockets<'_> {
    fn create_tcp_socket(&mut self, family: IpAddressFamily) -> SocketResult<Resource<TcpSocket>> {
        let r = tcp_create_socket::Host::create_tcp_socket(&mut self.inner, family);
        if r.is_err() {
            self.refusals.refused("wasi:sockets/tcp-create-socket");
        }
        r
    }
}

impl udp_create_socket::Host for AuditedSockets<'_> {
    async fn create_udp_socket(&mut self, family: IpAddressFamily) -> SocketResult<Resource<UdpSocket>> {
        let r = udp_create_socket::Host::create_udp_socket(&mut self.inner, family).await;
        if r.is_err() {
            self.refusals.refused("wasi:sockets/udp-create-socket");
        }
        r
    }
}

impl ip_name_lookup::Host for AuditedSockets<'_> {
    fn resolve_addresses(
        &mut self,
        network: Resource<Network>,
        name: String,
    ) -> SocketResult<Resource<ResolveAddressStream>> {
        let r = ip_name_lookup::Host::resolve_addresses(&mut self.inner, network, name);
        if r.is_err() {
            self.refusals.refused("wasi:sockets/ip-name-lookup");
        }
        r
    }
}

impl ip_name_lookup::HostResolveAddressStream for AuditedSockets<'_> {
    fn resolve_next_address(&mut self, stream: Resource<ResolveAddressStream>) -> SocketResult<Option<IpAddress>> {
        ip_name_lookup::HostResolveAddressStream::resolve_next_address(&mut self.inner, stream)
    }

    fn subscribe(&mut self, stream: Resource<ResolveAddressStream>) -> wasmtime::Result<Resource<DynPollable>> {
        ip_name_lookup::HostResolveAddressStream::subscribe(&mut self.inner, stream)
    }

    fn drop(&mut self, stream: Resource<ResolveAddressStream>) -> wasmtime::Result<()> {
        ip_name_lookup::HostResolveAddressStream::drop(&mut self.inner, stream)
    }
}
