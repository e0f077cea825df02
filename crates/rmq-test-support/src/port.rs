//! Free loopback port selection.
//!
//! A port is found by binding `127.0.0.1:0` and reading the port the kernel
//! picked. Another process may take it before `redis-server` binds it, so
//! callers must retry start-up on failure. Ports already handed out by this
//! process are remembered and not handed out again, which avoids collisions
//! between tests running in parallel threads of one test binary.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, OnceLock};

/// The port of a Redis that may be running on the machine; never used.
const RESERVED_PORT: u16 = 6379;

fn handed_out() -> &'static Mutex<HashSet<u16>> {
    static PORTS: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    PORTS.get_or_init(|| Mutex::new(HashSet::new()))
}

/// Returns a TCP port on 127.0.0.1 that was free a moment ago.
///
/// Never returns 6379, nor a port this process already got from here.
///
/// # Panics
///
/// Panics if no loopback port can be bound at all.
pub fn free_port() -> u16 {
    for _ in 0..1000 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap_or_else(|e| panic!("cannot bind 127.0.0.1:0 to find a free port: {e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("cannot read local address of probe socket: {e}"))
            .port();
        drop(listener);
        if port == RESERVED_PORT {
            continue;
        }
        let mut ports = handed_out().lock().unwrap_or_else(|e| e.into_inner());
        if ports.insert(port) {
            return port;
        }
    }
    panic!("could not find a free loopback port after 1000 attempts");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_and_not_6379() {
        let a = free_port();
        let b = free_port();
        assert_ne!(a, b);
        assert_ne!(a, RESERVED_PORT);
        assert_ne!(b, RESERVED_PORT);
        // The port is actually bindable on loopback.
        TcpListener::bind((Ipv4Addr::LOCALHOST, a)).expect("free port is bindable");
    }
}
