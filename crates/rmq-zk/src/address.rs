//! The coordinator's address: `zk://host:port[,host:port…]/root[/more]`,
//! the connect string of a ZooKeeper ensemble and the znode under which
//! rmq keeps its groups (like a chroot, but created on demand).

use crate::ZkError;

/// A parsed `zk://` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkAddress {
    hosts: String,
    root: String,
}

impl ZkAddress {
    /// Parses `zk://127.0.0.1:2181/rmq` or
    /// `zk://10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181/apps/rmq`.
    ///
    /// # Errors
    ///
    /// [`ZkError::BadAddress`] for another scheme, no host, a host without
    /// a port, no root, or a root that ZooKeeper would refuse.
    pub fn parse(address: &str) -> Result<ZkAddress, ZkError> {
        let bad = |why: &str| ZkError::BadAddress(format!("{address:?}: {why}"));
        let rest = address
            .strip_prefix("zk://")
            .ok_or_else(|| bad("use zk://host:port[,host:port...]/root"))?;
        let (hosts, root) = rest
            .split_once('/')
            .ok_or_else(|| bad("a root path is needed, e.g. zk://127.0.0.1:2181/rmq"))?;
        if hosts.is_empty() {
            return Err(bad("no host"));
        }
        for host in hosts.split(',') {
            let port = host
                .rsplit_once(':')
                .filter(|(h, _)| !h.is_empty())
                .and_then(|(_, p)| p.parse::<u16>().ok())
                .filter(|&p| p > 0);
            if port.is_none() {
                return Err(bad(&format!("{host:?} is not host:port")));
            }
        }
        let root = root.trim_end_matches('/');
        if root.is_empty() {
            return Err(bad("a root path is needed, e.g. zk://127.0.0.1:2181/rmq"));
        }
        for part in root.split('/') {
            if part.is_empty() || part == "." || part == ".." {
                return Err(bad(&format!("bad root component {part:?}")));
            }
            if part
                .chars()
                .any(|c| c.is_control() || c == '\u{fffe}' || c == '\u{ffff}')
            {
                return Err(bad("the root holds a character ZooKeeper refuses"));
            }
        }
        Ok(ZkAddress {
            hosts: hosts.to_string(),
            root: format!("/{root}"),
        })
    }

    /// The connect string, `host:port,host:port`.
    pub fn hosts(&self) -> &str {
        &self.hosts
    }

    /// The root znode, `/rmq`.
    pub fn root(&self) -> &str {
        &self.root
    }
}

impl std::fmt::Display for ZkAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "zk://{}{}", self.hosts, self.root)
    }
}

/// One path component for a prefix, topic or group name: names may be
/// `.` or `..`, which ZooKeeper refuses as components, so dots-only names
/// are escaped (`%` too, so that the escape cannot collide).
pub(crate) fn component(name: &str) -> String {
    let escaped = name.replace('%', "%25");
    if escaped.chars().all(|c| c == '.') {
        escaped.replace('.', "%2E")
    } else {
        escaped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_with_one_or_several_hosts_and_a_root_parse() {
        let a = ZkAddress::parse("zk://127.0.0.1:2181/rmq").unwrap();
        assert_eq!((a.hosts(), a.root()), ("127.0.0.1:2181", "/rmq"));
        let a = ZkAddress::parse("zk://127.0.0.1:1,[::1]:2,localhost:3/apps/rmq/").unwrap();
        assert_eq!(a.hosts(), "127.0.0.1:1,[::1]:2,localhost:3");
        assert_eq!(a.root(), "/apps/rmq");
        assert_eq!(
            a.to_string(),
            "zk://127.0.0.1:1,[::1]:2,localhost:3/apps/rmq"
        );
    }

    #[test]
    fn bad_addresses_are_refused_with_the_reason() {
        for (bad, why) in [
            ("redis://127.0.0.1:2181/rmq", "use zk://"),
            ("zk://127.0.0.1:2181", "root path is needed"),
            ("zk://127.0.0.1:2181/", "root path is needed"),
            ("zk:///rmq", "no host"),
            ("zk://127.0.0.1/rmq", "not host:port"),
            ("zk://127.0.0.1:0/rmq", "not host:port"),
            ("zk://127.0.0.1:2181,/rmq", "not host:port"),
            ("zk://127.0.0.1:99999/rmq", "not host:port"),
            ("zk://127.0.0.1:2181/a//b", "bad root component"),
            ("zk://127.0.0.1:2181/a/../b", "bad root component"),
            ("zk://127.0.0.1:2181/a\u{1}", "refuses"),
        ] {
            let err = ZkAddress::parse(bad).unwrap_err();
            assert!(
                matches!(&err, ZkError::BadAddress(m) if m.contains(why)),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn names_that_are_only_dots_are_escaped_as_path_components() {
        assert_eq!(component("orders"), "orders");
        assert_eq!(component("a.b"), "a.b");
        assert_eq!(component("."), "%2E");
        assert_eq!(component(".."), "%2E%2E");
        assert_eq!(component("%2E"), "%252E");
    }
}
