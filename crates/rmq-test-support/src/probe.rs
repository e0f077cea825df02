//! Minimal RESP probing over a plain [`TcpStream`].
//!
//! Sends inline `PING` and, once it answers `+PONG`, `INFO server` to learn
//! the answering process's PID. That PID check matters: if another Redis
//! grabbed our port first, our child fails to bind while the other server
//! happily answers `PING`, and tests must never talk to a foreign server.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// Outcome of one probe of a loopback port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Probe {
    /// Nothing accepted the connection.
    Refused,
    /// The server is loading its data set (`-LOADING`).
    Loading,
    /// The server answered `+PONG`; `pid` is its `process_id`, if reported.
    Ready { pid: Option<u32> },
    /// Connected, but the answer was unexpected or timed out.
    Other(String),
}

/// Connects to `127.0.0.1:port` and sends `PING` (and `INFO server` after
/// `+PONG`), waiting at most `timeout` for each step.
pub(crate) fn probe(port: u16, timeout: Duration) -> Probe {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = match TcpStream::connect_timeout(&addr, timeout) {
        Ok(s) => s,
        Err(_) => return Probe::Refused,
    };
    match exchange(stream, timeout) {
        Ok(p) => p,
        Err(e) => Probe::Other(e.to_string()),
    }
}

fn exchange(stream: TcpStream, timeout: Duration) -> std::io::Result<Probe> {
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);

    writer.write_all(b"PING\r\n")?;
    let line = read_line(&mut reader)?;
    if line.starts_with("-LOADING") {
        return Ok(Probe::Loading);
    }
    if line != "+PONG" {
        return Ok(Probe::Other(format!("unexpected PING reply {line:?}")));
    }

    writer.write_all(b"INFO server\r\n")?;
    let header = read_line(&mut reader)?;
    let Some(len) = header
        .strip_prefix('$')
        .and_then(|n| n.parse::<usize>().ok())
    else {
        return Ok(Probe::Other(format!("unexpected INFO reply {header:?}")));
    };
    let mut body = vec![0u8; len + 2];
    reader.read_exact(&mut body)?;
    let body = String::from_utf8_lossy(&body);
    let pid = body
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|v| v.trim().parse::<u32>().ok());
    Ok(Probe::Ready { pid })
}

/// Reads one CRLF-terminated line, without the terminator.
fn read_line(reader: &mut impl BufRead) -> std::io::Result<String> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_port_is_refused() {
        let port = crate::free_port();
        assert_eq!(probe(port, Duration::from_millis(200)), Probe::Refused);
    }
}
