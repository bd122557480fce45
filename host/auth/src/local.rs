//! How `sluice cli` on the server's own machine finds the server's admin
//! token without being told: the server leaves, for its user, a note naming
//! the token file, keyed by its gRPC address
//! (`${XDG_CONFIG_HOME:-~/.config}/sluice/servers/<host>_<port>`, mode 0600).
//! The note holds the file's path, never the secret: only who may read the
//! data dir's file can use it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The user's configuration directory; `None` when there is no home.
fn config_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CONFIG_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|d| !d.is_empty())
                .map(|h| PathBuf::from(h).join(".config"))
        })
}

/// Where the note for a server at `addr` (`host:port`) lives under `config`.
fn note_path(config: &Path, addr: &str) -> PathBuf {
    let key: String = addr
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    config.join("sluice").join("servers").join(key)
}

/// The address a client on this machine dials for a server listening on
/// `addr` (an unspecified address is reached through loopback).
pub fn dial_addr(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port()).to_string()
}

/// Leaves the note for a server at `addr` whose admin token is in
/// `token_file`. Best effort: a client can always be given the file.
pub fn leave_note(addr: SocketAddr, token_file: &Path) -> std::io::Result<PathBuf> {
    let config = config_dir()
        .ok_or_else(|| std::io::Error::other("no home directory (HOME or XDG_CONFIG_HOME)"))?;
    leave_note_in(&config, addr, token_file)
}

fn leave_note_in(config: &Path, addr: SocketAddr, token_file: &Path) -> std::io::Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = note_path(config, &dial_addr(addr));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let token_file = std::path::absolute(token_file)?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(token_file.as_os_str().as_encoded_bytes())?;
    f.write_all(b"\n")?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// The token file a note names for the server at `url`
/// (`http://host:port`), if there is one.
pub fn noted_token_file(url: &str) -> Option<PathBuf> {
    noted_token_file_in(&config_dir()?, url)
}

fn noted_token_file_in(config: &Path, url: &str) -> Option<PathBuf> {
    let addr = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .trim_end_matches('/');
    let text = std::fs::read_to_string(note_path(config, addr)).ok()?;
    let file = PathBuf::from(text.trim());
    file.exists().then_some(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_is_found_by_the_url_a_client_dials() {
        let home = tempfile::tempdir().unwrap();
        let config = home.path();
        let token = home.path().join("admin-token");
        std::fs::write(&token, "x").unwrap();
        let note = leave_note_in(config, "0.0.0.0:8300".parse().unwrap(), &token).unwrap();
        assert!(
            note.ends_with("sluice/servers/127.0.0.1_8300"),
            "{}",
            note.display()
        );
        let text = std::fs::read_to_string(&note).unwrap();
        assert_eq!(
            text.trim(),
            token.display().to_string(),
            "a path, not a secret"
        );
        assert_eq!(
            noted_token_file_in(config, "http://127.0.0.1:8300"),
            Some(token.clone())
        );
        assert_eq!(
            noted_token_file_in(config, "http://127.0.0.1:8300/"),
            Some(token)
        );
        assert_eq!(noted_token_file_in(config, "http://127.0.0.1:8399"), None);
    }
}
