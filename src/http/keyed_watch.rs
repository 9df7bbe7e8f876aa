//! What the server's long-polls wait on: a watch channel per key (a task type for waiting holds,
//! a task id for waiting reads), bumped when a notification names the key, all of them bumped
//! when notifications may have been lost. A key no one watches any more is forgotten.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tokio::sync::watch;

/// Watch channels by key; see the module docs. A channel's value is a generation: no value is
/// ever given twice, to any key, even to one forgotten and watched again, so a generation seen
/// once names one moment of one key.
#[derive(Default)]
pub(super) struct KeyedWatch {
    keys: Mutex<HashMap<String, watch::Sender<u64>>>,
    generations: AtomicU64,
}

impl KeyedWatch {
    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<u64>>> {
        // a poisoned lock only means a panic elsewhere while waking: the map is still whole
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A receiver that changes whenever `key` is woken (or every key is).
    pub(super) fn subscribe(&self, key: &str) -> watch::Receiver<u64> {
        let next = || self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        self.keys().entry(key.to_string()).or_insert_with(|| watch::channel(next()).0).subscribe()
    }

    /// Wakes the watchers of `key` (None: of every key), and forgets the keys woken that no one
    /// watches any more.
    pub(super) fn wake(&self, key: Option<&str>) {
        let mut keys = self.keys();
        let bump = |s: &watch::Sender<u64>| {
            s.send_modify(|n| *n = self.generations.fetch_add(1, Ordering::Relaxed) + 1);
        };
        match key {
            Some(key) => {
                if let Some(sender) = keys.get(key) {
                    if sender.receiver_count() == 0 {
                        keys.remove(key);
                    } else {
                        bump(sender);
                    }
                }
            }
            None => keys.retain(|_, sender| {
                bump(sender);
                sender.receiver_count() > 0
            }),
        }
    }

    /// Forgets `key` when no one watches it any more (its last receiver just dropped).
    pub(super) fn leave(&self, key: &str) {
        let mut keys = self.keys();
        if keys.get(key).is_some_and(|s| s.receiver_count() == 0) {
            keys.remove(key);
        }
    }

    /// The keys watched now, sorted (for tests).
    #[cfg(test)]
    pub(super) fn watched(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.keys().keys().cloned().collect();
        keys.sort();
        keys
    }
}
