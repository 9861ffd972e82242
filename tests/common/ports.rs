//! Ports for the engines, supervisors and servers the tests start.
//!
//! A port from `bind(0)` is free only until its listener is dropped: the kernel may then hand it to
//! the next `bind(0)` or, as the local end, to any outgoing connection, and the tests running
//! beside make many (every HTTP poll of a status API). A supervisor started on such a port stops
//! with "cannot listen … Address already in use" (it did once in CI). Ports here come from below
//! the kernel's ephemeral range, which it never hands out by itself, each checked free, and none is
//! handed out twice in one test process.
#![allow(dead_code)] // each test binary uses a different part

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::Mutex;

/// Ports this process has handed out, never handed out again.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// The lowest port handed out: clear of the well-known and common service ports.
const LOWEST: u16 = 10_000;

/// A free port on 127.0.0.1.
pub fn free_port() -> u16 {
    free_ports(1)
}

/// The first of `count` consecutive free ports (`lucebox runtime bench` starts its bare engine on
/// the port after the engine's).
pub fn free_ports(count: u16) -> u16 {
    let (low, high) = unassigned_range();
    let span = u32::from(high - low);
    // Start somewhere new in each process, so a test binary does not walk the ports that the one
    // before it left in TIME_WAIT or to a slow-stopping container.
    let start = std::process::id() ^ std::time::UNIX_EPOCH.elapsed().map_or(0, |d| d.subsec_nanos());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for step in 0..span {
        let first = low + ((start + step) % span) as u16;
        let Some(ports) = first.checked_add(count).filter(|end| *end <= high).map(|end| first..end) else {
            continue;
        };
        if ports.clone().all(|p| !handed_out.contains(&p) && TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            handed_out.extend(ports);
            return first;
        }
    }
    panic!("no {count} consecutive free ports in {low}..{high}");
}

/// Ports the kernel does not give out on its own: below `net.ipv4.ip_local_port_range`.
fn unassigned_range() -> (u16, u16) {
    let file = "/proc/sys/net/ipv4/ip_local_port_range";
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"));
    let ephemeral_low: u16 = text
        .split_whitespace()
        .next()
        .and_then(|low| low.parse().ok())
        .unwrap_or_else(|| panic!("{file}: no port range in {text:?}"));
    assert!(
        ephemeral_low > LOWEST + 1_000,
        "{file} starts at {ephemeral_low}: no room below it for test ports"
    );
    (LOWEST, ephemeral_low)
}
