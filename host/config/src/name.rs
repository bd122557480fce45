//! Names the config uses: the name rule shared by tenants, changefeeds and
//! plugins (TiCDC's changefeed-id rule `^[a-zA-Z0-9]+(-[a-zA-Z0-9]+)*$`), and
//! [`PluginId`], a plugin at one version (`name@version`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The longest tenant, changefeed or plugin name, in characters.
pub const MAX_NAME_LEN: usize = 128;

/// What a checked name names; used in error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    /// A tenant's name.
    Tenant,
    /// A changefeed's name (or `[changefeed] id` in `sluice run`).
    Changefeed,
    /// A plugin's name.
    Plugin,
}

impl fmt::Display for NameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameKind::Tenant => "tenant name",
            NameKind::Changefeed => "changefeed name",
            NameKind::Plugin => "plugin name",
        })
    }
}

/// A name or id that does not follow its rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// A name outside the name rule.
    #[error(
        "{kind} `{value}` is invalid: {problem}; use ASCII letters and digits, optionally \
         joined by single hyphens (like `orders-v2`), at most 128 characters"
    )]
    InvalidName {
        /// What the name names.
        kind: NameKind,
        /// The name given.
        value: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A changefeed id without `tenant/`.
    #[error(
        "changefeed id `{value}` has no tenant; write it as tenant/name, e.g. `default/{value}`"
    )]
    MissingTenant {
        /// The id given.
        value: String,
    },
    /// A plugin id without `@version`.
    #[error("plugin `{value}` has no version; write it as name@version, e.g. `{value}@0.1.0`")]
    MissingVersion {
        /// The id given.
        value: String,
    },
    /// A plugin version that is not `MAJOR.MINOR.PATCH[-pre][+build]`.
    #[error(
        "version `{version}` of plugin `{plugin}` is invalid: {problem}; write e.g. `0.1.0` or \
         `1.2.0-rc.1`"
    )]
    InvalidVersion {
        /// The plugin's name.
        plugin: String,
        /// The version given.
        version: String,
        /// What is wrong with it.
        problem: &'static str,
    },
}

/// Checks `value` against the name rule: ASCII letters and digits, optionally
/// joined by single hyphens, 1 to [`MAX_NAME_LEN`] characters.
pub fn validate_name(kind: NameKind, value: &str) -> Result<(), IdError> {
    match name_problem(value) {
        None => Ok(()),
        Some(problem) => Err(IdError::InvalidName {
            kind,
            value: value.to_owned(),
            problem,
        }),
    }
}

fn name_problem(value: &str) -> Option<String> {
    if value.is_empty() {
        return Some("it is empty".into());
    }
    let len = value.chars().count();
    if len > MAX_NAME_LEN {
        return Some(format!("it is {len} characters long"));
    }
    if let Some(c) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-'))
    {
        return Some(format!("it contains {c:?}"));
    }
    if value.starts_with('-') {
        return Some("it starts with a hyphen".into());
    }
    if value.ends_with('-') {
        return Some("it ends with a hyphen".into());
    }
    if value.contains("--") {
        return Some("it contains two hyphens in a row".into());
    }
    None
}

/// A plugin at one version, written `name@version` (e.g. `sink-file@0.1.0`). The name
/// follows the name rule; the version is `MAJOR.MINOR.PATCH` with an optional
/// `-pre-release` and `+build` suffix.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PluginId {
    name: String,
    version: String,
}

impl PluginId {
    /// A checked plugin id.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Result<Self, IdError> {
        let (name, version) = (name.into(), version.into());
        validate_name(NameKind::Plugin, &name)?;
        if let Some(problem) = version_problem(&version) {
            return Err(IdError::InvalidVersion {
                plugin: name,
                version,
                problem,
            });
        }
        Ok(Self { name, version })
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plugin's version.
    pub fn version(&self) -> &str {
        &self.version
    }
}

fn version_problem(version: &str) -> Option<&'static str> {
    let (rest, build) = match version.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (version, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (rest, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    if parts.len() != 3 {
        return Some("it needs three numbers, MAJOR.MINOR.PATCH");
    }
    for part in parts {
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Some("MAJOR, MINOR and PATCH must be numbers");
        }
        if part.len() > 1 && part.starts_with('0') {
            return Some("numbers must not have leading zeros");
        }
        if part.parse::<u64>().is_err() {
            return Some("a number is too large");
        }
    }
    let label_ok = |s: &str| {
        s.split('.')
            .all(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    };
    if pre.is_some_and(|p| !label_ok(p)) {
        return Some("the pre-release part may hold only letters, digits, `-` and `.`");
    }
    if build.is_some_and(|b| !label_ok(b)) {
        return Some("the build part may hold only letters, digits, `-` and `.`");
    }
    None
}

impl fmt::Display for PluginId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.version)
    }
}

impl FromStr for PluginId {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, IdError> {
        match s.split_once('@') {
            Some((name, version)) => PluginId::new(name, version),
            None => Err(IdError::MissingVersion {
                value: s.to_owned(),
            }),
        }
    }
}

impl TryFrom<String> for PluginId {
    type Error = IdError;

    fn try_from(s: String) -> Result<Self, IdError> {
        s.parse()
    }
}

impl From<PluginId> for String {
    fn from(id: PluginId) -> String {
        id.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_id_parses_name_at_version() {
        let id: PluginId = "sink-file@0.1.0".parse().unwrap();
        assert_eq!((id.name(), id.version()), ("sink-file", "0.1.0"));
        assert_eq!(id.to_string(), "sink-file@0.1.0");
        for ok in [
            "a@1.2.3",
            "x@10.0.0-rc.1",
            "x@1.0.0+build.7",
            "x@1.0.0-alpha-2+b",
        ] {
            assert!(ok.parse::<PluginId>().is_ok(), "{ok}");
        }
    }

    #[test]
    fn plugin_id_errors_say_how_to_write_it() {
        let msg = |s: &str| s.parse::<PluginId>().unwrap_err().to_string();
        assert_eq!(
            msg("sink-file"),
            "plugin `sink-file` has no version; write it as name@version, e.g. `sink-file@0.1.0`"
        );
        assert_eq!(
            msg("sink-file@1.0"),
            "version `1.0` of plugin `sink-file` is invalid: it needs three numbers, \
             MAJOR.MINOR.PATCH; write e.g. `0.1.0` or `1.2.0-rc.1`"
        );
        assert!(msg("sink-file@01.0.0").contains("leading zeros"));
        assert!(msg("sink-file@1.0.0-").contains("pre-release"));
        assert!(msg("sink-file@1.x.0").contains("must be numbers"));
        assert!(msg("sink_file@1.0.0").starts_with("plugin name `sink_file` is invalid"));
    }
}
