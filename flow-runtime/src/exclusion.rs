//! Critical sections across the runs of one run tree: a `ForEach` instance, a `Loop`
//! iteration or a sub-workflow is a run of its own, with its own scheduler, and a section in
//! its body must exclude the sections of the same group in the other instances and in the run
//! that holds the nest. Inside one scheduler a group is held in `Scheduler::group_holder`
//! (`rules.rs`); across the tree, by name, in the one [`Exclusion`] the root run makes when
//! it has nests and hands down to every instance, where each scheduler with sections holds a
//! [`Seat`].
//!
//! Every run of a tree is polled inside the root run's poll, so the lock is never contended;
//! it is there because the instances' setups cross `Send` bounds. A section that finds its
//! group held by another run stays ready, and its run is woken when a group is released.
//!
//! A nest node inside a section runs its instances inside it: their sections of that group
//! would wait for ever for the section that waits for them to end. So each group holds a
//! stack of holders, and an instance may take a group whose top holder is a section around
//! the nest it belongs to (at any depth: its [`Groups::inherited`]); above it, the instances
//! exclude each other as any two sections do.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;

/// Which section of which run holds a group.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Holder {
    seat: u64,
    section: u32,
}

#[derive(Default)]
struct State {
    /// The groups held, by name, in the order they were taken: the last entry of a name is
    /// its holder, those before it the sections around it.
    held: Vec<(&'static str, Holder)>,
    /// Runs waiting for a group, woken (all of them) when one is released.
    waiting: Vec<Waker>,
    /// How many releases there have been: a run that found its group held before a release
    /// and registers after it is woken at once.
    releases: u64,
}

/// The exclusion groups of a run tree, by name.
#[derive(Default)]
pub(crate) struct Exclusion {
    state: Mutex<State>,
}

impl std::fmt::Debug for Exclusion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exclusion").finish_non_exhaustive()
    }
}

impl Exclusion {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while the state was held left it whole: go on with it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What a run of a tree with nests is handed: the tree's groups, and the sections around the
/// nest node whose instance it is (none at the root).
#[derive(Clone, Default, Debug)]
pub(crate) struct Groups {
    exclusion: Arc<Exclusion>,
    inherited: Arc<[Holder]>,
}

impl Groups {
    /// The groups an instance of a nest node of the run at `seat` is handed: these, and the
    /// sections of that run the node is in.
    pub(crate) fn within(&self, seat: Option<&Seat>, sections: &[u32]) -> Groups {
        let Some(seat) = seat.filter(|_| !sections.is_empty()) else {
            return self.clone();
        };
        let around = sections.iter().map(|&section| Holder {
            seat: seat.id,
            section,
        });
        Groups {
            exclusion: Arc::clone(&self.exclusion),
            inherited: self.inherited.iter().copied().chain(around).collect(),
        }
    }
}

/// The numbers that tell the runs of a tree apart.
static SEATS: AtomicU64 = AtomicU64::new(1);

/// One scheduler's place in its tree's [`Exclusion`]. Dropping it (the run ended, or was
/// dropped with a section running) releases what it held.
pub(crate) struct Seat {
    exclusion: Arc<Exclusion>,
    /// The sections around the nest this run is an instance of.
    inherited: Arc<[Holder]>,
    id: u64,
    /// A group was found held by another run since the last [`Seat::wait`], with the count
    /// of releases then.
    blocked: Cell<Option<u64>>,
}

impl Seat {
    pub(crate) fn new(groups: &Groups) -> Box<Seat> {
        Box::new(Seat {
            exclusion: Arc::clone(&groups.exclusion),
            inherited: Arc::clone(&groups.inherited),
            id: SEATS.fetch_add(1, Ordering::Relaxed),
            blocked: Cell::new(None),
        })
    }

    /// Whether `group` is free for `section` of this run: held by nobody, by it, or by a
    /// section around the nest this run belongs to.
    pub(crate) fn free(&self, group: &'static str, section: u32) -> bool {
        let state = self.exclusion.state();
        let me = Holder {
            seat: self.id,
            section,
        };
        let top = state.held.iter().rev().find(|&&(name, _)| name == group);
        let free = match top {
            None => true,
            Some(&(_, holder)) => holder == me || self.inherited.contains(&holder),
        };
        if !free && self.blocked.get().is_none() {
            self.blocked.set(Some(state.releases));
        }
        free
    }

    /// `section` of this run takes `group` (once [`Seat::free`] said it may).
    pub(crate) fn hold(&self, group: &'static str, section: u32) {
        let me = Holder {
            seat: self.id,
            section,
        };
        let mut state = self.exclusion.state();
        if !state.held.contains(&(group, me)) {
            state.held.push((group, me));
        }
    }

    /// `section` of this run gives `group` back, and the runs waiting for a group are woken.
    pub(crate) fn release(&self, group: &'static str, section: u32) {
        let me = Holder {
            seat: self.id,
            section,
        };
        let mut state = self.exclusion.state();
        let before = state.held.len();
        state
            .held
            .retain(|&(name, holder)| name != group || holder != me);
        if state.held.len() < before {
            wake_all(state);
        }
    }

    /// Before the run waits: if a section found its group held by another run, the run is
    /// woken at the next release (at once if there was one since).
    pub(crate) fn wait(&self, waker: &Waker) {
        let Some(seen) = self.blocked.take() else {
            return;
        };
        let mut state = self.exclusion.state();
        if state.releases != seen {
            drop(state);
            waker.wake_by_ref();
            return;
        }
        if !state.waiting.iter().any(|w| w.will_wake(waker)) {
            state.waiting.push(waker.clone());
        }
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut state = self.exclusion.state();
        let before = state.held.len();
        let id = self.id;
        state.held.retain(|&(_, holder)| holder.seat != id);
        if state.held.len() < before {
            wake_all(state);
        }
    }
}

/// Counts a release and wakes every waiting run (outside the lock).
fn wake_all(mut state: MutexGuard<'_, State>) {
    state.releases += 1;
    let waiting = std::mem::take(&mut state.waiting);
    drop(state);
    for waker in waiting {
        waker.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::{Groups, Seat};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_group_held_by_one_run_is_free_again_once_released_or_dropped() {
        let groups = Groups::default();
        let a = Seat::new(&groups);
        let b = Seat::new(&groups);
        assert!(a.free("ledger", 0) && b.free("ledger", 0));
        a.hold("ledger", 0);
        assert!(a.free("ledger", 0), "its holder");
        assert!(!a.free("ledger", 1), "another section of the holder");
        assert!(!b.free("ledger", 0), "another run");
        assert!(b.free("audit", 0), "another group");
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        b.wait(&waker);
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        a.release("ledger", 0);
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "woken by the release");
        assert!(b.free("ledger", 0));
        b.hold("ledger", 0);
        // A run that found the group held, and registers after a release, is woken at once.
        assert!(!a.free("ledger", 0));
        drop(b);
        a.wait(&waker);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            2,
            "the drop released the group"
        );
        assert!(a.free("ledger", 0));
    }

    #[test]
    fn an_instance_takes_a_group_held_around_its_nest_and_excludes_its_siblings() {
        let root = Groups::default();
        let outer = Seat::new(&root);
        assert!(outer.free("ledger", 2));
        outer.hold("ledger", 2);
        // The nest node sits in the outer run's section 2.
        let within = root.within(Some(&outer), &[2]);
        let (one, two) = (Seat::new(&within), Seat::new(&within));
        let stranger = Seat::new(&root);
        assert!(
            !stranger.free("ledger", 0),
            "a run outside the section waits"
        );
        assert!(one.free("ledger", 0) && two.free("ledger", 0));
        one.hold("ledger", 0);
        assert!(!two.free("ledger", 0), "the instances exclude each other");
        one.release("ledger", 0);
        assert!(two.free("ledger", 0));
        outer.release("ledger", 2);
        assert!(stranger.free("ledger", 0));
    }
}
