//! The redo meta: where the log stands, in one small file replaced whole.
//!
//! `checkpoint_ts`: every row at or below it is downstream (the changefeed's
//! checkpoint when the meta was written); files wholly below it may go.
//! `resolved_ts`: every event at or below it is in the log, durably: `redo
//! apply` brings a downstream to exactly the upstream state at it. Always
//! `checkpoint_ts <= resolved_ts`.
//!
//! Layout: the magic `SLUICEMT`, the format version (u16 LE), then one framed
//! record as in a log file (length, CRC32C, payload).

use serde::{Deserialize, Serialize};

use crate::format::FRAME_LEN;

/// The first bytes of a meta file.
pub const META_MAGIC: &[u8; 8] = b"SLUICEMT";
/// The version of the meta's layout (the log files' format has its own).
pub const META_VERSION: u16 = 1;
/// The meta file's name in a changefeed's redo directory.
pub const META_FILE: &str = "meta";

/// Where a redo log stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Meta {
    /// Every row at or below it is downstream.
    pub checkpoint_ts: u64,
    /// Every event at or below it is in the log.
    pub resolved_ts: u64,
}

/// A meta file that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the redo meta is damaged: {0}")]
pub struct MetaDamage(pub String);

impl Meta {
    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let payload = postcard::to_stdvec(self).expect("a meta always encodes");
        let mut out = Vec::with_capacity(10 + FRAME_LEN + payload.len());
        out.extend_from_slice(META_MAGIC);
        out.extend_from_slice(&META_VERSION.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        out.extend_from_slice(&payload);
        out
    }

    /// Reads a meta file's bytes; any damage is an error.
    pub fn decode(bytes: &[u8]) -> Result<Self, MetaDamage> {
        let fail = |why: &str| Err(MetaDamage(why.to_string()));
        if bytes.len() < 10 + FRAME_LEN {
            return fail("it is shorter than its header");
        }
        if &bytes[..8] != META_MAGIC {
            return fail("it is not a Sluice redo meta (wrong magic)");
        }
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        if version != META_VERSION {
            return Err(MetaDamage(format!(
                "format version {version}; this build reads version {META_VERSION}"
            )));
        }
        let len = u32::from_le_bytes(bytes[10..14].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[14..18].try_into().expect("4 bytes"));
        let payload = &bytes[18..];
        if payload.len() != len {
            return Err(MetaDamage(format!(
                "its payload has {} bytes, its header says {len}",
                payload.len()
            )));
        }
        if crc32c::crc32c(payload) != crc {
            return fail("it fails its CRC32C check");
        }
        let meta: Meta = postcard::from_bytes(payload)
            .map_err(|e| MetaDamage(format!("it does not decode: {e}")))?;
        if meta.checkpoint_ts > meta.resolved_ts {
            return Err(MetaDamage(format!(
                "its checkpoint ts {} is above its resolved ts {}",
                meta.checkpoint_ts, meta.resolved_ts
            )));
        }
        Ok(meta)
    }
}
