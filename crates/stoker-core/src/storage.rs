//! Aligned, pooled byte buffers that back dense tensors.
//!
//! Buffers are 64-byte aligned (so any dtype can be viewed in place, and vector code can use
//! aligned whole-cache-line stores) and, when taken from a
//! [`BufferPool`], go back to it when the last tensor viewing them is dropped — batch buffers
//! are reused instead of being allocated (and page-faulted) again for every batch.
//!
//! Batches come from [`batch_pool`], which can be switched to memory that a device runtime
//! gives ([`HostMemory`]: CUDA's page-locked host memory), so that a copy to the device reads
//! the batch where the engine wrote it, with no staging copy into pinned memory.

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, RwLock, Weak};

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

/// Cache lines allocated (zeroed, lazily by the OS for large buffers) for `lines` lines. Each
/// is in an `UnsafeCell`: the rows of a batch are written from several threads while the
/// buffer is shared (see [`Storage::write_ptr`]).
fn zeroed_lines(lines: usize) -> Vec<UnsafeCell<Line>> {
    bytemuck::zeroed_vec(lines)
}

/// Host memory that something other than the heap hands out: page-locked memory of a device
/// runtime (`cudaHostAlloc`), which the device's copy engines read directly.
pub trait HostMemory: Send + Sync + std::fmt::Debug {
    /// `len` bytes (a multiple of 64), 64-byte aligned, or `None` when the runtime cannot give
    /// them (the pool then takes heap memory).
    fn allocate(&self, len: usize) -> Option<NonNull<u8>>;

    /// Gives back what [`HostMemory::allocate`] gave.
    ///
    /// # Safety
    /// `ptr` came from `self.allocate(len)`, was not freed yet, and nothing uses it any more.
    unsafe fn free(&self, ptr: NonNull<u8>, len: usize);
}

/// The bytes behind a [`Storage`]: heap cache lines, or memory of a [`HostMemory`].
enum Memory {
    Heap(Vec<UnsafeCell<Line>>),
    Host {
        ptr: NonNull<u8>,
        /// The bytes allocated (a whole number of lines).
        len: usize,
        from: Arc<dyn HostMemory>,
    },
}

// SAFETY: a `Memory` owns its allocation exclusively, as a `Vec` owns its buffer: it is only
// reached through the `Memory` (and the `Storage` holding it); the `HostMemory` that frees it
// is `Send + Sync`.
unsafe impl Send for Memory {}
// SAFETY: shared references read the bytes, except through `Storage::write_ptr`, whose callers
// write only byte ranges that no one else reads or writes meanwhile (the rows of a batch, each
// filled by one thread: `RowSlots`, `RowWrite`); the bytes are in `UnsafeCell`s (or host
// memory reached only by raw pointer), so writing them through a shared `Memory` is allowed.
unsafe impl Sync for Memory {}

impl Memory {
    /// Bytes allocated.
    fn capacity(&self) -> usize {
        match self {
            Memory::Heap(lines) => lines.len() * LINE,
            Memory::Host { len, .. } => *len,
        }
    }

    /// The start of the bytes, writable where no one else reads or writes them (the lines
    /// are `UnsafeCell`s).
    fn as_ptr(&self) -> *mut u8 {
        match self {
            Memory::Heap(lines) => UnsafeCell::raw_get(lines.as_ptr()).cast(),
            Memory::Host { ptr, .. } => ptr.as_ptr(),
        }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        if let Memory::Host { ptr, len, from } = self {
            // SAFETY: `ptr` came from `from.allocate(len)` (the only way a `Memory::Host` is
            // made, in `BufferPool::take`) and is dropped once, here, when nothing views it.
            unsafe { from.free(*ptr, *len) };
        }
    }
}

/// A buffer of `len` bytes, 64-byte aligned.
pub struct Storage {
    memory: Memory,
    len: usize,
    pool: Option<Weak<BufferPool>>,
}

impl Storage {
    /// A zero-filled buffer of `len` bytes.
    pub fn zeroed(len: usize) -> Storage {
        Storage {
            memory: Memory::Heap(zeroed_lines(len.div_ceil(LINE))),
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

    /// Whether the bytes are memory of a [`HostMemory`] (page-locked for a device).
    pub fn is_host_memory(&self) -> bool {
        matches!(self.memory, Memory::Host { .. })
    }

    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: the memory holds at least `len` bytes (heap lines are zero-initialised; host
        // memory is taken only by `BufferPool::take`, whose callers overwrite every byte, and
        // any bit pattern is a valid `u8`); the shared borrow of `self` keeps writers out.
        unsafe { std::slice::from_raw_parts(self.memory.as_ptr(), self.len) }
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_bytes`, with the exclusive borrow of `self` for the writes.
        unsafe { std::slice::from_raw_parts_mut(self.memory.as_ptr(), self.len) }
    }

    /// The start of the bytes, for writing disjoint parts of one shared buffer from several
    /// threads (the rows of a batch: [`crate::row_slots`], `exec::batch`). It is taken without
    /// making a reference to the bytes, which are `UnsafeCell`s, so writes through it are
    /// allowed beside [`Storage::bytes`] views of other parts. Crate-private: a writer must
    /// own the range it writes, which only the batch's row bookkeeping guarantees.
    pub(crate) fn write_ptr(&self) -> *mut u8 {
        self.memory.as_ptr()
    }

    /// The start of the bytes, without making a reference to them. The bytes are
    /// `UnsafeCell`s: the owner of a storage no one else views (an exclusive tensor handed to
    /// NumPy as a writable array) may write through this pointer.
    pub fn as_ptr(&self) -> *const u8 {
        self.memory.as_ptr()
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
        // the pointer is taken without a reference to the whole buffer, and the range is only
        // read while it is borrowed (writers of a range own it exclusively).
        unsafe { std::slice::from_raw_parts(self.as_ptr().add(offset), len) }
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take().and_then(|p| p.upgrade()) {
            let memory = std::mem::replace(&mut self.memory, Memory::Heap(Vec::new()));
            pool.give_back(memory);
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
    /// Where new buffers come from when not from the heap.
    host: Option<Arc<dyn HostMemory>>,
}

#[derive(Default)]
struct Free {
    /// Oldest first.
    buffers: VecDeque<Memory>,
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

/// What a pool of device-runtime memory keeps at most: the batches in flight between the
/// engine, the prefetch queues and the copies to the device, for batches of 224x224 float
/// images. Page-locked memory is costly to allocate and to free (freeing waits for the
/// device), so it is kept rather than given back.
const HOST_POOL_BYTES: usize = 2 << 30;

/// The pool that native ops take their output buffers from. Buffers come back when the last
/// tensor (or NumPy array) viewing them is dropped, so steady-state elements and batches
/// reuse memory that is already mapped instead of page-faulting fresh allocations, also from
/// one epoch to the next.
pub fn shared_pool() -> &'static Arc<BufferPool> {
    static POOL: std::sync::OnceLock<Arc<BufferPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| BufferPool::new(SHARED_POOL_BYTES))
}

static BATCH_POOL: RwLock<Option<Arc<BufferPool>>> = RwLock::new(None);

/// The pool that batches take their buffers from: the [`shared_pool`], or, after
/// [`set_batch_memory`], a pool of that memory.
pub fn batch_pool() -> Arc<BufferPool> {
    let pool = BATCH_POOL.read().unwrap_or_else(|e| e.into_inner());
    Arc::clone(pool.as_ref().unwrap_or_else(|| shared_pool()))
}

/// Makes batches made from now on (iterators started before keep their pool) take their
/// buffers from `memory`, or from the heap again with `None`. Buffers of the pool before stay
/// valid; they are freed when the last view of them goes.
pub fn set_batch_memory(memory: Option<Arc<dyn HostMemory>>) {
    let pool = memory.map(|m| BufferPool::with_memory(HOST_POOL_BYTES, m));
    *BATCH_POOL.write().unwrap_or_else(|e| e.into_inner()) = pool;
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
    /// A pool of heap buffers that keeps at most `max_bytes` of idle ones.
    pub fn new(max_bytes: usize) -> Arc<BufferPool> {
        Arc::new(BufferPool {
            free: Mutex::new(Free::default()),
            max_bytes,
            host: None,
        })
    }

    /// A pool of `memory`'s buffers that keeps at most `max_bytes` of idle ones. When
    /// `memory` cannot give a buffer, the pool hands out a heap buffer instead (and does not
    /// keep it).
    pub fn with_memory(max_bytes: usize, memory: Arc<dyn HostMemory>) -> Arc<BufferPool> {
        Arc::new(BufferPool {
            free: Mutex::new(Free::default()),
            max_bytes,
            host: Some(memory),
        })
    }

    /// A buffer of `len` bytes. Its content is unspecified (old data of a reused buffer): the
    /// caller overwrites every byte.
    pub fn take(self: &Arc<Self>, len: usize) -> Storage {
        let lines = size_class(len.div_ceil(LINE));
        let bytes = lines * LINE;
        let reused = {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            // The most recently freed match: likely still in cache.
            let found = free.buffers.iter().rposition(|m| m.capacity() == bytes);
            found.and_then(|i| free.buffers.remove(i)).inspect(|m| {
                free.bytes -= m.capacity();
            })
        };
        let memory = reused
            .or_else(|| self.allocate(bytes))
            .unwrap_or_else(|| Memory::Heap(zeroed_lines(lines)));
        Storage {
            memory,
            len,
            pool: Some(Arc::downgrade(self)),
        }
    }

    /// `bytes` (a whole number of lines) of the pool's host memory, zeroed.
    fn allocate(&self, bytes: usize) -> Option<Memory> {
        let from = self.host.as_ref().filter(|_| bytes > 0)?;
        let ptr = from.allocate(bytes)?;
        let memory = Memory::Host {
            ptr,
            len: bytes,
            from: Arc::clone(from),
        };
        if ptr.as_ptr() as usize % LINE != 0 {
            return None; // freed as it drops
        }
        // SAFETY: `allocate` gave `bytes` writable bytes at `ptr`. Zeroed once, so that the
        // bytes are initialised before any slice of them is made.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, bytes) };
        Some(memory)
    }

    fn give_back(&self, memory: Memory) {
        let size = memory.capacity();
        if size > self.max_bytes || (self.host.is_some() && matches!(memory, Memory::Heap(_))) {
            return;
        }
        let mut evicted = Vec::new();
        {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            free.bytes += size;
            free.buffers.push_back(memory);
            while free.bytes > self.max_bytes {
                match free.buffers.pop_front() {
                    Some(old) => {
                        free.bytes -= old.capacity();
                        evicted.push(old);
                    }
                    None => break,
                }
            }
        }
        // Freed outside the lock: freeing page-locked memory waits for the device.
        drop(evicted);
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

    /// Host memory from the global allocator, page-aligned as `cudaHostAlloc`'s, that counts
    /// what it hands out and gets back, and refuses once `limit` allocations are live.
    #[derive(Debug, Default)]
    struct Counted {
        live: Mutex<Vec<(usize, usize)>>,
        allocations: std::sync::atomic::AtomicUsize,
        limit: usize,
    }

    impl HostMemory for Counted {
        fn allocate(&self, len: usize) -> Option<NonNull<u8>> {
            let mut live = self.live.lock().unwrap();
            if live.len() >= self.limit {
                return None;
            }
            let layout = std::alloc::Layout::from_size_align(len, 4096).ok()?;
            // SAFETY: `len` > 0 (the pool asks for no empty buffers).
            let ptr = NonNull::new(unsafe { std::alloc::alloc(layout) })?;
            // Poisoned, so that the test sees the pool zero it.
            // SAFETY: `len` bytes were just allocated at `ptr`.
            unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0xAB, len) };
            live.push((ptr.as_ptr() as usize, len));
            self.allocations
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Some(ptr)
        }

        unsafe fn free(&self, ptr: NonNull<u8>, len: usize) {
            let mut live = self.live.lock().unwrap();
            let at = live
                .iter()
                .position(|&a| a == (ptr.as_ptr() as usize, len))
                .expect("freed what was allocated, once");
            live.remove(at);
            let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
            // SAFETY: allocated above with this layout and not freed yet (it was live).
            unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
        }
    }

    #[test]
    fn host_memory_pools_are_reused_and_freed() {
        let memory = Arc::new(Counted {
            limit: 3,
            ..Counted::default()
        });
        let live = |m: &Counted| m.live.lock().unwrap().len();
        let pool = BufferPool::with_memory(300_000, Arc::clone(&memory) as Arc<dyn HostMemory>);
        let mut a = pool.take(100_000);
        assert!(a.is_host_memory());
        assert!(
            a.as_bytes().iter().all(|&b| b == 0),
            "zeroed when allocated"
        );
        a.as_bytes_mut().fill(7);
        let ptr = a.as_ptr();
        drop(a);
        let b = pool.take(100_000);
        assert_eq!(b.as_ptr(), ptr, "reused, not allocated again");
        assert_eq!(
            memory
                .allocations
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        let (c, d) = (pool.take(100_000), pool.take(100_000));
        assert!(c.is_host_memory() && d.is_host_memory());
        // The runtime refuses a fourth: the pool hands out heap memory, and does not keep it.
        let e = pool.take(100_000);
        assert!(!e.is_host_memory());
        assert_eq!(e.len(), 100_000);
        drop(e);
        assert_eq!(pool.idle(), 0);
        // Idle over the bound (3 x 102,400 bytes > 300,000): the oldest is freed.
        drop((b, c, d));
        assert_eq!((pool.idle(), live(&memory)), (2, 2));
        // A buffer alive when its pool goes is freed when it goes.
        let f = pool.take(100_000);
        drop(pool);
        assert_eq!(live(&memory), 1);
        assert!(f.is_host_memory());
        drop(f);
        assert_eq!(live(&memory), 0);
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
