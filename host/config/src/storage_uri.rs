//! Where a changefeed's redo log is kept: `file:///dir` or
//! `s3://bucket/prefix?endpoint=...&region=...` (TiCDC's query keys). Parsed
//! here, with no I/O; `sluice-redo` opens it.

use std::path::PathBuf;

/// Where a redo log is kept, parsed from `storage = "file:///dir"` or
/// `storage = "s3://bucket/prefix?endpoint=...&region=..."`.
#[derive(Clone, PartialEq, Eq)]
pub enum StorageUri {
    /// A local directory.
    Local(PathBuf),
    /// A bucket (and a prefix in it) of S3 or an S3-compatible store.
    S3(S3Location),
}

/// An S3 location and how to reach it. Keys not in the URI come from the
/// environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT_URL`); the secret is never
/// printed (not by `Display`, not by `Debug`).
#[derive(Clone, PartialEq, Eq)]
pub struct S3Location {
    /// The bucket.
    pub bucket: String,
    /// The prefix in it (no leading or trailing `/`); may be empty.
    pub prefix: String,
    /// An endpoint other than AWS's (`http://127.0.0.1:9000`).
    pub endpoint: Option<String>,
    /// The region.
    pub region: Option<String>,
    /// The access key id.
    pub access_key: Option<String>,
    secret_key: Option<String>,
    session_token: Option<String>,
    /// Bucket in the host name (`bucket.endpoint`) rather than the path.
    pub virtual_hosted: bool,
}

/// The query keys an `s3://` URI may carry (TiCDC's names).
const S3_KEYS: &[&str] = &[
    "endpoint",
    "region",
    "access-key",
    "secret-access-key",
    "session-token",
    "force-path-style",
];

impl S3Location {
    /// Parses `s3://bucket/prefix?key=value&...`.
    pub fn parse(uri: &str) -> Result<Self, String> {
        // The URI may hold a secret: errors name the part, never echo it all.
        // (Checked before parsing, which would resolve `..` away.)
        let raw_path = uri.split(['?', '#']).next().unwrap_or_default();
        if raw_path.split('/').skip(3).any(|p| p == "." || p == "..") {
            return Err("the prefix of an s3:// URI may not have a `.` or `..` part".into());
        }
        let url =
            url::Url::parse(uri).map_err(|e| format!("an s3:// URI that does not parse: {e}"))?;
        let bucket = url.host_str().unwrap_or_default().to_string();
        if bucket.is_empty() {
            return Err("an s3:// URI names a bucket: s3://bucket/prefix".into());
        }
        if !url.username().is_empty() || url.password().is_some() || url.port().is_some() {
            return Err(
                "an s3:// URI has no user, password or port; give access-key and \
                 secret-access-key as query keys or in the environment, the port in endpoint"
                    .into(),
            );
        }
        let prefix = url.path().trim_matches('/').to_string();
        if prefix.split('/').any(|p| p == "." || p == "..") || prefix.contains("//") {
            return Err(format!(
                "the prefix {prefix:?} of an s3:// URI has an empty, `.` or `..` part"
            ));
        }
        let mut loc = Self {
            bucket,
            prefix,
            endpoint: None,
            region: None,
            access_key: None,
            secret_key: None,
            session_token: None,
            virtual_hosted: false,
        };
        for (key, value) in url.query_pairs() {
            let value = value.into_owned();
            match key.as_ref() {
                "endpoint" => {
                    if !(value.starts_with("http://") || value.starts_with("https://")) {
                        return Err(format!(
                            "endpoint {value:?} of an s3:// URI is an http:// or https:// URL"
                        ));
                    }
                    loc.endpoint = Some(value.trim_end_matches('/').to_string());
                }
                "region" => loc.region = Some(value),
                "access-key" => loc.access_key = Some(value),
                "secret-access-key" => loc.secret_key = Some(value),
                "session-token" => loc.session_token = Some(value),
                "force-path-style" => {
                    loc.virtual_hosted = match value.as_str() {
                        "true" | "1" => false,
                        "false" | "0" => true,
                        _ => {
                            return Err(format!(
                                "force-path-style is true or false, not {value:?}"
                            ));
                        }
                    }
                }
                other => {
                    return Err(format!(
                        "an s3:// URI has no key {other:?}; it takes {}",
                        S3_KEYS.join(", ")
                    ));
                }
            }
        }
        Ok(loc)
    }

    /// Whether the URI itself carries a secret key.
    pub fn has_secret(&self) -> bool {
        self.secret_key.is_some() || self.session_token.is_some()
    }

    /// The secret access key the URI carries (never print it).
    pub fn secret_key(&self) -> Option<&str> {
        self.secret_key.as_deref()
    }

    /// The session token the URI carries (never print it).
    pub fn session_token(&self) -> Option<&str> {
        self.session_token.as_deref()
    }
}

impl std::fmt::Display for S3Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}", self.bucket)?;
        if !self.prefix.is_empty() {
            write!(f, "/{}", self.prefix)?;
        }
        if let Some(e) = &self.endpoint {
            write!(f, " at {e}")?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for S3Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Location")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key", &self.access_key)
            .field(
                "secret_key",
                &self.secret_key.as_ref().map(|_| "<redacted>"),
            )
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .field("virtual_hosted", &self.virtual_hosted)
            .finish()
    }
}

impl std::fmt::Debug for StorageUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StorageUri::Local(p) => f.debug_tuple("Local").field(p).finish(),
            StorageUri::S3(l) => f.debug_tuple("S3").field(l).finish(),
        }
    }
}

impl StorageUri {
    /// Parses a storage URI; the error says what is accepted (and never
    /// repeats a secret the URI holds).
    pub fn parse(uri: &str) -> Result<Self, String> {
        if let Some(path) = uri.strip_prefix("file://") {
            if path.is_empty() || !path.starts_with('/') {
                return Err(format!(
                    "`{uri}`: a file URI names an absolute directory, e.g. file:///var/lib/sluice/redo"
                ));
            }
            return Ok(StorageUri::Local(PathBuf::from(path)));
        }
        if uri.starts_with("s3://") {
            return S3Location::parse(uri).map(StorageUri::S3);
        }
        Err(
            "a storage location is a file:// URI (file:///dir) or an s3:// URI \
             (s3://bucket/prefix?endpoint=...&region=...)"
                .into(),
        )
    }

    /// The same location one level down, for log `name` in it.
    pub fn child(&self, name: &str) -> Self {
        match self {
            StorageUri::Local(p) => StorageUri::Local(p.join(name)),
            StorageUri::S3(l) => {
                let mut l = l.clone();
                l.prefix = if l.prefix.is_empty() {
                    name.to_string()
                } else {
                    format!("{}/{name}", l.prefix)
                };
                StorageUri::S3(l)
            }
        }
    }

    /// The location one level up and the last part's name: for a URI that
    /// names one changefeed's log. `None` at the root.
    pub fn split_last(&self) -> Option<(Self, String)> {
        match self {
            StorageUri::Local(p) => {
                let (parent, name) = (p.parent()?, p.file_name()?);
                Some((
                    StorageUri::Local(parent.to_path_buf()),
                    name.to_string_lossy().into_owned(),
                ))
            }
            StorageUri::S3(l) => {
                if l.prefix.is_empty() {
                    return None;
                }
                let mut up = l.clone();
                let (parent, name) = match l.prefix.rsplit_once('/') {
                    Some((p, n)) => (p.to_string(), n.to_string()),
                    None => (String::new(), l.prefix.clone()),
                };
                up.prefix = parent;
                Some((StorageUri::S3(up), name))
            }
        }
    }
}

impl std::fmt::Display for StorageUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StorageUri::Local(p) => write!(f, "file://{}", p.display()),
            StorageUri::S3(l) => l.fmt(f),
        }
    }
}
