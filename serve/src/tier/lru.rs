//! Least-recently-used eviction, vLLM's default (`vllm/v1/kv_offload/lru_manager.py`, v0.15.1):
//! one list in recency order; a lookup counts the consecutive held and ready entries; a refresh
//! walks the hashes in reverse so the chain's first block ends most recent; room is made by
//! evicting from the least recent end only entries that are ready and not being loaded, and
//! when there are not enough of those nothing is evicted and the store is skipped.

use rustc_hash::FxHashMap;

use super::{Eviction, EvictionSpec};

pub(super) const SPEC: EvictionSpec = EvictionSpec {
    name: "lru",
    about: "Least recently used (vLLM's default)",
    new: |cap| Box::new(Lru::new(cap)),
};

const NONE: u32 = u32::MAX;

/// One entry: its hash, size, and state (`-1` being stored, `0` ready, `n > 0` being loaded n
/// times).
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
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
pub(super) struct List {
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
        let mut n = 0;
        let mut loading = false;
        for &h in hashes {
            match self.list.get(h) {
                Some(e) if e.refs >= 0 => {
                    loading |= e.refs > 0;
                    n += 1;
                }
                _ => break,
            }
        }
        (n, loading)
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
