//! What `/readyz` reports.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug)]
struct Inner {
    caches_synced: AtomicBool,
    providers_loaded: AtomicBool,
    leader: AtomicBool,
}

/// Shared readiness of the host: ready when the caches it needs are synced and, if this replica
/// runs the controllers (it leads, or leader election is off), its providers are loaded.
///
/// Cheap to clone; every clone sees the same state.
#[derive(Debug, Clone)]
pub struct Readiness(Arc<Inner>);

impl Default for Readiness {
    fn default() -> Self {
        Self::new()
    }
}

impl Readiness {
    /// Not ready: nothing synced or loaded yet; this replica counts as running the controllers
    /// until leader election says otherwise.
    pub fn new() -> Self {
        Self(Arc::new(Inner {
            caches_synced: AtomicBool::new(false),
            providers_loaded: AtomicBool::new(false),
            leader: AtomicBool::new(true),
        }))
    }

    /// The controllers' caches are synced (a follower: it reached the API server).
    pub fn set_caches_synced(&self, synced: bool) {
        self.0.caches_synced.store(synced, Ordering::SeqCst);
    }

    /// The providers are loaded.
    pub fn set_providers_loaded(&self, loaded: bool) {
        self.0.providers_loaded.store(loaded, Ordering::SeqCst);
    }

    /// Whether this replica runs the controllers (holds the Lease, or leader election is off).
    pub fn set_leader(&self, leader: bool) {
        self.0.leader.store(leader, Ordering::SeqCst);
    }

    /// Whether this replica runs the controllers.
    pub fn is_leader(&self) -> bool {
        self.0.leader.load(Ordering::SeqCst)
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        let synced = self.0.caches_synced.load(Ordering::SeqCst);
        let loaded = self.0.providers_loaded.load(Ordering::SeqCst);
        synced && (loaded || !self.is_leader())
    }

    /// The `/readyz` body: one line per check.
    pub fn report(&self) -> String {
        let mark = |ok: bool| if ok { "ok" } else { "failed" };
        let leader = self.is_leader();
        format!(
            "[{}] caches synced\n[{}] providers loaded{}\nleader: {leader}\n",
            mark(self.0.caches_synced.load(Ordering::SeqCst)),
            mark(self.0.providers_loaded.load(Ordering::SeqCst) || !leader),
            if leader {
                ""
            } else {
                " (not needed: not leading)"
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_needs_synced_caches_and_loaded_providers() {
        let r = Readiness::new();
        assert!(!r.is_ready());
        r.set_caches_synced(true);
        assert!(!r.is_ready(), "{}", r.report());
        r.set_providers_loaded(true);
        assert!(r.is_ready(), "{}", r.report());
        let clone = r.clone();
        clone.set_caches_synced(false);
        assert!(!r.is_ready());
        assert!(
            r.report().contains("[failed] caches synced"),
            "{}",
            r.report()
        );
    }

    #[test]
    fn a_follower_needs_only_synced_caches() {
        let r = Readiness::new();
        r.set_leader(false);
        assert!(!r.is_ready());
        r.set_caches_synced(true);
        assert!(r.is_ready(), "{}", r.report());
        r.set_leader(true);
        assert!(!r.is_ready(), "{}", r.report());
    }
}
