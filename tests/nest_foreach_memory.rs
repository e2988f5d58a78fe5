//! A `ForEach` holds memory for its instances in flight, not for its items: with
//! `max_concurrency = 64` and a `()` output, the peak heap of a run over 100,000 items stays
//! within a bound that does not grow with the item count: at most a quarter above the peak
//! over 10,000 items. (One byte kept per item would add about 110 KiB, against a peak of about
//! 110 KiB made of the 64 instances and the runtime's buffers.)
//!
//! A counting global allocator measures the live heap bytes; the runs are on a
//! `current_thread` runtime built here, so no other thread allocates while they run. One test
//! only in this file: the allocator counts the whole process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use flowdag::prelude::*;

/// Counts the live heap bytes and their peak; the work is the system allocator's.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(size: usize) {
    let live = LIVE.fetch_add(size, Relaxed) + size;
    PEAK.fetch_max(live, Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's arguments, so `System`'s
// guarantees hold; the counters are only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Relaxed);
            }
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One item's work: yields once, so that the instances stay in flight together.
async fn touch(_item: u64) -> Result<(), Infallible> {
    tokio::task::yield_now().await;
    Ok(())
}

workflow! {
    /// `items` items, 64 instances at a time, each with a `()` output.
    Items(items: u64) -> usize {
        all = ForEach(item in 0..items, max_concurrency = 64) {
            Operation(touch(item))
            => ()
        }
        => all.len()
    }
}

/// The most heap bytes a run over `items` items held at once, above what was live before it.
fn peak_of(rt: &tokio::runtime::Runtime, items: u64) -> usize {
    let before = LIVE.load(Relaxed);
    PEAK.store(before, Relaxed);
    let done = rt.block_on(Items::run(items));
    let peak = PEAK.load(Relaxed) - before;
    assert_eq!(done.ok(), Some(items as usize));
    peak
}

#[test]
fn the_peak_heap_of_a_foreach_does_not_grow_with_its_items() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current_thread runtime");
    // A warm-up run: the runtime's and the thread's first allocations are not the ForEach's.
    peak_of(&rt, 1_000);
    let small = peak_of(&rt, 10_000);
    let large = peak_of(&rt, 100_000);
    eprintln!("peak heap: 10,000 items {small} B, 100,000 items {large} B");
    assert!(
        small > 0,
        "the run allocated nothing: the allocator is not counting"
    );
    assert!(
        large <= small + small / 4,
        "the peak grew with the items: {small} B for 10,000 items, {large} B for 100,000"
    );
}
