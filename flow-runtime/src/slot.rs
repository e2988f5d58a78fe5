//! Where a node's output lives during a run: a write-once cell per named node.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, PoisonError};

/// The output of one named node: written once when the node completes, then read by reference
/// by every node that names it.
///
/// A write-once cell like `OnceLock`, without its blocking machinery: a second write is
/// ignored, and a read during the write sees no value.
pub struct Slot<T> {
    state: AtomicU8,
    value: UnsafeCell<MaybeUninit<T>>,
}

const EMPTY: u8 = 0;
const WRITING: u8 = 1;
const FULL: u8 = 2;

// SAFETY: as `OnceLock<T>`: the value is written once, by whoever wins `EMPTY -> WRITING`, and
// read only after `FULL` is published with release/acquire ordering. Sharing a slot shares `&T`
// (needs `Sync`) and lets another thread put the value (needs `Send`).
unsafe impl<T: Send + Sync> Sync for Slot<T> {}
// SAFETY: a slot owns its value.
unsafe impl<T: Send> Send for Slot<T> {}

impl<T> Slot<T> {
    /// An empty slot.
    pub const fn new() -> Self {
        Slot {
            state: AtomicU8::new(EMPTY),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// The value, once the node has completed.
    #[inline]
    pub fn get(&self) -> Option<&T> {
        if self.state.load(Ordering::Acquire) == FULL {
            // SAFETY: `FULL` is stored after the value is written, and the value is never
            // written again nor dropped while `&self` lives.
            Some(unsafe { (*self.value.get()).assume_init_ref() })
        } else {
            None
        }
    }

    /// Stores the node's value. A second write is ignored (a node completes once).
    #[inline]
    pub fn put(&self, value: T) {
        if self
            .state
            .compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            // SAFETY: winning `EMPTY -> WRITING` gives this call the only access to the value;
            // readers wait for `FULL`. Writing moves `value` and cannot unwind.
            unsafe { (*self.value.get()).write(value) };
            self.state.store(FULL, Ordering::Release);
        }
    }
}

impl<T> Drop for Slot<T> {
    fn drop(&mut self) {
        if *self.state.get_mut() == FULL {
            // SAFETY: the value was written (`FULL`) and is dropped once, here.
            unsafe { self.value.get_mut().assume_init_drop() };
        }
    }
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Slot<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Slot").field(&self.get()).finish()
    }
}

/// The output a `Terminate` step gives the run: put by the step, taken once by the run's
/// output code, which then does not evaluate the workflow's `=> expression`.
///
/// Unlike a [`Slot`] it hands out no reference, so taking the value out is safe.
pub struct TermCell<T> {
    value: Mutex<Option<T>>,
}

impl<T> TermCell<T> {
    /// An empty cell.
    pub const fn new() -> Self {
        TermCell {
            value: Mutex::new(None),
        }
    }

    /// Stores the run's output (a later value replaces it: a run terminates once).
    pub fn put(&self, value: T) {
        *self.value.lock().unwrap_or_else(PoisonError::into_inner) = Some(value);
    }

    /// Takes the run's output, if a `Terminate` step gave one.
    pub fn take(&self) -> Option<T> {
        self.value
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

impl<T> Default for TermCell<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> std::fmt::Debug for TermCell<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TermCell").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::{Slot, TermCell};

    #[test]
    fn term_cell_gives_its_value_once() {
        let cell = TermCell::new();
        assert_eq!(cell.take(), None::<String>);
        cell.put("done".to_string());
        assert_eq!(cell.take().as_deref(), Some("done"));
        assert_eq!(cell.take(), None);
    }

    #[test]
    fn slot_keeps_the_first_value_and_drops_it_once() {
        let first = Rc::new(1);
        let second = Rc::new(2);
        let slot = Slot::new();
        assert!(slot.get().is_none());
        slot.put(Rc::clone(&first));
        slot.put(Rc::clone(&second));
        assert_eq!(slot.get().map(|v| **v), Some(1));
        // The refused value was dropped at once; the kept one lives in the slot.
        assert_eq!(Rc::strong_count(&second), 1);
        assert_eq!(Rc::strong_count(&first), 2);
        drop(slot);
        assert_eq!(Rc::strong_count(&first), 1);
    }

    #[test]
    fn empty_slot_drops_nothing() {
        let slot: Slot<Rc<u8>> = Slot::default();
        assert_eq!(format!("{slot:?}"), "Slot(None)");
        drop(slot);
    }
}
