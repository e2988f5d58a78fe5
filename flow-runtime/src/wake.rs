//! Per-node wakers: when an operation's future is woken, the run is woken too, and on its next
//! poll the scheduler polls that operation, and only the operations woken since.
//!
//! Without them every wake-up of the run polled every running operation: a fan of a thousand
//! I/O calls that finish one at a time made half a million polls (`FuturesUnordered` makes a
//! thousand). Here each node has an [`Entry`] in one shared [`WakeSet`] per run; a node's waker
//! points at its entry, and waking it pushes the node on a lock-free stack (once: a flag keeps
//! it from being pushed twice) and, when the stack was empty, wakes the run's own waker. The
//! scheduler takes the whole stack at the start of each poll.

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::ptr;
use std::sync::{Arc, PoisonError};
use std::task::{RawWaker, RawWakerVTable, Waker};

// The loom model (`.ci/loom`) checks every interleaving of the atomics and the mutex below; the
// set's `Arc` and the wakers' counts stay std's (loom need not model them).
#[cfg(all(test, flow_loom))]
use loom::sync::{
    Mutex,
    atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering},
};
#[cfg(not(all(test, flow_loom)))]
use std::sync::{
    Mutex,
    atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering},
};

/// The end of the stack of woken nodes.
const EMPTY: u32 = u32::MAX;

/// The woken nodes of one run and the run's own waker. Shared by every node waker of the run
/// (each holds a strong count), so a waker that outlives the run stays valid.
pub(crate) struct WakeSet {
    /// The waker of the task polling the run: woken whenever a node is.
    parent: Mutex<Option<Waker>>,
    /// Which waker `parent` holds (its data and vtable pointers), so that the usual poll, by
    /// the same task as the last one, finds it unchanged without taking the lock. Written only
    /// by [`WakeSet::register`], which only the polling side calls.
    parent_data: AtomicPtr<()>,
    parent_vtable: AtomicPtr<RawWakerVTable>,
    /// The last node pushed on the stack of woken nodes (`EMPTY` when none): a Treiber stack
    /// linked through [`Entry::next`]. Nodes are only pushed, and taken all at once.
    head: AtomicU32,
    entries: Box<[Entry]>,
}

/// A node's waker borrowed from its [`WakeSet`] (no strong count of its own): usable only as
/// `&Waker` and only while the set is borrowed.
pub(crate) struct NodeWaker<'a> {
    waker: ManuallyDrop<Waker>,
    _set: PhantomData<&'a WakeSet>,
}

impl Deref for NodeWaker<'_> {
    type Target = Waker;

    #[inline]
    fn deref(&self) -> &Waker {
        &self.waker
    }
}

/// One node's place in its run's [`WakeSet`]: what the node's waker points at.
struct Entry {
    /// The set this entry belongs to: the waker's strong count is on it.
    set: *const WakeSet,
    index: u32,
    /// On the stack, or taken but not yet polled: a second wake has nothing to add.
    woken: AtomicBool,
    /// The node below this one on the stack.
    next: AtomicU32,
    /// Pushed and not yet taken: checks, in debug builds, the invariant the stack relies on
    /// (see [`WakeSet::polling`]).
    #[cfg(debug_assertions)]
    on_stack: AtomicBool,
}

// SAFETY: `set` is only read, to reach the set's atomics and mutex (which are `Sync`) and to
// change its `Arc` strong count; everything else in an entry is atomic.
unsafe impl Send for Entry {}
// SAFETY: as above.
unsafe impl Sync for Entry {}

impl WakeSet {
    /// A set for `len` nodes, none of them woken.
    pub(crate) fn new(len: usize) -> Arc<WakeSet> {
        let entries = (0..len)
            .map(|index| Entry {
                set: ptr::null(),
                index: index as u32,
                woken: AtomicBool::new(false),
                next: AtomicU32::new(EMPTY),
                #[cfg(debug_assertions)]
                on_stack: AtomicBool::new(false),
            })
            .collect();
        let mut set = Arc::new(WakeSet {
            parent: Mutex::new(None),
            parent_data: AtomicPtr::new(ptr::null_mut()),
            parent_vtable: AtomicPtr::new(ptr::null_mut()),
            head: AtomicU32::new(EMPTY),
            entries,
        });
        let at = Arc::as_ptr(&set);
        // Always `Some`: the `Arc` was made just above and has not been shared.
        if let Some(fresh) = Arc::get_mut(&mut set) {
            for entry in fresh.entries.iter_mut() {
                entry.set = at;
            }
        }
        set
    }

    /// Remembers the waker of the task polling the run (clones it only when it changed).
    pub(crate) fn register(&self, waker: &Waker) {
        let data = waker.data().cast_mut();
        let vtable = ptr::from_ref(waker.vtable()).cast_mut();
        if self.parent_data.load(Ordering::Relaxed) == data
            && self.parent_vtable.load(Ordering::Relaxed) == vtable
        {
            // The same waker as last time (what `Waker::will_wake` compares).
            return;
        }
        let mut parent = self.parent.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = waker.clone();
        // The pointers of the waker kept (a clone may have other ones than the original): the
        // check above is then `kept.will_wake(waker)`, and the kept clone keeps its data alive,
        // so no other waker can take that address while it is recorded.
        self.parent_data
            .store(kept.data().cast_mut(), Ordering::Relaxed);
        self.parent_vtable
            .store(ptr::from_ref(kept.vtable()).cast_mut(), Ordering::Relaxed);
        *parent = Some(kept);
    }

    /// Moves every node woken since the last call to the end of `out`, in the order they were
    /// woken. Each stays marked woken until [`WakeSet::polling`]: a wake before then is not
    /// lost, since the node is about to be polled.
    pub(crate) fn take(&self, out: &mut Vec<u32>) {
        if self.head.load(Ordering::Relaxed) == EMPTY {
            return;
        }
        let mut top = self.head.swap(EMPTY, Ordering::Acquire);
        let start = out.len();
        while top != EMPTY {
            out.push(top);
            let entry = &self.entries[top as usize];
            #[cfg(debug_assertions)]
            entry.on_stack.store(false, Ordering::Relaxed);
            top = entry.next.load(Ordering::Relaxed);
        }
        out[start..].reverse();
    }

    /// Marks `node` not woken: called right before the scheduler polls it, so that a wake
    /// during or after that poll pushes it again.
    ///
    /// A swap, not a store: a wake that finds the flag still set pushes nothing, so whatever its
    /// waker saw before waking must be visible to the poll that follows. The swap reads the
    /// flag that wake wrote (acquire), as `FuturesUnordered` does with its `queued` flag.
    ///
    /// The stack relies on one invariant: a node is never on the stack when its flag is cleared
    /// here. The flag is set by the one wake that pushes the node and stays set until this call,
    /// so while the node is on the stack no other wake pushes it; the scheduler calls this only
    /// for a node it took from the stack since that push, or for one whose flag was never set
    /// since its last poll with this waker. Were the flag cleared while the node is still on the
    /// stack, the next wake would push it a second time and overwrite its `next` link, cutting
    /// the stack or closing it into a cycle that [`WakeSet::take`] would walk forever. Debug
    /// builds check it.
    #[inline]
    pub(crate) fn polling(&self, node: u32) {
        let entry = &self.entries[node as usize];
        #[cfg(debug_assertions)]
        debug_assert!(
            !entry.on_stack.load(Ordering::Relaxed),
            "flow internal error: node {node} is polled with its own waker while it is still on \
             the stack of woken nodes"
        );
        entry.woken.swap(false, Ordering::AcqRel);
    }

    /// The waker of `node`, borrowed from the set for as long as the set is borrowed. A future
    /// that keeps it clones it, which takes a strong count.
    #[inline]
    pub(crate) fn waker(&self, node: u32) -> NodeWaker<'_> {
        let entry: *const Entry = &self.entries[node as usize];
        // SAFETY: the vtable's contract holds for an entry of a live set (see `VTABLE`), and the
        // set outlives the returned borrow. The `ManuallyDrop` keeps this borrowed waker from
        // giving back a count it never took; `NodeWaker` hands out only `&Waker`.
        let waker =
            ManuallyDrop::new(unsafe { Waker::from_raw(RawWaker::new(entry.cast(), &VTABLE)) });
        NodeWaker {
            waker,
            _set: PhantomData,
        }
    }

    fn wake(&self, index: u32) {
        let entry = &self.entries[index as usize];
        if entry.woken.swap(true, Ordering::AcqRel) {
            return;
        }
        // Winning the flag gives this wake the only right to push the node, which is not on
        // the stack (the invariant of `polling`).
        #[cfg(debug_assertions)]
        debug_assert!(
            !entry.on_stack.swap(true, Ordering::Relaxed),
            "flow internal error: node {index} is pushed while it is on the stack of woken nodes"
        );
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            entry.next.store(head, Ordering::Relaxed);
            match self
                .head
                .compare_exchange_weak(head, index, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => head = now,
            }
        }
        if head != EMPTY {
            // Whoever pushed on the empty stack woke the run, and the run has not taken the
            // stack since: it will see this node too. (A yielding fan wakes a thousand nodes in
            // one turn; this keeps it to one wake of the run.)
            return;
        }
        // Woken after the lock is released: a waker may run anything, including code that
        // takes this lock again (a `register` from the same thread would deadlock).
        let parent = self
            .parent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(parent) = parent {
            parent.wake();
        }
    }
}

/// A node waker's data pointer is its `*const Entry`; the entry's set is kept alive by one
/// strong count per waker (none for the borrowed wakers of [`WakeSet::waker`]).
static VTABLE: RawWakerVTable =
    RawWakerVTable::new(waker_clone, waker_wake, waker_wake_by_ref, waker_drop);

/// # Safety (all four)
///
/// `data` is a `*const Entry` of a set that is alive: its `Arc` has a strong count that this
/// waker owns, or that the lender of a borrowed waker holds.
unsafe fn waker_clone(data: *const ()) -> RawWaker {
    // SAFETY: see above; the new waker owns the count taken here.
    unsafe {
        let entry = &*data.cast::<Entry>();
        Arc::increment_strong_count(entry.set);
    }
    RawWaker::new(data, &VTABLE)
}

unsafe fn waker_wake(data: *const ()) {
    // SAFETY: see above; `waker_drop` gives back this waker's count after the wake.
    unsafe {
        waker_wake_by_ref(data);
        waker_drop(data);
    }
}

unsafe fn waker_wake_by_ref(data: *const ()) {
    // SAFETY: see above.
    let entry = unsafe { &*data.cast::<Entry>() };
    // SAFETY: the set is alive (see above).
    let set = unsafe { &*entry.set };
    set.wake(entry.index);
}

unsafe fn waker_drop(data: *const ()) {
    // SAFETY: see above. The pointer is read before the count is given back, which may free
    // the set and with it the entry.
    unsafe {
        let set = (*data.cast::<Entry>()).set;
        Arc::decrement_strong_count(set);
    }
}

/// A parent waker that counts its wakes, for the tests and the loom model (with `flow_loom`
/// its atomic is loom's, so loom sees the accesses).
#[cfg(test)]
mod counting {
    #[cfg(flow_loom)]
    use loom::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    #[cfg(not(flow_loom))]
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering;
    use std::task::{Wake, Waker};

    pub(super) struct Count(pub(super) AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    pub(super) fn parent() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }
}

// With `flow_loom` the atomics are loom's, usable only inside a model: see `loom_model`.
#[cfg(all(test, not(flow_loom)))]
mod tests {
    use super::*;
    use crate::wake::counting::parent;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    #[test]
    fn woken_nodes_come_out_once_in_wake_order_and_wake_the_run() {
        let set = WakeSet::new(4);
        let (count, waker) = parent();
        set.register(&waker);
        set.waker(2).wake_by_ref();
        set.waker(0).wake_by_ref();
        set.waker(2).wake_by_ref();
        let mut out = Vec::new();
        set.take(&mut out);
        assert_eq!(out, [2, 0]);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "the run is woken once until it takes the stack"
        );
        set.take(&mut out);
        assert_eq!(out, [2, 0], "nothing new was woken");
        // Until the scheduler polls a node, waking it again adds nothing.
        set.waker(0).wake_by_ref();
        set.take(&mut out);
        assert_eq!(out, [2, 0]);
        set.polling(0);
        set.waker(0).wake_by_ref();
        out.clear();
        set.take(&mut out);
        assert_eq!(out, [0]);
        assert_eq!(count.0.load(Ordering::SeqCst), 2, "a wake after the take");
    }

    #[test]
    fn a_cloned_waker_keeps_the_set_alive_and_wakes_from_another_thread() {
        let set = WakeSet::new(3);
        let (count, waker) = parent();
        set.register(&waker);
        let node: Waker = (*set.waker(1)).clone();
        assert_eq!(Arc::strong_count(&set), 2);
        let weak = Arc::downgrade(&set);
        std::thread::spawn(move || node.wake())
            .join()
            .expect("the waking thread");
        assert_eq!(Arc::strong_count(&set), 1, "wake gave its count back");
        let mut out = Vec::new();
        set.take(&mut out);
        assert_eq!(out, [1]);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        // A clone that outlives the run's own handle still points at a live set.
        let late: Waker = (*set.waker(2)).clone();
        drop(set);
        assert!(weak.upgrade().is_some());
        late.wake_by_ref();
        drop(late);
        assert!(weak.upgrade().is_none(), "the last waker freed the set");
    }

    /// A parent waker that looks at its set's lock when woken.
    struct Peek {
        set: std::sync::Mutex<std::sync::Weak<WakeSet>>,
        lock_was_free: AtomicUsize,
    }

    impl Wake for Peek {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            let set = self.set.lock().expect("not poisoned").upgrade();
            if set.is_some_and(|set| set.parent.try_lock().is_ok()) {
                self.lock_was_free.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    #[test]
    fn the_parent_waker_is_woken_after_the_lock_is_released() {
        let set = WakeSet::new(1);
        let peek = Arc::new(Peek {
            set: std::sync::Mutex::new(Arc::downgrade(&set)),
            lock_was_free: AtomicUsize::new(0),
        });
        set.register(&Waker::from(Arc::clone(&peek)));
        set.waker(0).wake_by_ref();
        assert_eq!(peek.lock_was_free.load(Ordering::SeqCst), 1);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "while it is still on the stack of woken nodes")]
    fn polling_a_node_still_on_the_stack_is_caught() {
        let set = WakeSet::new(2);
        set.waker(0).wake_by_ref();
        set.waker(1).wake_by_ref();
        // Not taken: clearing its flag now would let the next wake push it a second time.
        set.polling(0);
    }

    #[test]
    fn a_changed_parent_waker_is_the_one_woken() {
        let set = WakeSet::new(1);
        let (first, waker) = parent();
        set.register(&waker);
        let (second, waker) = parent();
        set.register(&waker);
        set.waker(0).wake_by_ref();
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
    }
}

/// Every interleaving of wakes from other threads with the run's side (`register`, `take`,
/// `polling`), explored by loom: `.ci/loom` runs these.
#[cfg(all(test, flow_loom))]
mod loom_model {
    use super::*;
    use crate::wake::counting::parent;
    use loom::sync::atomic::AtomicUsize;

    fn node_waker(set: &WakeSet, node: u32) -> Waker {
        (*set.waker(node)).clone()
    }

    /// Two threads push on the stack while the run takes it: every woken node comes out once,
    /// and the run is woken.
    #[test]
    fn concurrent_wakes_come_out_once() {
        loom::model(|| {
            let set = WakeSet::new(3);
            let (count, waker) = parent();
            set.register(&waker);
            let (a0, a1) = (node_waker(&set, 0), node_waker(&set, 1));
            let (b2, b1) = (node_waker(&set, 2), node_waker(&set, 1));
            let one = loom::thread::spawn(move || {
                a0.wake();
                a1.wake();
            });
            let two = loom::thread::spawn(move || {
                b2.wake();
                b1.wake();
            });
            let mut out = Vec::new();
            set.take(&mut out);
            one.join().expect("first waking thread");
            two.join().expect("second waking thread");
            set.take(&mut out);
            out.sort_unstable();
            assert_eq!(out, [0, 1, 2]);
            assert!(count.0.load(Ordering::SeqCst) >= 1);
        });
    }

    /// A wake that races with `polling` is never lost: either the poll sees what the waking
    /// thread wrote before it woke the node, or the node is on the stack again and the run was
    /// woken for it.
    #[test]
    fn a_wake_racing_with_polling_is_not_lost() {
        loom::model(|| {
            let set = WakeSet::new(1);
            let (count, waker) = parent();
            set.register(&waker);
            let mut out = Vec::new();
            // The node was woken and taken: the run is about to poll it.
            set.waker(0).wake_by_ref();
            set.take(&mut out);
            assert_eq!(out, [0]);
            let data = Arc::new(AtomicUsize::new(0));
            let (written, node) = (Arc::clone(&data), node_waker(&set, 0));
            let other = loom::thread::spawn(move || {
                written.store(1, Ordering::Relaxed);
                node.wake();
            });
            set.polling(0);
            let seen = data.load(Ordering::Relaxed);
            other.join().expect("the waking thread");
            out.clear();
            set.take(&mut out);
            assert!(
                seen == 1 || out == [0],
                "lost wake: seen {seen}, taken {out:?}"
            );
            if out == [0] {
                assert_eq!(count.0.load(Ordering::SeqCst), 2, "the run was woken again");
            }
        });
    }

    /// A wake that pushes after the run's `take` wakes the waker registered before that take,
    /// not an older one.
    #[test]
    fn a_late_wake_wakes_the_latest_parent() {
        loom::model(|| {
            let set = WakeSet::new(1);
            let (first, waker) = parent();
            set.register(&waker);
            let node = node_waker(&set, 0);
            let other = loom::thread::spawn(move || node.wake());
            let (second, waker) = parent();
            set.register(&waker);
            let mut out = Vec::new();
            set.take(&mut out);
            other.join().expect("the waking thread");
            if out.is_empty() {
                // Pushed after the take: the run must hear of it through its current waker.
                assert_eq!(second.0.load(Ordering::SeqCst), 1);
                assert_eq!(first.0.load(Ordering::SeqCst), 0);
            }
            assert_eq!(
                first.0.load(Ordering::SeqCst) + second.0.load(Ordering::SeqCst),
                1,
                "one wake of the run per push on an empty stack"
            );
        });
    }
}
