//! Precompiled artifacts, keyed by the component's sha256 and the engine's
//! compatibility hash, so a changed engine never loads a stale artifact. The
//! directory is bounded in bytes: past the bound the least recently used
//! artifacts go (a later load compiles again), and artifacts of another engine
//! go at open (no build of this engine can load them).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::error::RuntimeError;

/// A directory of `.cwasm` files written by this host.
pub(crate) struct PrecompileCache {
    dir: PathBuf,
    engine_key: String,
    max_bytes: u64,
}

/// The suffix of a precompiled artifact's file name.
const ARTIFACT: &str = ".cwasm";

/// Marks `path` as just used (its modification time is the recency
/// [`trim_cache_dir`] goes by); a failure only makes it look older.
pub fn mark_used(path: &Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// Removes the least recently used (oldest modification time) files of `dir`
/// whose names end with `suffix` until they take at most `max_bytes`, keeping
/// the most recent one whatever its size; returns the bytes removed. Files
/// whose name holds `.tmp` (a write a crash interrupted) go too.
pub fn trim_cache_dir(dir: &Path, suffix: &str, max_bytes: u64) -> std::io::Result<u64> {
    let mut files = Vec::new();
    let mut removed = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        if name.contains(".tmp") {
            if std::fs::remove_file(entry.path()).is_ok() {
                removed += meta.len();
            }
        } else if name.ends_with(suffix) {
            let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            files.push((used, meta.len(), entry.path()));
        }
    }
    let mut total: u64 = files.iter().map(|(_, len, _)| len).sum();
    files.sort();
    // The newest stays.
    files.pop();
    for (_, len, path) in files {
        if total <= max_bytes {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            tracing::debug!(path = %path.display(), bytes = len, "Removed the least recently used file of a bounded cache.");
            total -= len;
            removed += len;
        }
    }
    Ok(removed)
}

/// Hex sha256 of `bytes`.
pub(crate) fn digest(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

impl PrecompileCache {
    /// The cache in `dir` (created if missing), at most `max_bytes` of
    /// artifacts (the most recent one whatever its size).
    pub(crate) fn open(dir: &Path, engine: &Engine, max_bytes: u64) -> Result<Self, RuntimeError> {
        let io = |source| RuntimeError::Cache {
            path: dir.display().to_string(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut h = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let cache = Self {
            dir: dir.to_path_buf(),
            engine_key: format!("{:016x}", h.finish()),
            max_bytes,
        };
        // Another engine's artifacts can never be loaded by this one.
        let ours = format!("-{}{ARTIFACT}", cache.engine_key);
        for entry in std::fs::read_dir(dir).map_err(io)?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(ARTIFACT) && !name.ends_with(&ours) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        cache.trim();
        Ok(cache)
    }

    fn trim(&self) {
        if let Err(err) = trim_cache_dir(&self.dir, ARTIFACT, self.max_bytes) {
            tracing::warn!(path = %self.dir.display(), error = %err, "Could not bound the cache of precompiled artifacts.");
        }
    }

    fn path(&self, digest: &str) -> PathBuf {
        self.dir
            .join(format!("{digest}-{}{ARTIFACT}", self.engine_key))
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
            Ok(c) => {
                mark_used(&path);
                Some(c)
            }
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
        self.trim();
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    /// A file of `len` bytes last used `age_s` seconds ago.
    fn file(dir: &Path, name: &str, len: usize, age_s: u64) {
        let path = dir.join(name);
        std::fs::write(&path, vec![0u8; len]).unwrap();
        let f = std::fs::File::options().append(true).open(&path).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(age_s))
            .unwrap();
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut n: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    }

    #[test]
    fn a_bounded_cache_loses_its_least_recently_used_files_first() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        file(d, "a.cwasm", 400, 40);
        file(d, "b.cwasm", 400, 30);
        file(d, "c.cwasm", 400, 20);
        file(d, "other.txt", 4000, 50);
        file(d, "d.cwasm.tmp77", 10, 0);
        // `a` was just used: `b` is now the oldest.
        mark_used(&d.join("a.cwasm"));
        let removed = trim_cache_dir(d, ".cwasm", 800).unwrap();
        assert_eq!(removed, 410, "b and the torn temporary file");
        assert_eq!(names(d), ["a.cwasm", "c.cwasm", "other.txt"]);
        // Under its bound, nothing goes.
        assert_eq!(trim_cache_dir(d, ".cwasm", 800).unwrap(), 0);
        // The most recent stays, however large.
        file(d, "big.cwasm", 5000, 0);
        trim_cache_dir(d, ".cwasm", 800).unwrap();
        assert_eq!(names(d), ["big.cwasm", "other.txt"]);
    }
}
