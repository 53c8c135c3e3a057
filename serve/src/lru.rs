//! Recency lists: [`List`], entries (a hash, a size, a state) in least-recently-used order
//! with O(1) insert, refresh, removal and eviction from the least recent end (a hash map to
//! slots and a doubly linked list over them), of which only the entries that may be evicted are
//! linked; and [`Lru`], a bounded set of hashes on it. The CPU tier's eviction policies and the
//! routers' own indexes use them.

use rustc_hash::FxHashMap;

const NONE: u32 = u32::MAX;

/// One entry: its hash, size, and state (`-1` being stored, `0` ready, `n > 0` being loaded n
/// times).
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub hash: u64,
    pub bytes: u64,
    pub refs: i32,
    prev: u32,
    next: u32,
}

/// A recency list over slots, with a hash map to them. Only evictable entries (ready, not
/// being loaded) are linked, least recent first; an entry being stored or loaded is held apart
/// and goes to the most recent end when it becomes evictable again (in vLLM a request's stored
/// blocks are touched at every store it plans, so they are as recent as its last step when it
/// finishes and they become ready). So making room never walks past pinned entries.
#[derive(Debug, Default)]
pub struct List {
    pub slot: FxHashMap<u64, u32>,
    pub e: Vec<Entry>,
    free: Vec<u32>,
    /// Least recent evictable entry.
    pub head: u32,
    /// Most recent evictable entry.
    tail: u32,
    /// Bytes of every entry.
    pub bytes: u64,
    /// Bytes of the evictable (linked) entries.
    pub evictable: u64,
}

impl List {
    pub fn new() -> Self {
        List {
            head: NONE,
            tail: NONE,
            ..Default::default()
        }
    }

    pub fn len(&self) -> usize {
        self.slot.len()
    }

    fn unlink(&mut self, s: u32) {
        let (p, n) = (self.e[s as usize].prev, self.e[s as usize].next);
        if p == NONE {
            self.head = n;
        } else {
            self.e[p as usize].next = n;
        }
        if n == NONE {
            self.tail = p;
        } else {
            self.e[n as usize].prev = p;
        }
        self.e[s as usize].prev = NONE;
        self.e[s as usize].next = NONE;
    }

    fn push_back(&mut self, s: u32) {
        self.e[s as usize].prev = self.tail;
        self.e[s as usize].next = NONE;
        if self.tail == NONE {
            self.head = s;
        } else {
            self.e[self.tail as usize].next = s;
        }
        self.tail = s;
    }

    pub fn get(&self, h: u64) -> Option<&Entry> {
        self.slot.get(&h).map(|&s| &self.e[s as usize])
    }

    /// Moves `h` to the most recent end (a pinned entry goes there when unpinned).
    pub fn refresh(&mut self, h: u64) -> bool {
        match self.slot.get(&h).copied() {
            Some(s) => {
                if self.e[s as usize].refs == 0 && self.tail != s {
                    self.unlink(s);
                    self.push_back(s);
                }
                true
            }
            None => false,
        }
    }

    /// Adds `h` (at the most recent end when evictable).
    pub fn insert(&mut self, h: u64, bytes: u64, refs: i32) {
        let entry = Entry {
            hash: h,
            bytes,
            refs,
            prev: NONE,
            next: NONE,
        };
        let s = match self.free.pop() {
            Some(s) => {
                self.e[s as usize] = entry;
                s
            }
            None => {
                self.e.push(entry);
                (self.e.len() - 1) as u32
            }
        };
        self.slot.insert(h, s);
        self.bytes += bytes;
        if refs == 0 {
            self.push_back(s);
            self.evictable += bytes;
        }
    }

    /// Sets `h`'s state: it leaves the list while pinned and comes back most recent.
    pub fn set_refs(&mut self, h: u64, refs: i32) {
        if let Some(&s) = self.slot.get(&h) {
            let (was, bytes) = (self.e[s as usize].refs, self.e[s as usize].bytes);
            self.e[s as usize].refs = refs;
            match (was == 0, refs == 0) {
                (true, false) => {
                    self.unlink(s);
                    self.evictable -= bytes;
                }
                (false, true) => {
                    self.push_back(s);
                    self.evictable += bytes;
                }
                _ => {}
            }
        }
    }

    /// Removes `h`, returning its entry.
    pub fn remove(&mut self, h: u64) -> Option<Entry> {
        let s = self.slot.remove(&h)?;
        let e = self.e[s as usize];
        if e.refs == 0 {
            self.unlink(s);
            self.evictable -= e.bytes;
        }
        self.free.push(s);
        self.bytes -= e.bytes;
        Some(e)
    }

    /// Hashes of evictable entries from the least recent end until `need` bytes are found.
    pub fn victims(&self, need: u64, out: &mut Vec<u64>) -> u64 {
        let mut got = 0;
        let mut s = self.head;
        while s != NONE && got < need {
            let e = &self.e[s as usize];
            out.push(e.hash);
            got += e.bytes;
            s = e.next;
        }
        got
    }

    /// The least recent evictable entry's hash.
    pub fn oldest_evictable(&self) -> Option<u64> {
        (self.head != NONE).then(|| self.e[self.head as usize].hash)
    }
}

/// A bounded set of hashes in least-recently-used order.
#[derive(Debug)]
pub struct Lru {
    list: List,
    capacity: usize,
}

impl Lru {
    /// An empty set holding at most `capacity` keys (at least one).
    pub fn new(capacity: usize) -> Self {
        Lru {
            list: List::new(),
            capacity: capacity.max(1),
        }
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether `k` is held (recency unchanged).
    pub fn contains(&self, k: u64) -> bool {
        self.list.get(k).is_some()
    }

    /// Removes `k` if held.
    pub fn remove(&mut self, k: u64) -> bool {
        self.list.remove(k).is_some()
    }

    /// Makes `k` the most recently used, inserting it when absent (the least recently used key
    /// goes to `evicted` when full). Returns whether `k` is new.
    pub fn insert(&mut self, k: u64, evicted: &mut Vec<u64>) -> bool {
        if self.list.refresh(k) {
            return false;
        }
        if self.list.len() >= self.capacity
            && let Some(old) = self.list.oldest_evictable()
        {
            self.list.remove(old);
            evicted.push(old);
        }
        self.list.insert(k, 1, 0);
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
        assert!(l.remove(5) && !l.contains(5));
    }
}
