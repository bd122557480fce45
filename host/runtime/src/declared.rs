//! What a plugin declares about itself in a custom section of its component:
//! `sluice:limits`, UTF-8 `key = value` lines. Today one key is read:
//! `memory = BYTES`, the linear memory the plugin needs to run at the
//! pipeline's batch sizes (a JavaScript engine's heap is larger than a Rust
//! plugin's). It is a default, never a grant: a quota the changefeed's config
//! gives wins, and what is filled in is charged to the tenant like any quota
//! (see `sluice_config::Limits::resolve_memory`). Unknown keys are ignored, so
//! a newer build can declare more.

/// The custom section's name.
pub const LIMITS_SECTION: &str = "sluice:limits";

/// The memory a component declares it needs, in bytes (`None`: nothing
/// declared). Only the component's own top-level sections are read.
pub(crate) fn declared_memory(bytes: &[u8]) -> Result<Option<u64>, String> {
    let Some(text) = top_level_custom_section(bytes, LIMITS_SECTION)? else {
        return Ok(None);
    };
    let text = std::str::from_utf8(text)
        .map_err(|_| format!("the {LIMITS_SECTION} section is not UTF-8"))?;
    for line in text.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if key.trim() == "memory" {
            let value = value.trim();
            return value.parse::<u64>().map(Some).map_err(|_| {
                format!("the {LIMITS_SECTION} section declares memory = {value:?}: not a number of bytes")
            });
        }
    }
    Ok(None)
}

/// The payload of the first top-level custom section called `name`.
fn top_level_custom_section<'a>(bytes: &'a [u8], name: &str) -> Result<Option<&'a [u8]>, String> {
    let malformed = || "malformed section header".to_string();
    let mut at = 8; // magic and version/layer
    while at < bytes.len() {
        let id = bytes[at];
        at += 1;
        let size = leb_u32(bytes, &mut at).ok_or_else(malformed)? as usize;
        let end = at
            .checked_add(size)
            .filter(|&e| e <= bytes.len())
            .ok_or_else(malformed)?;
        if id == 0 {
            let mut p = at;
            let len = leb_u32(bytes, &mut p).ok_or_else(malformed)? as usize;
            let name_end = p
                .checked_add(len)
                .filter(|&e| e <= end)
                .ok_or_else(malformed)?;
            if &bytes[p..name_end] == name.as_bytes() {
                return Ok(Some(&bytes[name_end..end]));
            }
        }
        at = end;
    }
    Ok(None)
}

fn leb_u32(bytes: &[u8], at: &mut usize) -> Option<u32> {
    let mut value = 0u32;
    for shift in (0..35).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        value |= u32::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// `component` with a `sluice:limits` section appended that declares
/// `memory` (what a build tool does; tests use it).
pub fn with_declared_memory(component: &[u8], memory: u64) -> Vec<u8> {
    let payload = format!("memory = {memory}\n");
    let mut section = Vec::new();
    leb_push(&mut section, LIMITS_SECTION.len() as u32);
    section.extend_from_slice(LIMITS_SECTION.as_bytes());
    section.extend_from_slice(payload.as_bytes());
    let mut out = component.to_vec();
    out.push(0);
    leb_push(&mut out, section.len() as u32);
    out.extend_from_slice(&section);
    out
}

fn leb_push(out: &mut Vec<u8>, mut v: u32) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

    #[test]
    fn a_declared_memory_reads_back_and_other_sections_are_skipped() {
        let mut bytes = EMPTY_COMPONENT.to_vec();
        // An unrelated custom section first.
        bytes.extend_from_slice(&[0, 6, 5, b'o', b't', b'h', b'e', b'r']);
        let bytes = with_declared_memory(&bytes, 128 << 20);
        assert_eq!(declared_memory(&bytes), Ok(Some(128 << 20)));
        assert_eq!(declared_memory(EMPTY_COMPONENT), Ok(None));
    }

    #[test]
    fn a_malformed_declaration_is_an_error_not_a_default() {
        let mut bytes = EMPTY_COMPONENT.to_vec();
        let payload = b"memory = lots\n";
        let mut section = vec![LIMITS_SECTION.len() as u8];
        section.extend_from_slice(LIMITS_SECTION.as_bytes());
        section.extend_from_slice(payload);
        bytes.push(0);
        bytes.push(section.len() as u8);
        bytes.extend_from_slice(&section);
        let err = declared_memory(&bytes).unwrap_err();
        assert!(err.contains("memory = \"lots\""), "{err}");
        // A section that runs past the end.
        let mut truncated = EMPTY_COMPONENT.to_vec();
        truncated.extend_from_slice(&[0, 0x7f, 1]);
        assert_eq!(
            declared_memory(&truncated),
            Err("malformed section header".into())
        );
    }
}
