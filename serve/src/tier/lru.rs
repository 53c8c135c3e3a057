//! Least-recently-used eviction, vLLM's default (`vllm/v1/kv_offload/lru_manager.py`, v0.15.1):
//! one list in recency order; a lookup counts the consecutive held and ready entries; a refresh
//! walks the hashes in reverse so the chain's first block ends most recent; room is made by
//! evicting from the least recent end only entries that are ready and not being loaded, and
//! when there are not enough of those nothing is evicted and the store is skipped.

use super::{Eviction, EvictionSpec};
use crate::lru::List;

pub(super) const SPEC: EvictionSpec = EvictionSpec {
    name: "lru",
    about: "Least recently used (vLLM's default)",
    new: |cap| Box::new(Lru::new(cap)),
};

/// Least-recently-used eviction over `capacity` bytes.
#[derive(Debug)]
pub struct Lru {
    list: List,
    capacity: u64,
    victims: Vec<u64>,
}

impl Lru {
    /// An empty tier of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Lru {
            list: List::new(),
            capacity,
            victims: Vec::new(),
        }
    }
}

impl Eviction for Lru {
    fn contains(&self, h: u64) -> bool {
        self.list.slot.contains_key(&h)
    }

    fn lookup(&self, hashes: &[u64]) -> (usize, bool) {
        super::lookup(hashes, |h| self.list.get(h))
    }

    fn touch(&mut self, hashes: &[u64]) {
        for &h in hashes.iter().rev() {
            self.list.refresh(h);
        }
    }

    fn reserve(&mut self, new: &[(u64, u64)], evicted: &mut Vec<u64>) -> bool {
        let need: u64 = new.iter().map(|&(_, b)| b).sum();
        let free = self.capacity.saturating_sub(self.list.bytes);
        self.victims.clear();
        if need > free
            && (self.list.evictable < need - free
                || self.list.victims(need - free, &mut self.victims) < need - free)
        {
            return false;
        }
        for &h in &self.victims {
            self.list.remove(h);
            evicted.push(h);
        }
        for &(h, b) in new {
            self.list.insert(h, b, -1);
        }
        true
    }

    fn ready(&mut self, hashes: &[u64]) {
        for &h in hashes {
            if self.list.get(h).is_some_and(|e| e.refs < 0) {
                self.list.set_refs(h, 0);
            }
        }
    }

    fn pin(&mut self, hashes: &[u64], delta: i32) {
        for &h in hashes {
            if let Some(e) = self.list.get(h) {
                let r = (e.refs + delta).max(0);
                self.list.set_refs(h, r);
            }
        }
    }

    fn used_bytes(&self) -> u64 {
        self.list.bytes
    }

    fn room(&self) -> u64 {
        self.capacity.saturating_sub(self.list.bytes) + self.list.evictable
    }

    fn bytes_of(&self, h: u64) -> Option<u64> {
        self.list.get(h).map(|e| e.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_ready_unpinned_least_recent_and_skips_when_it_cannot() {
        let mut l = Lru::new(3 * 10);
        let mut ev = Vec::new();
        assert!(l.reserve(&[(1, 10), (2, 10), (3, 10)], &mut ev));
        // Being stored: not hits, not evictable.
        assert_eq!(l.lookup(&[1, 2]), (0, false));
        assert!(!l.reserve(&[(4, 10)], &mut ev));
        l.ready(&[1, 2, 3]);
        assert_eq!(l.lookup(&[1, 2, 3, 4]), (3, false));
        // Touch in reverse: 1 ends most recent, 3 is least recent... order 3, 2, 1.
        l.touch(&[1, 2, 3]);
        l.pin(&[3], 1);
        assert_eq!(l.lookup(&[3]), (1, true));
        assert!(l.reserve(&[(4, 10)], &mut ev));
        // 3 is being loaded: 2 goes.
        assert_eq!(ev, [2]);
        assert_eq!(l.used_bytes(), 30);
        // Loaded, 3 is the most recent again: 1 goes next.
        l.pin(&[3], -1);
        assert!(l.reserve(&[(5, 10)], &mut ev));
        assert_eq!(ev, [2, 1]);
        assert_eq!(l.room(), 10);
    }
}
