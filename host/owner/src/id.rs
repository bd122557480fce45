//! Changefeed ids: a tenant and a name, both following TiCDC's changefeed-id rule
//! `^[a-zA-Z0-9]+(-[a-zA-Z0-9]+)*$`, at most [`crate::MAX_NAME_LEN`] characters.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use sluice_config::{IdError, NameKind, validate_name};

/// The tenant a deployment without tenants puts every changefeed in (TiCDC's
/// `default` namespace).
pub const DEFAULT_TENANT: &str = "default";

/// A changefeed's id: unique within its tenant. Shown as `tenant/name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawId", rename_all = "kebab-case")]
pub struct ChangefeedId {
    tenant: String,
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawId {
    tenant: String,
    name: String,
}

impl TryFrom<RawId> for ChangefeedId {
    type Error = IdError;

    fn try_from(raw: RawId) -> Result<Self, IdError> {
        ChangefeedId::new(raw.tenant, raw.name)
    }
}

impl ChangefeedId {
    /// A checked id.
    pub fn new(tenant: impl Into<String>, name: impl Into<String>) -> Result<Self, IdError> {
        let (tenant, name) = (tenant.into(), name.into());
        validate_name(NameKind::Tenant, &tenant)?;
        validate_name(NameKind::Changefeed, &name)?;
        Ok(Self { tenant, name })
    }

    /// The tenant that owns the changefeed.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The changefeed's name within its tenant.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for ChangefeedId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant, self.name)
    }
}

impl FromStr for ChangefeedId {
    type Err = IdError;

    /// Parses `tenant/name`.
    fn from_str(s: &str) -> Result<Self, IdError> {
        match s.split_once('/') {
            Some((tenant, name)) => ChangefeedId::new(tenant, name),
            None => Err(IdError::MissingTenant {
                value: s.to_owned(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ticdc_style_names() {
        for name in [
            "a",
            "orders",
            "orders-v2",
            "A1-b2-C3",
            "0",
            &"x".repeat(128),
        ] {
            assert!(
                ChangefeedId::new("shop", name).is_ok(),
                "{name} should be valid"
            );
        }
    }

    #[test]
    fn rejects_names_outside_the_rule_and_says_why() {
        let cases = [
            ("", "it is empty"),
            ("orders_v2", "it contains '_'"),
            ("orders.v2", "it contains '.'"),
            ("ordérs", "it contains 'é'"),
            ("-orders", "it starts with a hyphen"),
            ("orders-", "it ends with a hyphen"),
            ("orders--v2", "it contains two hyphens in a row"),
            ("shop/orders", "it contains '/'"),
        ];
        for (name, problem) in cases {
            let err = ChangefeedId::new("shop", name).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "changefeed name `{name}` is invalid: {problem}; use ASCII letters and digits, \
                     optionally joined by single hyphens (like `orders-v2`), at most 128 characters"
                )
            );
        }
        let long = "x".repeat(129);
        let err = ChangefeedId::new("shop", &long).unwrap_err();
        assert!(
            err.to_string()
                .contains("is invalid: it is 129 characters long;")
        );
    }

    #[test]
    fn tenant_follows_the_same_rule() {
        let err = ChangefeedId::new("my_shop", "orders").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("tenant name `my_shop` is invalid: it contains '_';"),
            "{err}"
        );
    }

    #[test]
    fn displays_and_parses_as_tenant_slash_name() {
        let id = ChangefeedId::new("shop", "orders").unwrap();
        assert_eq!(id.to_string(), "shop/orders");
        assert_eq!("shop/orders".parse::<ChangefeedId>().unwrap(), id);
        let err = "orders".parse::<ChangefeedId>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "changefeed id `orders` has no tenant; write it as tenant/name, e.g. `default/orders`"
        );
        assert!("shop/orders/v2".parse::<ChangefeedId>().is_err());
    }

    #[test]
    fn deserializing_checks_the_rule() {
        let id: ChangefeedId =
            serde_json::from_str(r#"{"tenant":"shop","name":"orders"}"#).unwrap();
        assert_eq!(id, ChangefeedId::new("shop", "orders").unwrap());
        assert_eq!(
            serde_json::to_string(&id).unwrap(),
            r#"{"tenant":"shop","name":"orders"}"#
        );
        let err =
            serde_json::from_str::<ChangefeedId>(r#"{"tenant":"shop","name":"a b"}"#).unwrap_err();
        assert!(err.to_string().contains("changefeed name `a b` is invalid"));
    }
}
