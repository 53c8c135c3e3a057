//! A bounded set of hashes in least-recently-used order: O(1) insert, refresh and eviction
//! (a hash map to slots and a doubly linked list over them), no allocation once full.

use rustc_hash::FxHashMap;

const NONE: u32 = u32::MAX;

/// A bounded LRU set of `u64` keys.
#[derive(Debug, Clone)]
pub struct Lru {
    slot: FxHashMap<u64, u32>,
    key: Vec<u64>,
    prev: Vec<u32>,
    next: Vec<u32>,
    /// Least recently used.
    head: u32,
    /// Most recently used.
    tail: u32,
    capacity: usize,
    free: Vec<u32>,
}

impl Lru {
    /// An empty set holding at most `capacity` keys (at least one).
    pub fn new(capacity: usize) -> Self {
        Lru {
            slot: FxHashMap::default(),
            key: Vec::new(),
            prev: Vec::new(),
            next: Vec::new(),
            head: NONE,
            tail: NONE,
            capacity: capacity.max(1),
            free: Vec::new(),
        }
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.slot.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.slot.is_empty()
    }

    /// Whether `k` is held (recency unchanged).
    pub fn contains(&self, k: u64) -> bool {
        self.slot.contains_key(&k)
    }

    fn unlink(&mut self, s: u32) {
        let (p, n) = (self.prev[s as usize], self.next[s as usize]);
        if p == NONE {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NONE {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
    }

    fn push_back(&mut self, s: u32) {
        self.prev[s as usize] = self.tail;
        self.next[s as usize] = NONE;
        if self.tail == NONE {
            self.head = s;
        } else {
            self.next[self.tail as usize] = s;
        }
        self.tail = s;
    }

    /// Removes `k` if held.
    pub fn remove(&mut self, k: u64) -> bool {
        match self.slot.remove(&k) {
            Some(s) => {
                self.unlink(s);
                // The slot is reused by the next insert below capacity.
                self.free.push(s);
                true
            }
            None => false,
        }
    }

    /// Makes `k` the most recently used, inserting it when absent (the least recently used key
    /// goes to `evicted` when full). Returns whether `k` is new.
    pub fn insert(&mut self, k: u64, evicted: &mut Vec<u64>) -> bool {
        if let Some(&s) = self.slot.get(&k) {
            if self.tail != s {
                self.unlink(s);
                self.push_back(s);
            }
            return false;
        }
        let s = if self.slot.len() >= self.capacity {
            let s = self.head;
            self.unlink(s);
            let old = self.key[s as usize];
            self.slot.remove(&old);
            evicted.push(old);
            self.key[s as usize] = k;
            s
        } else if let Some(s) = self.free.pop() {
            self.key[s as usize] = k;
            s
        } else {
            self.key.push(k);
            self.prev.push(NONE);
            self.next.push(NONE);
            (self.key.len() - 1) as u32
        };
        self.slot.insert(k, s);
        self.push_back(s);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_used() {
        let mut l = Lru::new(3);
        let mut ev = Vec::new();
        for k in [1, 2, 3] {
            assert!(l.insert(k, &mut ev));
        }
        // Refresh 1: 2 is now the oldest.
        assert!(!l.insert(1, &mut ev));
        assert!(l.insert(4, &mut ev));
        assert_eq!(ev, [2]);
        assert!(l.contains(1) && l.contains(3) && l.contains(4) && !l.contains(2));
        assert!(l.insert(5, &mut ev));
        assert_eq!(ev, [2, 3]);
        assert_eq!(l.len(), 3);
    }
}
