//! Token secrets and records. A token is `sluice_<id>_<secret>`: a 16-hex-digit
//! id (public: it names the token in lists, errors and the audit) and a
//! 64-hex-digit secret (256 random bits). Only the SHA-256 of the secret is
//! stored; with 256 random bits a plain hash is as safe as a slow one.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::AuthError;

const PREFIX: &str = "sluice_";
const ID_HEX: usize = 16;
const SECRET_HEX: usize = 64;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Reads its tenant's changefeeds, plugins and status.
    Viewer,
    /// Everything within its tenant: changefeeds, plugins, swaps, its
    /// tenant's viewer and tenant-admin tokens.
    TenantAdmin,
    /// Everything, in every tenant: tenants, quotas, every token.
    Admin,
}

impl Role {
    /// The role's name as the API and the CLI write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::TenantAdmin => "tenant-admin",
            Self::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = AuthError;

    fn from_str(s: &str) -> Result<Self, AuthError> {
        match s {
            "viewer" => Ok(Self::Viewer),
            "tenant-admin" => Ok(Self::TenantAdmin),
            "admin" => Ok(Self::Admin),
            other => Err(AuthError::Invalid(format!(
                "role `{other}` is not one of admin, tenant-admin, viewer"
            ))),
        }
    }
}

/// A token as the meta store keeps it (`/sluice/v1/token/{id}`): never the
/// secret, only its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TokenRecord {
    /// Schema version of this record (1).
    pub version: u64,
    /// The token's public id.
    pub id: String,
    /// The tenant it belongs to (an admin token acts on every tenant).
    pub tenant: String,
    /// What it may do.
    pub role: Role,
    /// Lower-case hex SHA-256 of the secret.
    pub sha256: String,
    /// When it was made (ms since the Unix epoch).
    pub created_at_ms: u64,
    /// When it stops working (ms since the Unix epoch); none: never.
    #[serde(default)]
    pub expires_at_ms: Option<u64>,
    /// When it was revoked; a revoked token never works again.
    #[serde(default)]
    pub revoked_at_ms: Option<u64>,
    /// What it is for, as its maker said.
    #[serde(default)]
    pub description: String,
}

impl TokenRecord {
    /// Whether `secret` is this token's, compared in constant time.
    pub fn matches(&self, secret: &str) -> bool {
        let presented = hex(&Sha256::digest(secret.as_bytes()));
        presented.as_bytes().ct_eq(self.sha256.as_bytes()).into()
    }
}

/// A token's whole text. Shown once, when made; never logged: its `Debug`
/// and `Display` print only the id.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSecret {
    text: String,
    id_end: usize,
}

impl TokenSecret {
    /// A new random token and the SHA-256 of its secret.
    pub fn generate() -> Result<(Self, String), AuthError> {
        let mut bytes = [0u8; 8 + 32];
        getrandom::fill(&mut bytes).map_err(|e| AuthError::Io {
            path: "(the system's random source)".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let id = hex(&bytes[..8]);
        let secret = hex(&bytes[8..]);
        let sha256 = hex(&Sha256::digest(secret.as_bytes()));
        let text = format!("{PREFIX}{id}_{secret}");
        Ok((
            Self {
                text,
                id_end: PREFIX.len() + ID_HEX,
            },
            sha256,
        ))
    }

    /// Reads a token's text; the error never repeats it.
    pub fn parse(text: &str) -> Result<Self, AuthError> {
        let malformed = || {
            AuthError::Unauthenticated(format!(
                "the token is malformed: a Sluice token is `{PREFIX}` then {ID_HEX} and {SECRET_HEX} lower-case hex digits joined by `_`"
            ))
        };
        let text = text.trim();
        let rest = text.strip_prefix(PREFIX).ok_or_else(malformed)?;
        let (id, secret) = rest.split_once('_').ok_or_else(malformed)?;
        let is_hex = |s: &str, n: usize| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !is_hex(id, ID_HEX) || !is_hex(secret, SECRET_HEX) {
            return Err(malformed());
        }
        Ok(Self {
            text: text.to_string(),
            id_end: PREFIX.len() + ID_HEX,
        })
    }

    /// The public id.
    pub fn id(&self) -> &str {
        &self.text[PREFIX.len()..self.id_end]
    }

    /// The secret part (compare it with [`TokenRecord::matches`]).
    pub fn secret(&self) -> &str {
        &self.text[self.id_end + 1..]
    }

    /// The whole text, to hand to the one who asked for the token.
    pub fn reveal(&self) -> &str {
        &self.text
    }
}

impl fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenSecret({}, secret hidden)", self.id())
    }
}

impl fmt::Display for TokenSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "token {}", self.id())
    }
}

/// Lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_token_parses_back_and_matches_only_its_own_hash() {
        let (token, sha) = TokenSecret::generate().unwrap();
        let parsed = TokenSecret::parse(token.reveal()).unwrap();
        assert_eq!(parsed.id(), token.id());
        assert_eq!(parsed.secret().len(), SECRET_HEX);
        let record = TokenRecord {
            version: 1,
            id: token.id().into(),
            tenant: "default".into(),
            role: Role::Admin,
            sha256: sha,
            created_at_ms: 0,
            expires_at_ms: None,
            revoked_at_ms: None,
            description: String::new(),
        };
        assert!(record.matches(parsed.secret()));
        let (other, _) = TokenSecret::generate().unwrap();
        assert!(!record.matches(other.secret()));
        assert_ne!(other.id(), token.id());
        // The record never holds the secret.
        let stored = String::from_utf8(sluice_meta::keys::encode(&record).unwrap()).unwrap();
        assert!(!stored.contains(token.secret()), "{stored}");
    }

    #[test]
    fn debug_and_display_never_show_the_secret() {
        let (token, _) = TokenSecret::generate().unwrap();
        for shown in [format!("{token:?}"), format!("{token}")] {
            assert!(shown.contains(token.id()), "{shown}");
            assert!(!shown.contains(token.secret()), "{shown}");
        }
    }

    #[test]
    fn malformed_tokens_are_refused_without_repeating_them() {
        let (good, _) = TokenSecret::generate().unwrap();
        let upper = good.reveal().to_uppercase();
        let short = &good.reveal()[..good.reveal().len() - 1];
        let cases = [
            "",
            "Bearer x",
            "sluice_",
            "sluice_0123456789abcdef",
            short,
            upper.as_str(),
            "sluice_0123456789abcdeg_0000000000000000000000000000000000000000000000000000000000000000",
        ];
        for bad in cases {
            let e = TokenSecret::parse(bad).unwrap_err();
            assert!(matches!(e, AuthError::Unauthenticated(_)), "{bad}: {e}");
            assert!(e.to_string().starts_with("the token is malformed"), "{e}");
            if bad.len() > 10 {
                assert!(!e.to_string().contains(bad), "{e}");
            }
        }
    }

    #[test]
    fn roles_read_and_write_their_names() {
        for role in [Role::Viewer, Role::TenantAdmin, Role::Admin] {
            assert_eq!(role.as_str().parse::<Role>().unwrap(), role);
        }
        let e = "root".parse::<Role>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "role `root` is not one of admin, tenant-admin, viewer"
        );
    }
}
