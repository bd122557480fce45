//! The key layout of the control plane (documented in `docs/meta-layout.md`).
//!
//! ```text
//! /sluice/layout                                               {"version":1}
//! /sluice/v1/capture/{capture}                                 leased by the capture
//! /sluice/v1/owner/{lease-hex}                                 leased, one per owner candidate
//! /sluice/v1/tenant/{tenant}/info
//! /sluice/v1/tenant/{tenant}/plugin/{plugin}@{version}
//! /sluice/v1/tenant/{tenant}/changefeed/{changefeed}/info
//! /sluice/v1/tenant/{tenant}/changefeed/{changefeed}/status
//! /sluice/v1/tenant/{tenant}/changefeed/{changefeed}/task/{capture}
//! /sluice/v1/assignment/{capture}/{tenant}/{changefeed}
//! /sluice/v1/token/{token}
//! /sluice/v1/audit/{at-ms:020}-{seq:016x}
//! ```
//!
//! Builders validate every name part, so a key never holds a `/` or `@` from a
//! name; [`MetaKey::parse`] is their inverse. Values are JSON objects with a
//! `version` field ([`encode`], [`decode`]).

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::MetaError;
use crate::store::{LeaseId, MetaStore};
use crate::txn::{Compare, Op, Txn};

/// The one key outside the versioned tree: which layout the tree below uses.
pub const LAYOUT_KEY: &str = "/sluice/layout";
/// The layout this build reads and writes.
pub const LAYOUT_VERSION: u64 = 1;
/// Root of the version 1 tree.
pub const ROOT: &str = "/sluice/v1/";
/// The longest name part.
pub const MAX_NAME_LEN: usize = 128;

/// Which name a part is, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    /// A tenant's name: the first part under `/sluice/v1/tenant/`.
    Tenant,
    /// A changefeed's name, unique within its tenant.
    Changefeed,
    /// A capture's id (one per running Sluice process).
    Capture,
    /// A plugin's name, unique within its tenant.
    Plugin,
    /// A plugin's version; unlike the other names it may also contain `.` and `+`
    /// (so semver fits).
    PluginVersion,
    /// An API token's id, unique in the store.
    Token,
}

impl NameKind {
    fn describe(self) -> &'static str {
        match self {
            Self::Tenant => "tenant name",
            Self::Changefeed => "changefeed name",
            Self::Capture => "capture id",
            Self::Plugin => "plugin name",
            Self::PluginVersion => "plugin version",
            Self::Token => "token id",
        }
    }
}

/// Check a name part. Names (TiCDC's changefeed id rule) match
/// `^[a-zA-Z0-9]+(-[a-zA-Z0-9]+)*$`; plugin versions match
/// `^[a-zA-Z0-9]+([.+-][a-zA-Z0-9]+)*$` (so semver fits). At most
/// [`MAX_NAME_LEN`] bytes.
pub fn validate_name(kind: NameKind, name: &str) -> Result<(), MetaError> {
    let separators: &[u8] = if kind == NameKind::PluginVersion {
        b".+-"
    } else {
        b"-"
    };
    let words_ok = name
        .as_bytes()
        .split(|b| separators.contains(b))
        .all(|word| !word.is_empty() && word.iter().all(u8::is_ascii_alphanumeric));
    if name.is_empty() || name.len() > MAX_NAME_LEN || !words_ok {
        let rule = if kind == NameKind::PluginVersion {
            "letters and digits, separated by single '.', '+' or '-'"
        } else {
            "letters and digits, separated by single '-'"
        };
        return Err(MetaError::InvalidKey {
            key: name.to_owned(),
            reason: format!(
                "a {} must be 1 to {MAX_NAME_LEN} characters of {rule}, not starting or ending \
                 with a separator",
                kind.describe()
            ),
        });
    }
    Ok(())
}

/// A key of the layout, by what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MetaKey {
    /// `/sluice/layout`
    Layout,
    /// `/sluice/v1/capture/{capture}`
    Capture {
        /// The capture's id.
        capture: String,
    },
    /// `/sluice/v1/owner/{lease-hex}`
    OwnerCandidate {
        /// The lease of the capture campaigning; the key holds it in lower-case hex.
        lease: LeaseId,
    },
    /// `/sluice/v1/tenant/{tenant}/info`
    TenantInfo {
        /// The tenant's name.
        tenant: String,
    },
    /// `/sluice/v1/token/{token}`: an API token (its record names its
    /// tenant; tokens are looked up by id alone).
    Token {
        /// The token's id.
        token: String,
    },
    /// `/sluice/v1/audit/{at-ms:020}-{seq:016x}`: one audit entry; keys sort
    /// by time.
    Audit {
        /// When it was written (ms since the Unix epoch).
        at_ms: u64,
        /// Tells entries of one millisecond apart.
        seq: u64,
    },
    /// `/sluice/v1/tenant/{tenant}/plugin/{plugin}@{version}`
    Plugin {
        /// The tenant that uploaded the plugin.
        tenant: String,
        /// The plugin's name.
        plugin: String,
        /// The plugin's version (may contain `.`, `+` and `-`).
        version: String,
    },
    /// `/sluice/v1/tenant/{tenant}/changefeed/{changefeed}/info`
    ChangefeedInfo {
        /// The tenant that owns the changefeed.
        tenant: String,
        /// The changefeed's name.
        changefeed: String,
    },
    /// `/sluice/v1/tenant/{tenant}/changefeed/{changefeed}/status`
    ChangefeedStatus {
        /// The tenant that owns the changefeed.
        tenant: String,
        /// The changefeed's name.
        changefeed: String,
    },
    /// `/sluice/v1/tenant/{tenant}/changefeed/{changefeed}/task/{capture}`
    TaskPosition {
        /// The tenant that owns the changefeed.
        tenant: String,
        /// The changefeed's name.
        changefeed: String,
        /// The capture whose processor runs the task and writes the position.
        capture: String,
    },
    /// `/sluice/v1/assignment/{capture}/{tenant}/{changefeed}`
    Assignment {
        /// The capture the owner assigned the changefeed's task to.
        capture: String,
        /// The tenant that owns the changefeed.
        tenant: String,
        /// The changefeed's name.
        changefeed: String,
    },
}

impl MetaKey {
    /// The key, after validating every name part.
    pub fn key(&self) -> Result<String, MetaError> {
        use NameKind as N;
        Ok(match self {
            Self::Layout => LAYOUT_KEY.to_owned(),
            Self::Capture { capture } => {
                validate_name(N::Capture, capture)?;
                format!("{ROOT}capture/{capture}")
            }
            Self::OwnerCandidate { lease } => owner_candidate(*lease),
            Self::TenantInfo { tenant } => format!("{}info", tenant_prefix(tenant)?),
            Self::Token { token } => {
                validate_name(N::Token, token)?;
                format!("{ROOT}token/{token}")
            }
            Self::Audit { at_ms, seq } => format!("{ROOT}audit/{at_ms:020}-{seq:016x}"),
            Self::Plugin {
                tenant,
                plugin,
                version,
            } => {
                validate_name(N::Plugin, plugin)?;
                validate_name(N::PluginVersion, version)?;
                format!("{}{plugin}@{version}", plugin_prefix(tenant)?)
            }
            Self::ChangefeedInfo { tenant, changefeed } => {
                format!("{}info", changefeed_prefix(tenant, changefeed)?)
            }
            Self::ChangefeedStatus { tenant, changefeed } => {
                format!("{}status", changefeed_prefix(tenant, changefeed)?)
            }
            Self::TaskPosition {
                tenant,
                changefeed,
                capture,
            } => {
                validate_name(N::Capture, capture)?;
                format!("{}{capture}", task_prefix(tenant, changefeed)?)
            }
            Self::Assignment {
                capture,
                tenant,
                changefeed,
            } => {
                validate_name(N::Tenant, tenant)?;
                validate_name(N::Changefeed, changefeed)?;
                format!("{}{tenant}/{changefeed}", assignment_prefix(capture)?)
            }
        })
    }

    /// What a key of the layout holds; `None` for any other key (including keys
    /// with invalid name parts).
    pub fn parse(key: &str) -> Option<Self> {
        use NameKind as N;
        if key == LAYOUT_KEY {
            return Some(Self::Layout);
        }
        let rest = key.strip_prefix(ROOT)?;
        let parts: Vec<&str> = rest.split('/').collect();
        let name = |kind, s: &str| validate_name(kind, s).is_ok().then(|| s.to_owned());
        let parsed = match parts.as_slice() {
            ["capture", capture] => Self::Capture {
                capture: name(N::Capture, capture)?,
            },
            ["owner", hex] => {
                let id = u64::from_str_radix(hex, 16).ok()? as i64;
                Self::OwnerCandidate { lease: LeaseId(id) }
            }
            ["tenant", tenant, "info"] => Self::TenantInfo {
                tenant: name(N::Tenant, tenant)?,
            },
            ["token", token] => Self::Token {
                token: name(N::Token, token)?,
            },
            ["audit", entry] => {
                let (at, seq) = entry.split_once('-')?;
                Self::Audit {
                    at_ms: at.parse().ok()?,
                    seq: u64::from_str_radix(seq, 16).ok()?,
                }
            }
            ["tenant", tenant, "plugin", entry] => {
                let (plugin, version) = entry.split_once('@')?;
                Self::Plugin {
                    tenant: name(N::Tenant, tenant)?,
                    plugin: name(N::Plugin, plugin)?,
                    version: name(N::PluginVersion, version)?,
                }
            }
            ["tenant", tenant, "changefeed", changefeed, "info"] => Self::ChangefeedInfo {
                tenant: name(N::Tenant, tenant)?,
                changefeed: name(N::Changefeed, changefeed)?,
            },
            ["tenant", tenant, "changefeed", changefeed, "status"] => Self::ChangefeedStatus {
                tenant: name(N::Tenant, tenant)?,
                changefeed: name(N::Changefeed, changefeed)?,
            },
            ["tenant", tenant, "changefeed", changefeed, "task", capture] => Self::TaskPosition {
                tenant: name(N::Tenant, tenant)?,
                changefeed: name(N::Changefeed, changefeed)?,
                capture: name(N::Capture, capture)?,
            },
            ["assignment", capture, tenant, changefeed] => Self::Assignment {
                capture: name(N::Capture, capture)?,
                tenant: name(N::Tenant, tenant)?,
                changefeed: name(N::Changefeed, changefeed)?,
            },
            _ => return None,
        };
        // A key is only ours if building it back gives the same text
        // (no leading zeros in a lease id, for one).
        (parsed.key().ok()? == key).then_some(parsed)
    }
}

/// `/sluice/v1/capture/`: every live capture.
pub fn capture_prefix() -> String {
    format!("{ROOT}capture/")
}

/// `/sluice/v1/capture/{capture}`.
pub fn capture(capture: &str) -> Result<String, MetaError> {
    MetaKey::Capture {
        capture: capture.to_owned(),
    }
    .key()
}

/// `/sluice/v1/owner/`: the owner candidates; the one with the smallest create
/// revision is the owner.
pub fn owner_prefix() -> String {
    format!("{ROOT}owner/")
}

/// `/sluice/v1/owner/{lease-hex}`: one candidate, attached to its capture's lease.
pub fn owner_candidate(lease: LeaseId) -> String {
    format!("{ROOT}owner/{:x}", lease.0 as u64)
}

/// `/sluice/v1/drain/`: the captures being drained.
pub fn drain_prefix() -> String {
    format!("{ROOT}drain/")
}

/// `/sluice/v1/drain/{capture}`: the owner drains the capture (its work is
/// placed elsewhere and it gets no new work); the capture deletes it when it
/// registers again.
pub fn drain(capture: &str) -> Result<String, MetaError> {
    validate_name(NameKind::Capture, capture)?;
    Ok(format!("{ROOT}drain/{capture}"))
}

/// `/sluice/v1/move/`: changefeeds an operator asked to move.
pub fn move_prefix() -> String {
    format!("{ROOT}move/")
}

/// `/sluice/v1/move/{tenant}/{changefeed}`: the changefeed is to run on the
/// capture its value names (`changefeed move`, `changefeed rebalance`): the
/// owner stops it where it runs and places it there, then deletes the key.
pub fn changefeed_move(tenant: &str, changefeed: &str) -> Result<String, MetaError> {
    validate_name(NameKind::Tenant, tenant)?;
    validate_name(NameKind::Changefeed, changefeed)?;
    Ok(format!("{ROOT}move/{tenant}/{changefeed}"))
}

/// `/sluice/v1/table-placement/`: where operators asked tables to run.
pub fn table_placement_prefix() -> String {
    format!("{ROOT}table-placement/")
}

/// `/sluice/v1/table-placement/{tenant}/{changefeed}`: the captures some of
/// the changefeed's tables run on (`changefeed move-table`); a table not named
/// runs on the capture that reads the changefeed's source. The owner reads it
/// whenever it places the changefeed.
pub fn table_placement(tenant: &str, changefeed: &str) -> Result<String, MetaError> {
    validate_name(NameKind::Tenant, tenant)?;
    validate_name(NameKind::Changefeed, changefeed)?;
    Ok(format!("{ROOT}table-placement/{tenant}/{changefeed}"))
}

/// `/sluice/v1/cluster/plugin-store`: where the cluster keeps its plugin files
/// (ADR 0012), recorded by the first server started with `--plugin-store`.
pub fn cluster_plugin_store() -> String {
    format!("{ROOT}cluster/plugin-store")
}

/// `/sluice/v1/tenant/`: every tenant's tree.
pub fn tenants_prefix() -> String {
    format!("{ROOT}tenant/")
}

/// `/sluice/v1/tenant/{tenant}/`: everything a tenant owns.
pub fn tenant_prefix(tenant: &str) -> Result<String, MetaError> {
    validate_name(NameKind::Tenant, tenant)?;
    Ok(format!("{ROOT}tenant/{tenant}/"))
}

/// `/sluice/v1/tenant/{tenant}/info`.
pub fn tenant_info(tenant: &str) -> Result<String, MetaError> {
    MetaKey::TenantInfo {
        tenant: tenant.to_owned(),
    }
    .key()
}

/// `/sluice/v1/token/`: every API token.
pub fn tokens_prefix() -> String {
    format!("{ROOT}token/")
}

/// `/sluice/v1/token/{token}`.
pub fn token(token: &str) -> Result<String, MetaError> {
    MetaKey::Token {
        token: token.to_owned(),
    }
    .key()
}

/// `/sluice/v1/audit/`: the audit log, oldest first.
pub fn audit_prefix() -> String {
    format!("{ROOT}audit/")
}

/// `/sluice/v1/audit/{at-ms:020}-{seq:016x}`.
pub fn audit(at_ms: u64, seq: u64) -> String {
    format!("{ROOT}audit/{at_ms:020}-{seq:016x}")
}

/// `/sluice/v1/tenant/{tenant}/plugin/`: a tenant's plugin registry.
pub fn plugin_prefix(tenant: &str) -> Result<String, MetaError> {
    Ok(format!("{}plugin/", tenant_prefix(tenant)?))
}

/// `/sluice/v1/tenant/{tenant}/plugin/{plugin}@{version}`.
pub fn plugin(tenant: &str, plugin: &str, version: &str) -> Result<String, MetaError> {
    MetaKey::Plugin {
        tenant: tenant.to_owned(),
        plugin: plugin.to_owned(),
        version: version.to_owned(),
    }
    .key()
}

/// `/sluice/v1/tenant/{tenant}/changefeed/`: a tenant's changefeeds.
pub fn changefeeds_prefix(tenant: &str) -> Result<String, MetaError> {
    Ok(format!("{}changefeed/", tenant_prefix(tenant)?))
}

/// `/sluice/v1/tenant/{tenant}/changefeed/{changefeed}/`: one changefeed's keys.
pub fn changefeed_prefix(tenant: &str, changefeed: &str) -> Result<String, MetaError> {
    validate_name(NameKind::Changefeed, changefeed)?;
    Ok(format!("{}{changefeed}/", changefeeds_prefix(tenant)?))
}

/// `/sluice/v1/tenant/{tenant}/changefeed/{changefeed}/info`.
pub fn changefeed_info(tenant: &str, changefeed: &str) -> Result<String, MetaError> {
    MetaKey::ChangefeedInfo {
        tenant: tenant.to_owned(),
        changefeed: changefeed.to_owned(),
    }
    .key()
}

/// `/sluice/v1/tenant/{tenant}/changefeed/{changefeed}/status`.
pub fn changefeed_status(tenant: &str, changefeed: &str) -> Result<String, MetaError> {
    MetaKey::ChangefeedStatus {
        tenant: tenant.to_owned(),
        changefeed: changefeed.to_owned(),
    }
    .key()
}

/// `/sluice/v1/tenant/{tenant}/changefeed/{changefeed}/task/`: its task positions.
pub fn task_prefix(tenant: &str, changefeed: &str) -> Result<String, MetaError> {
    Ok(format!("{}task/", changefeed_prefix(tenant, changefeed)?))
}

/// `/sluice/v1/tenant/{tenant}/changefeed/{changefeed}/task/{capture}`.
pub fn task_position(tenant: &str, changefeed: &str, capture: &str) -> Result<String, MetaError> {
    MetaKey::TaskPosition {
        tenant: tenant.to_owned(),
        changefeed: changefeed.to_owned(),
        capture: capture.to_owned(),
    }
    .key()
}

/// `/sluice/v1/assignment/`: every capture's assignments.
pub fn assignments_prefix() -> String {
    format!("{ROOT}assignment/")
}

/// `/sluice/v1/assignment/{capture}/`: what the owner assigned to one capture.
pub fn assignment_prefix(capture: &str) -> Result<String, MetaError> {
    validate_name(NameKind::Capture, capture)?;
    Ok(format!("{}{capture}/", assignments_prefix()))
}

/// `/sluice/v1/assignment/{capture}/{tenant}/{changefeed}`: one changefeed's task
/// on one capture.
pub fn assignment(capture: &str, tenant: &str, changefeed: &str) -> Result<String, MetaError> {
    MetaKey::Assignment {
        capture: capture.to_owned(),
        tenant: tenant.to_owned(),
        changefeed: changefeed.to_owned(),
    }
    .key()
}

/// Encode a value as JSON. Value types carry a `version` field.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, MetaError> {
    serde_json::to_vec(value).map_err(|err| MetaError::InvalidRequest {
        reason: format!("the value cannot be encoded as JSON: {err}"),
    })
}

/// Decode the JSON value of `key`.
pub fn decode<T: DeserializeOwned>(key: &str, value: &[u8]) -> Result<T, MetaError> {
    serde_json::from_slice(value).map_err(|err| MetaError::BadValue {
        key: key.to_owned(),
        reason: "it is not the expected JSON".into(),
        source: Some(Box::new(err)),
    })
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct LayoutRecord {
    version: u64,
}

/// Make sure the store uses this build's layout: write `/sluice/layout` if it is
/// missing, and refuse a store written by a newer layout
/// ([`MetaError::NewerLayout`]). Returns the version found (or written).
pub async fn ensure_layout<S: MetaStore + ?Sized>(store: &S) -> Result<u64, MetaError> {
    let value = encode(&LayoutRecord {
        version: LAYOUT_VERSION,
    })?;
    let txn = Txn::new()
        .when([Compare::absent(LAYOUT_KEY)])
        .and_then([Op::put(LAYOUT_KEY, value)])
        .or_else([Op::get(LAYOUT_KEY)]);
    let result = store.txn(txn).await?;
    if result.succeeded {
        return Ok(LAYOUT_VERSION);
    }
    let Some(Some(kv)) = result.gets().next() else {
        return Err(MetaError::unexpected(
            "the failure branch of a transaction returned no get".into(),
        ));
    };
    let found = decode::<LayoutRecord>(LAYOUT_KEY, &kv.value)?.version;
    if found > LAYOUT_VERSION {
        return Err(MetaError::NewerLayout {
            location: format!("the meta store (key {LAYOUT_KEY})"),
            found,
            supported: LAYOUT_VERSION,
        });
    }
    if found == 0 {
        return Err(MetaError::BadValue {
            key: LAYOUT_KEY.into(),
            reason: "layout version 0 does not exist".into(),
            source: None,
        });
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_follow_the_ticdc_rule() {
        for ok in ["a", "feed-1", "A-b-C", "0", &"x".repeat(128)] {
            validate_name(NameKind::Changefeed, ok).unwrap();
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a--b",
            "a_b",
            "a/b",
            "a@b",
            "a.b",
            "é",
            &"x".repeat(129),
        ] {
            assert!(
                matches!(
                    validate_name(NameKind::Changefeed, bad),
                    Err(MetaError::InvalidKey { .. })
                ),
                "{bad:?} was accepted"
            );
        }
        validate_name(NameKind::PluginVersion, "1.2.3-rc.1+build.5").unwrap();
        assert!(validate_name(NameKind::PluginVersion, "1..2").is_err());
        assert!(validate_name(NameKind::PluginVersion, "1.2@3").is_err());
    }

    #[test]
    fn builders_give_the_documented_keys() {
        assert_eq!(
            changefeed_info("acme", "orders").unwrap(),
            "/sluice/v1/tenant/acme/changefeed/orders/info"
        );
        assert_eq!(
            changefeed_status("acme", "orders").unwrap(),
            "/sluice/v1/tenant/acme/changefeed/orders/status"
        );
        assert_eq!(
            task_position("acme", "orders", "c-1").unwrap(),
            "/sluice/v1/tenant/acme/changefeed/orders/task/c-1"
        );
        assert_eq!(capture("c-1").unwrap(), "/sluice/v1/capture/c-1");
        assert_eq!(
            assignment("c-1", "acme", "orders").unwrap(),
            "/sluice/v1/assignment/c-1/acme/orders"
        );
        assert!(
            assignment("c-1", "acme", "orders")
                .unwrap()
                .starts_with(&assignment_prefix("c-1").unwrap())
        );
        assert!(assignment("c-1", "acme", "a/b").is_err());
        assert_eq!(owner_candidate(LeaseId(0x694d)), "/sluice/v1/owner/694d");
        assert_eq!(
            plugin("acme", "sink-file", "1.0.0").unwrap(),
            "/sluice/v1/tenant/acme/plugin/sink-file@1.0.0"
        );
        assert_eq!(tenant_info("acme").unwrap(), "/sluice/v1/tenant/acme/info");
        assert!(changefeed_info("acme", "a/b").is_err());
        assert!(changefeed_info("ac me", "x").is_err());
    }

    #[test]
    fn a_changefeed_prefix_does_not_cover_a_longer_name() {
        let prefix = changefeed_prefix("acme", "orders").unwrap();
        assert!(
            !changefeed_info("acme", "orders-2")
                .unwrap()
                .starts_with(&prefix)
        );
    }

    #[test]
    fn foreign_keys_do_not_parse() {
        for key in [
            "/sluice/v2/capture/a",
            "/sluice/v1/capture/a/b",
            "/sluice/v1/owner/0694d",
            "/sluice/v1/owner/xyz",
            "/sluice/v1/tenant/acme/changefeed/orders",
            "/sluice/v1/tenant/acme/plugin/sink",
            "/sluice/v1/tenant/a_b/info",
            "/sluice/v1/assignment/c-1/acme",
            "/sluice/v1/assignment/c-1/acme/orders/x",
            "/other",
        ] {
            assert_eq!(MetaKey::parse(key), None, "{key}");
        }
    }

    fn name() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9]{1,4}(-[a-zA-Z0-9]{1,4}){0,2}"
    }

    fn meta_key() -> impl Strategy<Value = MetaKey> {
        prop_oneof![
            Just(MetaKey::Layout),
            name().prop_map(|capture| MetaKey::Capture { capture }),
            any::<i64>().prop_map(|l| MetaKey::OwnerCandidate { lease: LeaseId(l) }),
            name().prop_map(|tenant| MetaKey::TenantInfo { tenant }),
            name().prop_map(|token| MetaKey::Token { token }),
            (any::<u64>(), any::<u64>()).prop_map(|(at_ms, seq)| MetaKey::Audit { at_ms, seq }),
            (name(), name(), "[0-9]{1,3}(\\.[0-9a-z]{1,3}){0,3}").prop_map(
                |(tenant, plugin, version)| MetaKey::Plugin {
                    tenant,
                    plugin,
                    version
                }
            ),
            (name(), name())
                .prop_map(|(tenant, changefeed)| MetaKey::ChangefeedInfo { tenant, changefeed }),
            (name(), name())
                .prop_map(|(tenant, changefeed)| MetaKey::ChangefeedStatus { tenant, changefeed }),
            (name(), name(), name()).prop_map(|(tenant, changefeed, capture)| {
                MetaKey::TaskPosition {
                    tenant,
                    changefeed,
                    capture,
                }
            }),
            (name(), name(), name()).prop_map(|(capture, tenant, changefeed)| {
                MetaKey::Assignment {
                    capture,
                    tenant,
                    changefeed,
                }
            }),
        ]
    }

    proptest! {
        #[test]
        fn every_key_parses_back(key in meta_key()) {
            let text = key.key().unwrap();
            prop_assert_eq!(MetaKey::parse(&text), Some(key));
        }
    }
}
