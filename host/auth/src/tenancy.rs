//! Tenant and token records in the meta store, the first admin token, and
//! the authenticator the API asks for every request.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sluice_meta::keys::{self, MetaKey, NameKind, validate_name};
use sluice_meta::{Compare, MetaStore, Op, Txn};

use crate::caller::Caller;
use crate::error::AuthError;
use crate::quota::TenantQuota;
use crate::token::{Role, TokenRecord, TokenSecret};

/// The tenant that always exists: where a request without a tenant acts
/// when its token is the server's admin token.
pub const DEFAULT_TENANT: &str = "default";

/// The file in the data dir that holds the server's first admin token
/// (mode 0600), which `sluice cli` finds on the same machine.
pub const ADMIN_TOKEN_FILE: &str = "admin-token";

/// How long a token record read from the meta store is trusted before it is
/// read again: a token revoked on another server stops working within this.
const CACHE_TTL: Duration = Duration::from_secs(1);
/// Token records kept in memory at most (the cache is emptied when full).
const CACHE_ENTRIES: usize = 4096;

/// A tenant as the meta store keeps it (`/sluice/v1/tenant/{name}/info`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TenantRecord {
    /// Schema version of this record (1).
    pub version: u64,
    /// The tenant's name.
    pub name: String,
    /// When it was created (ms since the Unix epoch; 0 for `default` and
    /// for tenants that existed before tenants had records).
    pub created_at_ms: u64,
    /// What it may hold.
    #[serde(default)]
    pub quota: TenantQuota,
}

impl TenantRecord {
    fn new(name: &str, created_at_ms: u64) -> Self {
        Self {
            version: 1,
            name: name.into(),
            created_at_ms,
            quota: TenantQuota::default(),
        }
    }
}

/// A token just made: its secret (shown once) and its record.
#[derive(Debug)]
pub struct TokenGrant {
    /// The whole token, for the one who asked; never stored.
    pub secret: TokenSecret,
    /// What the meta store keeps.
    pub record: TokenRecord,
}

/// The tenant and token records of one meta store.
#[derive(Clone)]
pub struct Tenancy {
    store: Arc<dyn MetaStore>,
}

fn not_found(tenant: &str) -> AuthError {
    AuthError::NotFound(format!(
        "tenant `{tenant}` does not exist; an admin creates it with `sluice cli tenant create {tenant}`"
    ))
}

fn invalid(e: sluice_meta::MetaError) -> AuthError {
    AuthError::Invalid(e.to_string())
}

impl Tenancy {
    /// The records in `store`.
    pub fn new(store: Arc<dyn MetaStore>) -> Self {
        Self { store }
    }

    /// The record of `tenant`, if it exists (`default` always does).
    pub async fn get_tenant(&self, tenant: &str) -> Result<Option<TenantRecord>, AuthError> {
        let key = keys::tenant_info(tenant).map_err(invalid)?;
        match self.store.get(&key).await? {
            Some(kv) => Ok(Some(keys::decode(&key, &kv.value)?)),
            None if tenant == DEFAULT_TENANT => Ok(Some(TenantRecord::new(DEFAULT_TENANT, 0))),
            None => Ok(None),
        }
    }

    /// Refuses a tenant that does not exist, saying how to create it.
    pub async fn require(&self, tenant: &str) -> Result<TenantRecord, AuthError> {
        self.get_tenant(tenant)
            .await?
            .ok_or_else(|| not_found(tenant))
    }

    /// Creates `tenant`.
    pub async fn create_tenant(
        &self,
        tenant: &str,
        now_ms: u64,
    ) -> Result<TenantRecord, AuthError> {
        let key = keys::tenant_info(tenant).map_err(invalid)?;
        let exists = || AuthError::AlreadyExists(format!("tenant `{tenant}` exists already"));
        if tenant == DEFAULT_TENANT {
            return Err(exists());
        }
        let record = TenantRecord::new(tenant, now_ms);
        let put = Txn::new()
            .when([Compare::absent(&key)])
            .and_then([Op::put(&key, keys::encode(&record)?)]);
        if !self.store.txn(put).await?.succeeded {
            return Err(exists());
        }
        Ok(record)
    }

    /// Replaces the quota of `tenant` (which must exist).
    pub async fn set_quota(
        &self,
        tenant: &str,
        quota: TenantQuota,
    ) -> Result<TenantRecord, AuthError> {
        quota.validate()?;
        let key = keys::tenant_info(tenant).map_err(invalid)?;
        loop {
            let kv = self.store.get(&key).await?;
            let (mut record, compare) = match kv {
                Some(kv) => (
                    keys::decode::<TenantRecord>(&key, &kv.value)?,
                    Compare::mod_revision(&key, kv.mod_revision),
                ),
                None if tenant == DEFAULT_TENANT => {
                    (TenantRecord::new(DEFAULT_TENANT, 0), Compare::absent(&key))
                }
                None => return Err(not_found(tenant)),
            };
            record.quota = quota.clone();
            let put = Txn::new()
                .when([compare])
                .and_then([Op::put(&key, keys::encode(&record)?)]);
            if self.store.txn(put).await?.succeeded {
                return Ok(record);
            }
        }
    }

    /// Every tenant, `default` first, then by name.
    pub async fn list_tenants(&self) -> Result<Vec<TenantRecord>, AuthError> {
        let listing = self.store.list(&keys::tenants_prefix()).await?;
        let mut out = vec![TenantRecord::new(DEFAULT_TENANT, 0)];
        for kv in &listing.kvs {
            if let Some(MetaKey::TenantInfo { tenant }) = MetaKey::parse(&kv.key) {
                let record: TenantRecord = keys::decode(&kv.key, &kv.value)?;
                if tenant == DEFAULT_TENANT {
                    out[0] = record;
                } else {
                    out.push(record);
                }
            }
        }
        Ok(out)
    }

    /// Gives every tenant that owns records but has no tenant record (made
    /// before tenants had records) one, so that it keeps working.
    pub async fn adopt_tenants(&self) -> Result<Vec<String>, AuthError> {
        let listing = self.store.list(&keys::tenants_prefix()).await?;
        let mut named = std::collections::BTreeSet::new();
        let mut recorded = std::collections::BTreeSet::new();
        for kv in &listing.kvs {
            match MetaKey::parse(&kv.key) {
                Some(MetaKey::TenantInfo { tenant }) => {
                    recorded.insert(tenant);
                }
                // What a live changefeed or a plugin keeps (a removed
                // changefeed leaves only its info, as a tombstone).
                Some(
                    MetaKey::Plugin { tenant, .. }
                    | MetaKey::ChangefeedStatus { tenant, .. }
                    | MetaKey::TaskPosition { tenant, .. },
                ) => {
                    named.insert(tenant);
                }
                _ => {}
            }
        }
        let mut adopted = Vec::new();
        for tenant in named.difference(&recorded) {
            if tenant == DEFAULT_TENANT {
                continue;
            }
            let key = keys::tenant_info(tenant).map_err(invalid)?;
            let put = Txn::new()
                .when([Compare::absent(&key)])
                .and_then([Op::put(&key, keys::encode(&TenantRecord::new(tenant, 0))?)]);
            if self.store.txn(put).await?.succeeded {
                adopted.push(tenant.clone());
            }
        }
        Ok(adopted)
    }

    /// Removes `tenant` and its tokens. The caller has checked that it owns
    /// no changefeed and no plugin; records found under it anyway refuse
    /// the removal.
    pub async fn remove_tenant(&self, tenant: &str) -> Result<TenantRecord, AuthError> {
        if tenant == DEFAULT_TENANT {
            return Err(AuthError::InUse(
                "the tenant `default` cannot be removed".into(),
            ));
        }
        let record = self.require(tenant).await?;
        let info = keys::tenant_info(tenant).map_err(invalid)?;
        let prefix = keys::tenant_prefix(tenant).map_err(invalid)?;
        let owned = self.store.list(&prefix).await?;
        // A removed changefeed's info stays as the owner's tombstone; what
        // else a tenant owns refuses the removal.
        let live = |key: &str| {
            key != info && !matches!(MetaKey::parse(key), Some(MetaKey::ChangefeedInfo { .. }))
        };
        if let Some(kv) = owned.kvs.iter().find(|kv| live(&kv.key)) {
            return Err(AuthError::InUse(format!(
                "tenant `{tenant}` still owns {}; remove its changefeeds and plugins first",
                kv.key.strip_prefix(&prefix).unwrap_or(&kv.key)
            )));
        }
        // Its tokens first (a token of a tenant that is gone never works:
        // the authenticator also checks that its tenant exists), then the
        // record.
        for token in self.list_tokens(Some(tenant)).await? {
            self.store
                .delete(&keys::token(&token.id).map_err(invalid)?)
                .await?;
        }
        self.store.delete(&info).await?;
        Ok(record)
    }

    /// Makes a token of `role` in `tenant` (which must exist).
    pub async fn create_token(
        &self,
        tenant: &str,
        role: Role,
        expires_at_ms: Option<u64>,
        description: &str,
        now_ms: u64,
    ) -> Result<TokenGrant, AuthError> {
        self.require(tenant).await?;
        if let Some(at) = expires_at_ms
            && at <= now_ms
        {
            return Err(AuthError::Invalid(
                "the expiry is in the past; give a time to come".into(),
            ));
        }
        if description.len() > 256 || description.chars().any(char::is_control) {
            return Err(AuthError::Invalid(
                "a token's description is at most 256 bytes of printable text".into(),
            ));
        }
        let (secret, sha256) = TokenSecret::generate()?;
        let record = TokenRecord {
            version: 1,
            id: secret.id().to_string(),
            tenant: tenant.to_string(),
            role,
            sha256,
            created_at_ms: now_ms,
            expires_at_ms,
            revoked_at_ms: None,
            description: description.to_string(),
        };
        self.put_new(&record).await?;
        Ok(TokenGrant { secret, record })
    }

    async fn put_new(&self, record: &TokenRecord) -> Result<(), AuthError> {
        let key = keys::token(&record.id).map_err(invalid)?;
        let put = Txn::new()
            .when([Compare::absent(&key)])
            .and_then([Op::put(&key, keys::encode(record)?)]);
        if !self.store.txn(put).await?.succeeded {
            // 64 random bits collided, or the same token was restored twice.
            return Err(AuthError::AlreadyExists(format!(
                "token {} exists already",
                record.id
            )));
        }
        Ok(())
    }

    /// The record of token `id`.
    pub async fn get_token(&self, id: &str) -> Result<Option<TokenRecord>, AuthError> {
        let key = keys::token(id).map_err(invalid)?;
        match self.store.get(&key).await? {
            Some(kv) => Ok(Some(keys::decode(&key, &kv.value)?)),
            None => Ok(None),
        }
    }

    /// The tokens of `tenant` (every token for `None`), by id.
    pub async fn list_tokens(&self, tenant: Option<&str>) -> Result<Vec<TokenRecord>, AuthError> {
        let listing = self.store.list(&keys::tokens_prefix()).await?;
        let mut out = Vec::new();
        for kv in &listing.kvs {
            let record: TokenRecord = keys::decode(&kv.key, &kv.value)?;
            if tenant.is_none_or(|t| t == record.tenant) {
                out.push(record);
            }
        }
        Ok(out)
    }

    /// Revokes token `id`: it never works again. Revoking a revoked token
    /// changes nothing.
    pub async fn revoke_token(&self, id: &str, now_ms: u64) -> Result<TokenRecord, AuthError> {
        let key = keys::token(id).map_err(invalid)?;
        loop {
            let Some(kv) = self.store.get(&key).await? else {
                return Err(AuthError::NotFound(format!("no token {id}")));
            };
            let mut record: TokenRecord = keys::decode(&key, &kv.value)?;
            if record.revoked_at_ms.is_some() {
                return Ok(record);
            }
            record.revoked_at_ms = Some(now_ms);
            let put = Txn::new()
                .when([Compare::mod_revision(&key, kv.mod_revision)])
                .and_then([Op::put(&key, keys::encode(&record)?)]);
            if self.store.txn(put).await?.succeeded {
                return Ok(record);
            }
        }
    }

    /// The server's first admin token: read from `<data_dir>/admin-token`,
    /// or made and written there (mode 0600) on the first start. Its record
    /// is put back if the meta store lost it (a store replaced, or the
    /// token written just before a crash); a revoked one stays revoked.
    /// Returns the file and whether the token works.
    pub async fn bootstrap_admin(
        &self,
        data_dir: &Path,
        now_ms: u64,
    ) -> Result<(PathBuf, bool), AuthError> {
        let path = data_dir.join(ADMIN_TOKEN_FILE);
        let io = |source| AuthError::Io {
            path: path.display().to_string(),
            source,
        };
        let secret = match std::fs::read_to_string(&path) {
            Ok(text) => TokenSecret::parse(&text).map_err(|_| {
                io(std::io::Error::other(
                    "this is not a Sluice token; delete the file to have the server make a new one",
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let (secret, _) = TokenSecret::generate()?;
                write_private(&path, secret.reveal()).map_err(io)?;
                secret
            }
            Err(e) => return Err(io(e)),
        };
        match self.get_token(secret.id()).await? {
            Some(record) if !record.matches(secret.secret()) => Err(io(std::io::Error::other(
                "the meta store holds another secret under this token's id; delete the file to have the server make a new one",
            ))),
            Some(record) => Ok((path, record.revoked_at_ms.is_none())),
            None => {
                let record = TokenRecord {
                    version: 1,
                    id: secret.id().to_string(),
                    tenant: DEFAULT_TENANT.to_string(),
                    role: Role::Admin,
                    sha256: crate::token::hex(&<sha2::Sha256 as sha2::Digest>::digest(
                        secret.secret().as_bytes(),
                    )),
                    created_at_ms: now_ms,
                    expires_at_ms: None,
                    revoked_at_ms: None,
                    description: "the server's first admin token".into(),
                };
                self.put_new(&record).await?;
                Ok((path, true))
            }
        }
    }
}

/// Writes `text` to `path` readable by its owner only, whole or not at all.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Turns a request's `authorization` header into a [`Caller`]. Token records
/// are read from the meta store and kept for a second, so a token revoked on
/// another server stops working within a second (at once on this one).
pub struct Authenticator {
    tenancy: Tenancy,
    cache: Mutex<HashMap<String, (TokenRecord, Instant)>>,
}

impl Authenticator {
    /// Checks tokens against the records of `tenancy`.
    pub fn new(tenancy: Tenancy) -> Self {
        Self {
            tenancy,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The caller of a request whose `authorization` header is `header`
    /// (`Bearer <token>`), at `now_ms`; each refusal says why, never with
    /// the secret.
    pub async fn authenticate(
        &self,
        header: Option<&str>,
        now_ms: u64,
    ) -> Result<Caller, AuthError> {
        let header = header.map(str::trim).filter(|h| !h.is_empty()).ok_or_else(|| {
            AuthError::Unauthenticated(
                "no token: send the header `authorization: Bearer <token>` (sluice cli reads --token-file, SLUICE_TOKEN or <data-dir>/admin-token)".into(),
            )
        })?;
        let token = match header.split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token,
            _ => {
                return Err(AuthError::Unauthenticated(
                    "the authorization header must be `Bearer <token>`".into(),
                ));
            }
        };
        let secret = TokenSecret::parse(token)?;
        let record = self.record(secret.id()).await?;
        let invalid = || {
            AuthError::Unauthenticated(
                "the token is not valid: no such token, or a wrong secret".into(),
            )
        };
        let record = record
            .filter(|r| r.matches(secret.secret()))
            .ok_or_else(invalid)?;
        if let Some(at) = record.revoked_at_ms {
            return Err(AuthError::Unauthenticated(format!(
                "token {} was revoked at {}",
                record.id,
                rfc3339(at)
            )));
        }
        if let Some(at) = record.expires_at_ms
            && now_ms >= at
        {
            return Err(AuthError::Unauthenticated(format!(
                "token {} expired at {}",
                record.id,
                rfc3339(at)
            )));
        }
        Ok(Caller::new(record.id, record.tenant, record.role))
    }

    async fn record(&self, id: &str) -> Result<Option<TokenRecord>, AuthError> {
        validate_name(NameKind::Token, id).map_err(invalid)?;
        if let Some((record, at)) = self.lock().get(id)
            && at.elapsed() < CACHE_TTL
        {
            return Ok(Some(record.clone()));
        }
        let record = self.tenancy.get_token(id).await?;
        // A token whose tenant was removed is gone with it.
        let record = match record {
            Some(r) if self.tenancy.get_tenant(&r.tenant).await?.is_some() => Some(r),
            _ => None,
        };
        if let Some(r) = &record {
            let mut cache = self.lock();
            if cache.len() >= CACHE_ENTRIES {
                cache.clear();
            }
            cache.insert(id.to_string(), (r.clone(), Instant::now()));
        }
        Ok(record)
    }

    /// Drops what this server remembers of token `id` (after a revoke or a
    /// tenant's removal), so the change holds here at once.
    pub fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Drops every remembered token.
    pub fn forget_all(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (TokenRecord, Instant)>> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_meta::EmbeddedMetaStore;

    async fn tenancy() -> (Tenancy, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedMetaStore::open(dir.path().join("meta.redb"))
            .await
            .unwrap();
        (Tenancy::new(Arc::new(store)), dir)
    }

    fn bearer(t: &TokenSecret) -> String {
        format!("Bearer {}", t.reveal())
    }

    #[tokio::test]
    async fn a_token_authenticates_until_it_is_revoked_or_expires() {
        let (t, _dir) = tenancy().await;
        t.create_tenant("acme", 1).await.unwrap();
        let auth = Authenticator::new(t.clone());
        let now = 1_000_000;
        let grant = t
            .create_token("acme", Role::Viewer, Some(now + 10), "ci", now)
            .await
            .unwrap();
        let caller = auth
            .authenticate(Some(&bearer(&grant.secret)), now)
            .await
            .unwrap();
        assert_eq!(
            caller,
            Caller::new(grant.record.id.clone(), "acme", Role::Viewer)
        );
        let e = auth
            .authenticate(Some(&bearer(&grant.secret)), now + 10)
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("token {} expired at 1970-01-01T00:16:40Z", grant.record.id)
        );
        t.revoke_token(&grant.record.id, now + 1).await.unwrap();
        auth.forget(&grant.record.id);
        let e = auth
            .authenticate(Some(&bearer(&grant.secret)), now)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("was revoked"), "{e}");
        // Revoking again changes nothing.
        let again = t.revoke_token(&grant.record.id, now + 5).await.unwrap();
        assert_eq!(again.revoked_at_ms, Some(now + 1));
    }

    #[tokio::test]
    async fn a_wrong_secret_and_an_unknown_id_get_the_same_answer() {
        let (t, _dir) = tenancy().await;
        let auth = Authenticator::new(t.clone());
        let grant = t
            .create_token("default", Role::Admin, None, "", 1)
            .await
            .unwrap();
        let forged = format!("Bearer sluice_{}_{}", grant.record.id, "0".repeat(64));
        let (unknown, _) = TokenSecret::generate().unwrap();
        let a = auth.authenticate(Some(&forged), 2).await.unwrap_err();
        let b = auth
            .authenticate(Some(&bearer(&unknown)), 2)
            .await
            .unwrap_err();
        assert_eq!(a.to_string(), b.to_string());
        assert_eq!(
            a.to_string(),
            "the token is not valid: no such token, or a wrong secret"
        );
        for (header, starts) in [
            (None, "no token"),
            (Some(""), "no token"),
            (Some("Basic abc"), "the authorization header must be"),
            (Some("Bearer nope"), "the token is malformed"),
        ] {
            let e = auth.authenticate(header, 2).await.unwrap_err();
            assert!(e.to_string().starts_with(starts), "{header:?}: {e}");
        }
    }

    #[tokio::test]
    async fn tenants_are_created_listed_and_removed_with_their_tokens() {
        let (t, _dir) = tenancy().await;
        assert!(matches!(
            t.create_token("acme", Role::Viewer, None, "", 1).await,
            Err(AuthError::NotFound(_))
        ));
        t.create_tenant("acme", 5).await.unwrap();
        assert!(matches!(
            t.create_tenant("acme", 6).await,
            Err(AuthError::AlreadyExists(_))
        ));
        assert!(matches!(
            t.create_tenant("default", 6).await,
            Err(AuthError::AlreadyExists(_))
        ));
        let quota = TenantQuota {
            max_changefeeds: Some(3),
            ..TenantQuota::default()
        };
        assert_eq!(
            t.set_quota("acme", quota.clone()).await.unwrap().quota,
            quota
        );
        assert_eq!(t.require("acme").await.unwrap().quota, quota);
        assert_eq!(
            t.set_quota("default", quota.clone()).await.unwrap().quota,
            quota
        );
        assert_eq!(t.require("default").await.unwrap().quota, quota);
        assert!(matches!(
            t.set_quota("nobody", quota.clone()).await,
            Err(AuthError::NotFound(_))
        ));
        let names: Vec<String> = t
            .list_tenants()
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, ["default", "acme"]);
        let grant = t
            .create_token("acme", Role::TenantAdmin, None, "", 7)
            .await
            .unwrap();
        assert_eq!(t.list_tokens(Some("acme")).await.unwrap().len(), 1);
        assert_eq!(t.list_tokens(Some("default")).await.unwrap().len(), 0);
        t.remove_tenant("acme").await.unwrap();
        assert!(t.get_token(&grant.record.id).await.unwrap().is_none());
        let auth = Authenticator::new(t.clone());
        assert!(
            auth.authenticate(Some(&bearer(&grant.secret)), 8)
                .await
                .is_err()
        );
        assert!(matches!(
            t.remove_tenant("default").await,
            Err(AuthError::InUse(_))
        ));
    }

    #[tokio::test]
    async fn the_first_admin_token_is_written_once_private_and_restored_if_the_store_lost_it() {
        use std::os::unix::fs::PermissionsExt;
        let (t, dir) = tenancy().await;
        let (path, works) = t.bootstrap_admin(dir.path(), 1).await.unwrap();
        assert!(works);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let text = std::fs::read_to_string(&path).unwrap();
        let secret = TokenSecret::parse(&text).unwrap();
        let auth = Authenticator::new(t.clone());
        let caller = auth.authenticate(Some(&bearer(&secret)), 2).await.unwrap();
        assert_eq!(caller.role, Role::Admin);
        // Started again: the same token.
        t.bootstrap_admin(dir.path(), 3).await.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        // A fresh store with the old data dir: the record comes back.
        let other = tempfile::tempdir().unwrap();
        let fresh = Tenancy::new(Arc::new(
            EmbeddedMetaStore::open(other.path().join("meta.redb"))
                .await
                .unwrap(),
        ));
        fresh.bootstrap_admin(dir.path(), 4).await.unwrap();
        assert!(fresh.get_token(secret.id()).await.unwrap().is_some());
        // Revoked: stays revoked.
        t.revoke_token(secret.id(), 5).await.unwrap();
        let (_, works) = t.bootstrap_admin(dir.path(), 6).await.unwrap();
        assert!(!works);
    }

    #[tokio::test]
    async fn tenants_with_records_but_no_tenant_record_are_adopted() {
        let (t, _dir) = tenancy().await;
        // A removed changefeed's tombstone adopts nothing; its status does.
        let tombstone = keys::changefeed_info("gone", "feed").unwrap();
        t.store.put(&tombstone, b"{}".to_vec(), None).await.unwrap();
        let key = keys::changefeed_status("old", "feed").unwrap();
        t.store.put(&key, b"{}".to_vec(), None).await.unwrap();
        assert!(t.get_tenant("old").await.unwrap().is_none());
        assert_eq!(t.adopt_tenants().await.unwrap(), ["old"]);
        assert!(t.get_tenant("old").await.unwrap().is_some());
        assert!(t.adopt_tenants().await.unwrap().is_empty());
        assert!(matches!(
            t.remove_tenant("old").await,
            Err(AuthError::InUse(_))
        ));
    }
}
