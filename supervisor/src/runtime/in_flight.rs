//! Requests in flight at an engine that publishes no queue (dflash_server offers neither
//! `/metrics` nor `/slots`), read from the kernel's view of its TCP connections (sock_diag, as
//! `ss` reads it). A connection to the engine's port is serving a request while the engine has
//! read from it but not answered yet (a prompt being prefilled, a whole answer being generated),
//! or wrote to it within the last two seconds (an answer streaming). A keep-alive connection
//! left open between requests is idle. The supervisor's own connections (health probes, load
//! samples, the update's health gate) are left out: they are not users' work.

use std::collections::HashSet;
use std::net::SocketAddr;

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_TCP};
use netlink_packet_sock_diag::inet::nlas::Nla;
use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, InetResponse, SocketId, StateFlags};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_sys::protocols::NETLINK_SOCK_DIAG;
use netlink_sys::Socket;
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

/// An answer counts as streaming while the engine wrote to its connection this recently.
const STREAMING_MS: u32 = 2000;
/// Most sockets one dump reads: a box serves a handful of clients, and the loop is bounded.
const MAX_SOCKETS: usize = 65_536;
const RECEIVE_BUFFER: usize = 64 * 1024;
const RECEIVE_TIMEOUT_S: i64 = 1;

#[derive(Debug, thiserror::Error)]
pub enum InFlightError {
    #[error("sock_diag: {0}")]
    Socket(#[source] std::io::Error),
    #[error("sock_diag: the kernel answered {0}")]
    Kernel(String),
    #[error("sock_diag: cannot decode the dump: {0}")]
    Decode(String),
}

/// Requests the engine at `engine` is serving now, not counting this process's own. Only the
/// engine's address family is read: each dump walks the kernel's whole table of established
/// connections (about 1 ms of CPU here, however few there are), and an IPv4 listener has no
/// IPv6 clients (a dual-stack one shows its IPv4 clients as IPv6).
pub fn requests_in_flight(engine: SocketAddr) -> Result<u32, InFlightError> {
    let family = if engine.is_ipv6() { AF_INET6 } else { AF_INET };
    Ok(count_serving(&established_tcp(family)?, engine.port(), &own_socket_inodes()))
}

/// One established TCP socket as the kernel shows it.
#[derive(Debug, Clone, PartialEq)]
struct TcpSocket {
    local: SocketAddr,
    remote: SocketAddr,
    inode: u32,
    /// From `tcp_info`; none where the kernel sent none.
    activity: Option<Activity>,
}

/// What `tcp_info` says of a socket's traffic (milliseconds ago, segments carrying data).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Activity {
    last_sent_ms: u32,
    last_received_ms: u32,
    /// `tcpi_data_segs_in` and `_out` (Linux 4.6 and later).
    data_segments: Option<(u32, u32)>,
}

impl Activity {
    /// Offsets in `struct tcp_info` (`include/uapi/linux/tcp.h`), stable since they were added.
    fn parse(tcp_info: &[u8]) -> Option<Self> {
        let u32_at = |offset: usize| {
            tcp_info.get(offset..offset + 4).map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        };
        Some(Self {
            last_sent_ms: u32_at(44)?,
            last_received_ms: u32_at(52)?,
            data_segments: u32_at(152).zip(u32_at(156)),
        })
    }

    /// Whether the server side of a connection is busy with a request.
    fn serving(&self) -> bool {
        match self.data_segments {
            // A request read and nothing written back yet.
            Some((received, 0)) => received > 0,
            Some(_) | None => self.last_received_ms < self.last_sent_ms || self.last_sent_ms <= STREAMING_MS,
        }
    }
}

/// Server-side sockets of `port` that are serving, less the peers of this process's own sockets
/// (`own`: their inodes).
fn count_serving(sockets: &[TcpSocket], port: u16, own: &HashSet<u32>) -> u32 {
    let ours: HashSet<SocketAddr> = sockets
        .iter()
        .filter(|s| s.remote.port() == port && own.contains(&s.inode))
        .map(|s| s.local)
        .collect();
    let serving = sockets
        .iter()
        .filter(|s| s.local.port() == port && !ours.contains(&s.remote))
        .filter(|s| s.activity.is_some_and(|a| a.serving()))
        .count();
    u32::try_from(serving).unwrap_or(u32::MAX)
}

/// Inodes of this process's sockets, from `/proc/self/fd` (`socket:[12345]`).
fn own_socket_inodes() -> HashSet<u32> {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else { return HashSet::new() };
    entries
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_str()?;
            target.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// Every established TCP socket of one address family, with its `tcp_info`.
fn established_tcp(family: u8) -> Result<Vec<TcpSocket>, InFlightError> {
    let mut socket = Socket::new(NETLINK_SOCK_DIAG).map_err(InFlightError::Socket)?;
    // The kernel answers a dump at once; a read that never returns would hold the sampler.
    setsockopt(&socket, sockopt::ReceiveTimeout, &TimeVal::new(RECEIVE_TIMEOUT_S, 0))
        .map_err(|e| InFlightError::Socket(e.into()))?;
    socket.bind_auto().map_err(InFlightError::Socket)?;
    socket.connect(&netlink_sys::SocketAddr::new(0, 0)).map_err(InFlightError::Socket)?;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    let request = InetRequest {
        family,
        protocol: IPPROTO_TCP,
        extensions: ExtensionFlags::INFO,
        states: StateFlags::ESTABLISHED,
        socket_id: if family == AF_INET6 { SocketId::new_v6() } else { SocketId::new_v4() },
    };
    let mut packet = NetlinkMessage::new(header, SockDiagMessage::InetRequest(request).into());
    packet.finalize();
    let mut buffer = vec![0; packet.buffer_len()];
    packet.serialize(&mut buffer);
    socket.send(&buffer, 0).map_err(InFlightError::Socket)?;

    let mut sockets = Vec::new();
    let mut received = vec![0; RECEIVE_BUFFER];
    while sockets.len() < MAX_SOCKETS {
        let size = socket.recv(&mut &mut received[..], 0).map_err(InFlightError::Socket)?;
        let mut offset = 0;
        while offset < size {
            let message = NetlinkMessage::<SockDiagMessage>::deserialize(&received[offset..size])
                .map_err(|e| InFlightError::Decode(e.to_string()))?;
            let length = message.header.length as usize;
            match message.payload {
                NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(response)) => {
                    sockets.push(tcp_socket(&response));
                }
                NetlinkPayload::Done(_) => return Ok(sockets),
                NetlinkPayload::Error(e) => return Err(InFlightError::Kernel(e.to_string())),
                _ => {}
            }
            if length == 0 {
                break;
            }
            offset += length;
        }
    }
    Ok(sockets)
}

fn tcp_socket(response: &InetResponse) -> TcpSocket {
    let id = &response.header.socket_id;
    let activity = response.nlas.iter().find_map(|nla| match nla {
        Nla::TcpInfo(bytes) => Activity::parse(bytes),
        _ => None,
    });
    TcpSocket {
        // A dual-stack listener shows IPv4 clients as `::ffff:a.b.c.d`: compare them as IPv4.
        local: SocketAddr::new(id.source_address.to_canonical(), id.source_port),
        remote: SocketAddr::new(id.destination_address.to_canonical(), id.destination_port),
        inode: response.header.inode,
        activity,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn activity(last_sent_ms: u32, last_received_ms: u32, segments: (u32, u32)) -> Option<Activity> {
        Some(Activity { last_sent_ms, last_received_ms, data_segments: Some(segments) })
    }

    fn socket(local: &str, remote: &str, inode: u32, activity: Option<Activity>) -> TcpSocket {
        TcpSocket { local: local.parse().unwrap(), remote: remote.parse().unwrap(), inode, activity }
    }

    #[test]
    fn a_connection_serves_from_the_request_until_its_answer_has_ended() {
        // Connected, nothing asked yet.
        assert!(!activity(500, 500, (0, 0)).unwrap().serving());
        // Asked, not answered (prefill, or a whole answer being generated).
        assert!(activity(9000, 9000, (1, 0)).unwrap().serving());
        // A second request on a kept-alive connection, read after the last answer.
        assert!(activity(9000, 40, (2, 1)).unwrap().serving());
        // Streaming: written to 300 ms ago.
        assert!(activity(300, 8000, (1, 40)).unwrap().serving());
        // Answered 5 s ago and left open: idle.
        assert!(!activity(5000, 5200, (1, 40)).unwrap().serving());
    }

    #[test]
    fn tcp_info_is_read_at_the_kernels_offsets() {
        let mut info = vec![0u8; 232];
        info[44..48].copy_from_slice(&1234u32.to_ne_bytes());
        info[52..56].copy_from_slice(&77u32.to_ne_bytes());
        info[152..156].copy_from_slice(&3u32.to_ne_bytes());
        info[156..160].copy_from_slice(&5u32.to_ne_bytes());
        let parsed = Activity::parse(&info).unwrap();
        assert_eq!(
            (parsed.last_sent_ms, parsed.last_received_ms, parsed.data_segments),
            (1234, 77, Some((3, 5)))
        );
        // An older kernel's shorter struct: the times only.
        assert_eq!(Activity::parse(&info[..104]).unwrap().data_segments, None);
        assert_eq!(Activity::parse(&info[..50]), None);
    }

    #[test]
    fn this_process_own_connections_are_left_out() {
        let own = HashSet::from([7]);
        let sockets = [
            // A user's request being served, and its client side (another process).
            socket("127.0.0.1:8080", "127.0.0.1:40001", 100, activity(9000, 10, (1, 0))),
            socket("127.0.0.1:40001", "127.0.0.1:8080", 101, activity(10, 9000, (0, 1))),
            // Our own health probe: its server side looks just as busy.
            socket("127.0.0.1:8080", "127.0.0.1:40002", 102, activity(9000, 10, (1, 0))),
            socket("127.0.0.1:40002", "127.0.0.1:8080", 7, activity(10, 9000, (0, 1))),
            // Another port's traffic.
            socket("127.0.0.1:9090", "127.0.0.1:40003", 103, activity(9000, 10, (1, 0))),
        ];
        assert_eq!(count_serving(&sockets, 8080, &own), 1);
        assert_eq!(count_serving(&sockets, 8080, &HashSet::new()), 2);
    }
}
