//! The buffer a log file is encoded into: its bytes start on a block
//! boundary, so a flush writes it past the page cache (`O_DIRECT`) from where
//! it was encoded, with no copy (see `storage::DirectWrites`). A `Vec<u8>`
//! cannot promise that: jemalloc, for one, starts a large allocation at a
//! random cache line of its first page.

/// The unit of a write past the page cache: its buffer's address, its length
/// and its offset in the file are multiples of it (4 KiB serves devices of
/// 512-byte and 4 KiB blocks).
pub(crate) const BLOCK: usize = 4096;

/// One block of an aligned buffer (the copy buffer of writes past the page
/// cache).
#[derive(Clone, Copy, bytemuck::Zeroable, bytemuck::Pod)]
#[repr(C, align(4096))]
pub(crate) struct Block(pub(crate) [u8; BLOCK]);

/// The least a buffer maps (a DDL log's file is small).
const MIN_MAP: usize = 64 << 10;

/// Pages of this size back a buffer of at least this size where the system
/// offers them (Linux's transparent huge pages): a 16 MiB file then costs 8
/// page faults as it is first filled, not 4,096.
#[cfg(target_os = "linux")]
const HUGE_PAGE: usize = 2 << 20;

/// A growable byte buffer whose first byte is block-aligned: an anonymous
/// memory mapping (page-aligned, its pages zeroed by the system as they are
/// first touched, so nothing is written twice), grown by mapping twice the
/// size and copying (rare: a buffer is kept and reused for the next files).
#[derive(Default)]
pub(crate) struct FileBuf {
    map: Option<memmap2::MmapMut>,
    len: usize,
}

impl FileBuf {
    /// A buffer that holds `bytes` without growing.
    pub(crate) fn with_capacity(bytes: usize) -> Self {
        let mut buf = Self::default();
        if bytes > 0 {
            buf.grow_to(bytes);
        }
        buf
    }

    /// Bytes in it.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Nothing in it.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes it holds without growing.
    pub(crate) fn capacity(&self) -> usize {
        self.map.as_ref().map_or(0, |m| m.len())
    }

    /// Empties it, keeping its memory.
    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }

    /// Keeps the first `len` bytes.
    pub(crate) fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Its bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        self.map.as_ref().map_or(&[], |m| &m[..self.len])
    }

    /// Its bytes, to change in place.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.map {
            Some(m) => &mut m[..self.len],
            None => &mut [],
        }
    }

    /// Appends `bytes`.
    pub(crate) fn extend_from_slice(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        if end > self.capacity() {
            self.grow_to(end.max(self.capacity() * 2));
        }
        let map = self.map.as_mut().expect("grown");
        map[self.len..end].copy_from_slice(bytes);
        self.len = end;
    }

    /// Appends one byte.
    pub(crate) fn push(&mut self, byte: u8) {
        self.extend_from_slice(&[byte]);
    }

    /// Maps at least `bytes` (whole blocks) and moves the contents there.
    fn grow_to(&mut self, bytes: usize) {
        let size = bytes.max(MIN_MAP).div_ceil(BLOCK) * BLOCK;
        // A buffer is memory the writer needs; running out of address space
        // is as fatal here as a failed allocation.
        let mut map = memmap2::MmapMut::map_anon(size)
            .unwrap_or_else(|e| panic!("mapping {size} bytes for a redo log file: {e}"));
        #[cfg(target_os = "linux")]
        if size >= HUGE_PAGE {
            // Advice only: where huge pages are off, small ones serve.
            let _ = map.advise(memmap2::Advice::HugePage);
        }
        if let Some(old) = &self.map {
            map[..self.len].copy_from_slice(&old[..self.len]);
        }
        self.map = Some(map);
    }
}

impl std::fmt::Debug for FileBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileBuf")
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_stay_aligned_and_whole_as_the_buffer_grows_and_is_reused() {
        let mut buf = FileBuf::default();
        let mut want = Vec::new();
        for i in 0..20_000u32 {
            let piece = i.to_le_bytes();
            let piece = &piece[..(i % 4 + 1) as usize];
            buf.extend_from_slice(piece);
            want.extend_from_slice(piece);
            if i % 7 == 0 {
                buf.push(i as u8);
                want.push(i as u8);
            }
            assert_eq!(buf.as_slice().as_ptr() as usize % BLOCK, 0);
            assert!(buf.capacity() % BLOCK == 0 && buf.capacity() >= buf.len());
        }
        assert_eq!(buf.as_slice(), &want[..]);
        assert!(buf.capacity() >= buf.len());
        buf.as_mut_slice()[0] = 0xff;
        want[0] = 0xff;
        buf.truncate(100);
        assert_eq!(buf.as_slice(), &want[..100]);
        let capacity = buf.capacity();
        buf.clear();
        assert!(buf.is_empty());
        buf.extend_from_slice(b"again");
        assert_eq!(buf.as_slice(), b"again");
        assert_eq!(buf.capacity(), capacity, "kept, not grown");
        // Made to size: no growth while it fills to that size.
        let mut buf = FileBuf::with_capacity(3 << 20);
        let capacity = buf.capacity();
        assert!(capacity >= 3 << 20);
        let piece = vec![7u8; 1000];
        while buf.len() + piece.len() <= 3 << 20 {
            buf.extend_from_slice(&piece);
        }
        assert_eq!(buf.capacity(), capacity);
        assert!(buf.as_slice().iter().all(|&b| b == 7));
        assert_eq!(FileBuf::default().as_slice(), b"");
    }
}
