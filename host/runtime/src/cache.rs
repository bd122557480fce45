//! Precompiled artifacts, keyed by the component's sha256 and the engine's
//! compatibility hash, so a changed engine never loads a stale artifact.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::error::RuntimeError;

/// A directory of `.cwasm` files written by this host.
pub(crate) struct PrecompileCache {
    dir: PathBuf,
    engine_key: String,
}

/// Hex sha256 of `bytes`.
pub(crate) fn digest(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

impl PrecompileCache {
    pub(crate) fn open(dir: &Path, engine: &Engine) -> Result<Self, RuntimeError> {
        std::fs::create_dir_all(dir).map_err(|source| RuntimeError::Cache {
            path: dir.display().to_string(),
            source,
        })?;
        let mut h = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        Ok(Self {
            dir: dir.to_path_buf(),
            engine_key: format!("{:016x}", h.finish()),
        })
    }

    fn path(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}-{}.cwasm", self.engine_key))
    }

    /// The cached component, if there is a usable artifact.
    pub(crate) fn get(&self, engine: &Engine, digest: &str) -> Option<Component> {
        let path = self.path(digest);
        // Read into memory rather than mapping the file, so that a cache file
        // truncated behind our back cannot fault the process later.
        let artifact = std::fs::read(&path).ok()?;
        // SAFETY: the cache directory holds only artifacts this host wrote with
        // `Engine::precompile_component` (file names carry the engine's
        // compatibility hash); nothing else is ever deserialized. wasmtime checks
        // the header, version and engine settings before using the bytes.
        match unsafe { Component::deserialize(engine, &artifact) } {
            Ok(c) => Some(c),
            Err(err) => {
                tracing::warn!(path = %path.display(), error = %err, "Cached artifact is unusable; recompiling.");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Store an artifact (atomically: write, then rename).
    pub(crate) fn put(&self, digest: &str, artifact: &[u8]) {
        let path = self.path(digest);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let result = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            std::io::Write::write_all(&mut f, artifact)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(err) = result {
            tracing::warn!(path = %path.display(), error = %err, "Could not cache a precompiled artifact.");
            let _ = std::fs::remove_file(&tmp);
        }
    }
}
