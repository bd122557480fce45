//! The buffer a log file is encoded into: its bytes start on a block
//! boundary, so a flush writes it past the page cache (`O_DIRECT`) from where
//! it was encoded, with no copy (see `storage::DirectWrites`). A `Vec<u8>`
//! cannot promise that: jemalloc, for one, starts a large allocation at a
//! random cache line of its first page.

/// The unit of a write past the page cache: its buffer's address, its length
/// and its offset in the file are multiples of it (4 KiB serves devices of
/// 512-byte and 4 KiB blocks).
pub(crate) const BLOCK: usize = 4096;

/// One block of an aligned buffer.
#[derive(Clone, Copy, bytemuck::Zeroable, bytemuck::Pod)]
#[repr(C, align(4096))]
pub(crate) struct Block(pub(crate) [u8; BLOCK]);

/// A growable byte buffer whose first byte is block-aligned.
#[derive(Default)]
pub(crate) struct FileBuf {
    blocks: Vec<Block>,
    len: usize,
}

impl FileBuf {
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
        self.blocks.len() * BLOCK
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
        &bytemuck::cast_slice(&self.blocks)[..self.len]
    }

    /// Its bytes, to change in place.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.blocks)[..self.len]
    }

    /// Appends `bytes`.
    pub(crate) fn extend_from_slice(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        if end > self.capacity() {
            // Doubling, as a Vec grows; the new blocks are zeroed once (a
            // buffer is kept and reused, so this is rare after the first
            // files).
            let blocks = end.div_ceil(BLOCK).max(self.blocks.len() * 2).max(16);
            self.blocks.resize(blocks, Block([0; BLOCK]));
        }
        bytemuck::cast_slice_mut(&mut self.blocks)[self.len..end].copy_from_slice(bytes);
        self.len = end;
    }

    /// Appends one byte.
    pub(crate) fn push(&mut self, byte: u8) {
        self.extend_from_slice(&[byte]);
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
    }
}
