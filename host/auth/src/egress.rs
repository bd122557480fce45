//! A tenant's egress allowlist: which hosts its changefeeds may grant their
//! plugins (TCP peers, HTTP hosts, SQL databases).
//!
//! A rule is `HOST` or `HOST:PORT`, where `HOST` is
//! - a name (`db.example.com`, matched without regard to case),
//! - a wildcard `*.example.com` (any name under it, not the name itself),
//! - an IP address (`10.1.2.3`, `::1`), or a network (`10.0.0.0/8`,
//!   `fd00::/8`); an IPv6 host with a port is written in brackets
//!   (`[fd00::]/8:443`, `[::1]:5432`).
//!
//! A rule without a port allows every port of its hosts. A grant is allowed
//! when one rule covers it: its host (a name by a name or wildcard rule, an
//! address by an address or network rule: a name is never matched against
//! networks, since it may resolve anywhere later) and its port (a grant of
//! every port of a host, an HTTP host without a port, only by a rule without
//! one). The server's own listeners and the meta store stay refused whatever
//! the rules say.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::error::AuthError;

/// Most rules in one allowlist.
pub const MAX_EGRESS_RULES: usize = 64;
/// Longest rule.
const MAX_RULE_CHARS: usize = 260;

/// What a rule's host part matches.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostRule {
    /// One name, lower-cased.
    Name(String),
    /// Names ending in `.suffix` (stored with its leading dot, lower-cased).
    Under(String),
    /// Addresses in a network (a single address is a /32 or /128).
    Net(IpNet),
}

/// One parsed rule.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    host: HostRule,
    port: Option<u16>,
}

/// A parsed allowlist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Egress {
    rules: Vec<Rule>,
}

impl Egress {
    /// Parses `rules`, or says which one is wrong and why.
    pub fn parse(rules: &[String]) -> Result<Self, AuthError> {
        if rules.len() > MAX_EGRESS_RULES {
            return Err(AuthError::Invalid(format!(
                "--egress lists {} rules; at most {MAX_EGRESS_RULES}",
                rules.len()
            )));
        }
        let rules = rules
            .iter()
            .map(|r| {
                parse_rule(r).map_err(|why| {
                    AuthError::Invalid(format!(
                        "--egress rule `{}`: {why}",
                        r.chars().take(MAX_RULE_CHARS).collect::<String>()
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { rules })
    }

    /// Whether a grant of `host` (a name or an address) at `port` (`None`:
    /// every port) is covered by a rule.
    pub fn allows(&self, host: &str, port: Option<u16>) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let ip = host.parse::<IpAddr>().ok();
        let name = host.to_ascii_lowercase();
        self.rules.iter().any(|rule| {
            let port_ok = match (rule.port, port) {
                (None, _) => true,
                (Some(r), Some(p)) => r == p,
                (Some(_), None) => false,
            };
            let host_ok = match (&rule.host, ip) {
                (HostRule::Net(net), Some(ip)) => net.contains(&ip.to_canonical()),
                (HostRule::Name(n), None) => *n == name,
                (HostRule::Under(suffix), None) => {
                    name.len() > suffix.len() && name.ends_with(suffix.as_str())
                }
                _ => false,
            };
            port_ok && host_ok
        })
    }

    /// Refuses the first of `grants` (`(key, as written, host, port)`) that
    /// no rule covers, naming the tenant, the grant and the rules.
    pub fn check<'a>(
        &self,
        tenant: &str,
        written: &[String],
        grants: impl IntoIterator<Item = (&'a str, &'a str, &'a str, Option<u16>)>,
    ) -> Result<(), AuthError> {
        for (key, grant, host, port) in grants {
            if !self.allows(host, port) {
                let every_port = if port.is_none() {
                    " (a host without a port grants every port of it: only a rule without a port covers it)"
                } else {
                    ""
                };
                return Err(AuthError::Denied(format!(
                    "{key}: `{grant}` is outside tenant `{tenant}`'s egress allowlist [{}]{every_port}; an admin widens it with `sluice cli tenant quota set {tenant} --egress RULE,...`",
                    written.join(", ")
                )));
            }
        }
        Ok(())
    }
}

fn parse_rule(rule: &str) -> Result<Rule, String> {
    if rule.is_empty() || rule.len() > MAX_RULE_CHARS {
        return Err(format!("a rule is 1 to {MAX_RULE_CHARS} characters"));
    }
    if rule.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("a rule has no spaces or control characters".into());
    }
    let (host, port) = if let Some(rest) = rule.strip_prefix('[') {
        let (inside, tail) = rest
            .split_once(']')
            .ok_or("an opening `[` without its `]`")?;
        // `[fd00::]/8` keeps its prefix length after the bracket.
        let (prefix, tail) = match tail.strip_prefix('/') {
            Some(t) => {
                let end = t.find(':').unwrap_or(t.len());
                (Some(&t[..end]), &t[end..])
            }
            None => (None, tail),
        };
        let port = match tail {
            "" => None,
            t => Some(
                t.strip_prefix(':')
                    .ok_or("text after `]` that is not `:PORT`")?,
            ),
        };
        let host = match prefix {
            Some(p) => format!("{inside}/{p}"),
            None => inside.to_string(),
        };
        (host, port)
    } else if rule.matches(':').count() > 1 {
        // IPv6 without a port.
        (rule.to_string(), None)
    } else {
        match rule.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (rule.to_string(), None),
        }
    };
    let port = port
        .map(|p| match p.parse::<u16>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("port `{p}` is not a port (1-65535)")),
        })
        .transpose()?;
    let host = if host.contains('/') {
        HostRule::Net(
            host.parse::<IpNet>()
                .map_err(|_| format!("`{host}` is not a network (like 10.0.0.0/8 or fd00::/8)"))?
                .trunc(),
        )
    } else if let Ok(ip) = host.parse::<IpAddr>() {
        HostRule::Net(IpNet::from(ip.to_canonical()))
    } else if let Some(suffix) = host.strip_prefix("*.") {
        check_name(suffix)?;
        HostRule::Under(format!(".{}", suffix.to_ascii_lowercase()))
    } else {
        check_name(&host)?;
        HostRule::Name(host.to_ascii_lowercase())
    };
    Ok(Rule { host, port })
}

fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a host name, an address or a network (a wildcard is only `*.` before a name)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn egress(rules: &[&str]) -> Egress {
        Egress::parse(&rules.iter().map(|r| r.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn names_wildcards_addresses_networks_and_ports() {
        let e = egress(&[
            "db.Example.com:5432",
            "*.hooks.example.com",
            "10.0.0.0/8",
            "192.168.1.7:9092",
            "fd00::/8",
            "[::1]:6379",
            "[2001:db8::]/32:443",
        ]);
        // A name, by name, at the port named.
        assert!(e.allows("DB.example.com", Some(5432)));
        assert!(!e.allows("db.example.com", Some(3306)));
        assert!(!e.allows("db.example.com", None));
        // A wildcard: names under it, any port, not the name itself.
        assert!(e.allows("a.hooks.example.com", None));
        assert!(e.allows("x.y.hooks.example.com", Some(80)));
        assert!(!e.allows("hooks.example.com", Some(80)));
        assert!(!e.allows("evilhooks.example.com", Some(80)));
        // Networks and addresses.
        assert!(e.allows("10.200.3.4", Some(1)));
        assert!(e.allows("10.0.0.1", None));
        assert!(!e.allows("11.0.0.1", Some(80)));
        assert!(e.allows("192.168.1.7", Some(9092)));
        assert!(!e.allows("192.168.1.7", Some(9093)));
        assert!(e.allows("fd12::1", Some(80)));
        assert!(e.allows("[::1]", Some(6379)));
        assert!(!e.allows("::1", Some(6380)));
        assert!(e.allows("2001:db8:1::5", Some(443)));
        assert!(!e.allows("2001:db8:1::5", Some(80)));
        // An IPv4-mapped IPv6 address is its IPv4 one.
        assert!(e.allows("::ffff:10.1.1.1", Some(5)));
        // A name is never matched against a network.
        assert!(!egress(&["0.0.0.0/0"]).allows("example.com", Some(80)));
        // An empty list allows nothing.
        assert!(!egress(&[]).allows("10.0.0.1", Some(1)));
    }

    #[test]
    fn bad_rules_are_refused_naming_the_rule() {
        for (rule, says) in [
            ("10.0.0.0/33", "is not a network"),
            ("db.example.com:0", "port `0` is not a port"),
            ("db.example.com:http", "port `http` is not a port"),
            ("a..b", "is not a host name"),
            ("*", "is not a host name"),
            ("*.", "is not a host name"),
            ("[::1", "without its `]`"),
            ("[::1]x", "not `:PORT`"),
            ("a b", "no spaces"),
            ("", "1 to 260 characters"),
        ] {
            let err = Egress::parse(&[rule.to_string()]).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("--egress rule `{rule}`: ")) && err.contains(says),
                "{rule}: {err}"
            );
        }
        let many: Vec<String> = (0..65).map(|i| format!("h{i}.example.com")).collect();
        assert_eq!(
            Egress::parse(&many).unwrap_err().to_string(),
            "--egress lists 65 rules; at most 64"
        );
    }

    #[test]
    fn a_grant_outside_is_refused_naming_key_grant_tenant_and_rules() {
        let written = vec!["*.example.com".to_string(), "10.0.0.0/8:5432".to_string()];
        let e = Egress::parse(&written).unwrap();
        assert!(
            e.check(
                "acme",
                &written,
                [
                    (
                        "sink.capabilities.http[0]",
                        "api.example.com",
                        "api.example.com",
                        None
                    ),
                    (
                        "sink.capabilities.sql.db",
                        "10.1.1.1:5432",
                        "10.1.1.1",
                        Some(5432)
                    ),
                ]
            )
            .is_ok()
        );
        let err = e
            .check(
                "acme",
                &written,
                [(
                    "sink.capabilities.tcp[0]",
                    "10.1.1.1:6379",
                    "10.1.1.1",
                    Some(6379),
                )],
            )
            .unwrap_err();
        assert!(matches!(err, AuthError::Denied(_)));
        assert_eq!(
            err.to_string(),
            "sink.capabilities.tcp[0]: `10.1.1.1:6379` is outside tenant `acme`'s egress allowlist [*.example.com, 10.0.0.0/8:5432]; an admin widens it with `sluice cli tenant quota set acme --egress RULE,...`"
        );
    }
}
