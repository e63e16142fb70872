//! Aligned, pooled byte buffers that back dense tensors.
//!
//! Buffers are 64-byte aligned (so any dtype can be viewed in place, and vector code can use
//! aligned whole-cache-line stores) and, when taken from a
//! [`BufferPool`], go back to it when the last tensor viewing them is dropped — batch buffers
//! are reused instead of being allocated (and page-faulted) again for every batch.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};

/// One cache line: the unit buffers are allocated in, which makes them 64-byte aligned.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

// SAFETY: `Line` is 64 plain bytes with no padding (size 64 = align 64), for which every bit
// pattern, zeros included, is valid.
unsafe impl bytemuck::Zeroable for Line {}
// SAFETY: as above; it is `Copy` and `'static`.
unsafe impl bytemuck::Pod for Line {}

const LINE: usize = std::mem::size_of::<Line>();

/// Cache lines allocated (zeroed, lazily by the OS for large buffers) for `lines` lines.
fn zeroed_lines(lines: usize) -> Vec<Line> {
    bytemuck::zeroed_vec(lines)
}

/// A heap buffer of `len` bytes, 64-byte aligned.
pub struct Storage {
    lines: Vec<Line>,
    len: usize,
    pool: Option<Weak<BufferPool>>,
}

impl Storage {
    /// A zero-filled buffer of `len` bytes.
    pub fn zeroed(len: usize) -> Storage {
        Storage {
            lines: zeroed_lines(len.div_ceil(LINE)),
            len,
            pool: None,
        }
    }

    /// A buffer holding a copy of `bytes`.
    pub fn copy_from(bytes: &[u8]) -> Storage {
        let mut s = Storage::zeroed(bytes.len());
        s.as_bytes_mut().copy_from_slice(bytes);
        s
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<Line, u8>(&self.lines)[..self.len]
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut::<Line, u8>(&mut self.lines)[..self.len]
    }

    /// The start of the bytes, for writing disjoint parts of one buffer from several threads
    /// (batch rows). It is taken without making a reference to the bytes, so it stays valid
    /// beside [`Storage::bytes`] views of other parts (as `Vec::as_mut_ptr` documents).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.lines.as_mut_ptr().cast()
    }

    /// The start of the bytes, without making a reference to them.
    pub fn as_ptr(&self) -> *const u8 {
        self.lines.as_ptr().cast()
    }

    /// Bytes `offset..offset + len`. Only that range is borrowed: other parts of the buffer
    /// may be being written meanwhile (the other rows of a batch being filled).
    ///
    /// # Panics
    /// If the range is not inside the buffer (tensors check their range when made).
    pub fn bytes(&self, offset: usize, len: usize) -> &[u8] {
        let end = offset.checked_add(len);
        assert!(
            end.is_some_and(|end| end <= self.len),
            "bytes {offset}+{len} of a {}-byte storage",
            self.len
        );
        // SAFETY: the range is inside the buffer's `len` initialised bytes (checked above);
        // the pointer comes from the Vec without a reference to the whole buffer, and the
        // range is only read while it is borrowed (writers of a range own it exclusively).
        unsafe { std::slice::from_raw_parts(self.as_ptr().add(offset), len) }
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take().and_then(|p| p.upgrade()) {
            pool.give_back(std::mem::take(&mut self.lines));
        }
    }
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Storage({} bytes)", self.len)
    }
}

/// Keeps freed buffers, up to a total size, for reuse by buffers of the same size; when
/// full, the buffers freed longest ago go first.
#[derive(Debug)]
pub struct BufferPool {
    free: Mutex<Free>,
    max_bytes: usize,
}

#[derive(Default)]
struct Free {
    /// Oldest first.
    buffers: VecDeque<Vec<Line>>,
    bytes: usize,
}

impl std::fmt::Debug for Free {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} buffers, {} bytes", self.buffers.len(), self.bytes)
    }
}

/// What the shared pool keeps at most: a few batches of 224x224 float images, or many
/// decoded images.
const SHARED_POOL_BYTES: usize = 512 << 20;

/// The pool that native ops and batches take their output buffers from. Buffers come back
/// when the last tensor (or NumPy array) viewing them is dropped, so steady-state elements
/// and batches reuse memory that is already mapped instead of page-faulting fresh
/// allocations, also from one epoch to the next.
pub fn shared_pool() -> &'static Arc<BufferPool> {
    static POOL: std::sync::OnceLock<Arc<BufferPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| BufferPool::new(SHARED_POOL_BYTES))
}

/// Buffers of 64 KiB and more are allocated in size classes, four per power of two (at most
/// 25 % unused), so that elements of varying sizes (say, decoded crops) reuse each other's
/// buffers instead of filling the pool with sizes that never come back, which would push the
/// large batch buffers out of it.
fn size_class(lines: usize) -> usize {
    const EXACT_BELOW: usize = (64 << 10) / LINE;
    if lines < EXACT_BELOW {
        return lines;
    }
    let step = 1usize << (usize::BITS - 1 - lines.leading_zeros() - 2);
    lines.div_ceil(step) * step
}

impl BufferPool {
    /// A pool that keeps at most `max_bytes` of idle buffers.
    pub fn new(max_bytes: usize) -> Arc<BufferPool> {
        Arc::new(BufferPool {
            free: Mutex::new(Free::default()),
            max_bytes,
        })
    }

    /// A buffer of `len` bytes. Its content is unspecified (old data of a reused buffer): the
    /// caller overwrites every byte.
    pub fn take(self: &Arc<Self>, len: usize) -> Storage {
        let lines_needed = size_class(len.div_ceil(LINE));
        let reused = {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            // The most recently freed match: likely still in cache.
            let found = free.buffers.iter().rposition(|w| w.len() == lines_needed);
            found.and_then(|i| free.buffers.remove(i)).inspect(|w| {
                free.bytes -= w.len() * LINE;
            })
        };
        let lines = reused.unwrap_or_else(|| zeroed_lines(lines_needed));
        Storage {
            lines,
            len,
            pool: Some(Arc::downgrade(self)),
        }
    }

    fn give_back(&self, lines: Vec<Line>) {
        let size = lines.len() * LINE;
        if size > self.max_bytes {
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        free.bytes += size;
        free.buffers.push_back(lines);
        while free.bytes > self.max_bytes {
            match free.buffers.pop_front() {
                Some(old) => free.bytes -= old.len() * LINE,
                None => break,
            }
        }
    }

    /// Number of buffers waiting for reuse.
    pub fn idle(&self) -> usize {
        self.free.lock().map(|f| f.buffers.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooled_buffers_are_reused() {
        let pool = BufferPool::new(6000);
        let mut a = pool.take(100);
        a.as_bytes_mut()[0] = 7;
        let ptr = a.as_bytes().as_ptr();
        drop(a);
        assert_eq!(pool.idle(), 1);
        let b = pool.take(100);
        assert_eq!(b.as_bytes().as_ptr(), ptr);
        assert_eq!(pool.idle(), 0);
        // A different size does not take it.
        drop(b);
        let c = pool.take(5000);
        assert_eq!(pool.idle(), 1);
        assert_eq!(c.len(), 5000);
        // Over the byte bound, the buffers freed longest ago go: 128 + 5056 + 1024 > 6000
        // drops the 128- and then the 5056-byte buffer.
        drop(c);
        assert_eq!(pool.idle(), 2);
        let (d, e) = (pool.take(1000), pool.take(1000));
        drop(d);
        assert_eq!(pool.idle(), 1);
        drop(e);
        assert_eq!(pool.idle(), 2);
        let _f = pool.take(5000);
        assert_eq!(pool.idle(), 2, "the 5056-byte buffer was evicted");
    }

    #[test]
    fn large_buffers_of_near_sizes_share_a_class() {
        // In cache lines: exact below 1024 (64 KiB).
        assert_eq!(size_class(100), 100);
        assert_eq!(size_class(1024), 1024);
        assert_eq!(size_class(1025), 1280);
        assert_eq!(size_class(1250), 1280);
        assert_eq!(size_class(1281), 1536);
        for lines in [1024, 1250, 9999, 1 << 20, (1 << 20) + 1, 123_456_789] {
            let class = size_class(lines);
            assert!(
                class >= lines && class - lines <= lines / 4,
                "{lines} -> {class}"
            );
        }
        let pool = BufferPool::new(1 << 30);
        let a = pool.take(70_000 * 16);
        let ptr = a.as_bytes().as_ptr();
        drop(a);
        let b = pool.take(72_000 * 16);
        assert_eq!(
            b.as_bytes().as_ptr(),
            ptr,
            "a slightly larger request reuses the buffer"
        );
        assert_eq!(b.len(), 72_000 * 16);
    }

    #[test]
    fn alignment_is_64() {
        let s = Storage::zeroed(3);
        assert_eq!(s.as_bytes().as_ptr() as usize % 64, 0);
        assert_eq!(s.as_bytes(), &[0, 0, 0]);
        let pool = BufferPool::new(1 << 20);
        assert_eq!(pool.take(100_000).as_bytes().as_ptr() as usize % 64, 0);
        assert_eq!(s.len(), 3);
    }
}
