//! A counting global allocator, in this binary only: the scale run's
//! heap profile of parked waiters (`scale/parked.rs`) reads what the
//! `scale-waiters` process has live (bytes asked for, bytes the allocator
//! really reserved, allocations by size) before and after parking.
//!
//! Counting is off unless [`enable`] was called (the `scale-waiters`
//! process calls it first thing): every other run of this binary pays one
//! relaxed load per allocation.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// The size classes of the histogram: 16-byte steps up to [`TOP`], then
/// one bucket for everything larger.
const STEP: usize = 16;
const TOP: usize = 4096;
const BUCKETS: usize = TOP / STEP + 1;

static ON: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicI64 = AtomicI64::new(0);
static LIVE_USABLE: AtomicI64 = AtomicI64::new(0);
static COUNT: AtomicI64 = AtomicI64::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicI64 = AtomicI64::new(0);
static BY_SIZE: [AtomicI64; BUCKETS] = [ZERO; BUCKETS];
static BYTES_BY_SIZE: [AtomicI64; BUCKETS] = [ZERO; BUCKETS];

/// The system allocator, counting while [`enable`]d.
pub struct Counting;

/// What the allocator really reserved for a block of `size` bytes.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn usable(ptr: *mut u8, _size: usize) -> usize {
    unsafe extern "C" {
        fn malloc_usable_size(ptr: *mut std::ffi::c_void) -> usize;
    }
    // SAFETY: `ptr` is a live block from the system allocator (glibc's
    // malloc, which `System` uses for every alignment up to 16).
    unsafe { malloc_usable_size(ptr.cast()) }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn usable(_ptr: *mut u8, size: usize) -> usize {
    size
}

fn note(ptr: *mut u8, size: usize, sign: i64) {
    if ptr.is_null() || !ON.load(Ordering::Relaxed) {
        return;
    }
    let bucket = (size.div_ceil(STEP)).min(BUCKETS - 1);
    LIVE.fetch_add(sign * size as i64, Ordering::Relaxed);
    LIVE_USABLE.fetch_add(sign * usable(ptr, size) as i64, Ordering::Relaxed);
    COUNT.fetch_add(sign, Ordering::Relaxed);
    BY_SIZE[bucket].fetch_add(sign, Ordering::Relaxed);
    BYTES_BY_SIZE[bucket].fetch_add(sign * size as i64, Ordering::Relaxed);
}

// SAFETY: every call is passed to `System` unchanged; the counting only
// reads the block's size.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as the caller's.
        let ptr = unsafe { System.alloc(layout) };
        note(ptr, layout.size(), 1);
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as the caller's.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        note(ptr, layout.size(), 1);
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(ptr, layout.size(), -1);
        // SAFETY: as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(ptr, layout.size(), -1);
        // SAFETY: as the caller's.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if new.is_null() {
            note(ptr, layout.size(), 1); // the old block stays
        } else {
            note(new, new_size, 1);
        }
        new
    }
}

/// Starts counting (allocations made before are not seen, nor their
/// frees).
pub fn enable() {
    ON.store(true, Ordering::SeqCst);
}

/// What is live now (counted since [`enable`]).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Bytes asked for.
    pub bytes: i64,
    /// Bytes the allocator reserved for them (`malloc_usable_size`).
    pub usable: i64,
    /// Blocks.
    pub blocks: i64,
    /// Per size class (`(class upper bound in bytes, blocks, bytes)`,
    /// the last class open-ended), only the non-empty ones.
    pub by_size: Vec<(usize, i64, i64)>,
}

/// Reads the counters.
pub fn snapshot() -> Snapshot {
    Snapshot {
        bytes: LIVE.load(Ordering::SeqCst),
        usable: LIVE_USABLE.load(Ordering::SeqCst),
        blocks: COUNT.load(Ordering::SeqCst),
        by_size: (0..BUCKETS)
            .map(|b| {
                (
                    b * STEP,
                    BY_SIZE[b].load(Ordering::SeqCst),
                    BYTES_BY_SIZE[b].load(Ordering::SeqCst),
                )
            })
            .filter(|(_, n, _)| *n != 0)
            .collect(),
    }
}

impl Snapshot {
    /// One line: `heap BYTES USABLE BLOCKS class:blocks:bytes ...`.
    pub fn line(&self) -> String {
        let classes: Vec<String> = self
            .by_size
            .iter()
            .map(|(c, n, b)| format!("{c}:{n}:{b}"))
            .collect();
        format!(
            "heap {} {} {} {}",
            self.bytes,
            self.usable,
            self.blocks,
            classes.join(" ")
        )
    }

    /// Parses [`line`](Self::line).
    pub fn parse(line: &str) -> Option<Snapshot> {
        let mut words = line.strip_prefix("heap ")?.split_whitespace();
        let mut num = || words.next()?.parse::<i64>().ok();
        let (bytes, usable, blocks) = (num()?, num()?, num()?);
        let by_size = line
            .split_whitespace()
            .skip(4)
            .filter_map(|w| {
                let mut p = w.split(':');
                Some((
                    p.next()?.parse().ok()?,
                    p.next()?.parse().ok()?,
                    p.next()?.parse().ok()?,
                ))
            })
            .collect();
        Some(Snapshot {
            bytes,
            usable,
            blocks,
            by_size,
        })
    }
}
