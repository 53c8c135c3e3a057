//! Adaptive replacement (`vllm/v1/kv_offload/arc_manager.py`, `eviction_policy: "arc"`, first
//! in vLLM 0.11.1; PR #27039): entries seen once (`T1`) and more than once (`T2`), ghost lists
//! of what each evicted (`B1`, `B2`) and a target size for `T1`.
//! - A refresh (every lookup) walks the hashes in reverse: a ready `T1` entry moves to `T2`
//!   (one still being stored stays), a `T2` entry becomes most recent; a hash found in `B1`
//!   raises the target by `max(1, |B2| / |B1|)` (at most the capacity), in `B2` lowers it by
//!   `max(1, |B1| / |B2|)` (at least 0).
//! - Room is made one entry at a time: from `T1`'s least recent evictable entry (into `B1`)
//!   while `|T1|` is at least the target, else from `T2`'s (into `B2`); only ready entries not
//!   being loaded go. New entries enter `T1` and leave the ghost lists, which hold at most the
//!   capacity's worth of hashes.

use super::{Eviction, EvictionSpec};
use crate::lru::{Entry, List, Lru as Ghosts};

pub(super) const SPEC: EvictionSpec = EvictionSpec {
    name: "arc",
    about: "Adaptive replacement cache (vLLM's `eviction_policy: arc`, since 0.11.1)",
    new: |cap| Box::new(Arc::new(cap)),
};

/// Adaptive replacement over `capacity` bytes.
#[derive(Debug)]
pub struct Arc {
    t1: List,
    t2: List,
    b1: Option<Ghosts>,
    b2: Option<Ghosts>,
    target: f64,
    capacity: u64,
    /// Capacity in entries (of the first entry's size), for the target and the ghost lists.
    entries: usize,
    scratch: Vec<u64>,
}

impl Arc {
    /// An empty tier of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Arc {
            t1: List::new(),
            t2: List::new(),
            b1: None,
            b2: None,
            target: 0.0,
            capacity,
            entries: 0,
            scratch: Vec::new(),
        }
    }

    fn get(&self, h: u64) -> Option<&Entry> {
        self.t1.get(h).or_else(|| self.t2.get(h))
    }
}

fn ghost_len(g: &Option<Ghosts>) -> f64 {
    g.as_ref().map_or(0, |g| g.len()) as f64
}

impl Eviction for Arc {
    fn contains(&self, h: u64) -> bool {
        self.get(h).is_some()
    }

    fn lookup(&self, hashes: &[u64]) -> (usize, bool) {
        super::lookup(hashes, |h| self.get(h))
    }

    fn touch(&mut self, hashes: &[u64]) {
        for &h in hashes.iter().rev() {
            if let Some(e) = self.t1.get(h).copied() {
                if e.refs >= 0 {
                    self.t1.remove(h);
                    self.t2.insert(h, e.bytes, e.refs);
                }
            } else if self.t2.refresh(h) {
            } else if self.b1.as_ref().is_some_and(|g| g.contains(h)) {
                let d = (ghost_len(&self.b2) / ghost_len(&self.b1)).max(1.0);
                self.target = (self.target + d).min(self.entries as f64);
            } else if self.b2.as_ref().is_some_and(|g| g.contains(h)) {
                let d = (ghost_len(&self.b1) / ghost_len(&self.b2)).max(1.0);
                self.target = (self.target - d).max(0.0);
            }
        }
    }

    fn reserve(&mut self, new: &[(u64, u64)], evicted: &mut Vec<u64>) -> bool {
        if self.entries == 0 && !new.is_empty() {
            self.entries = (self.capacity / new[0].1.max(1)).max(1) as usize;
            self.b1 = Some(Ghosts::new(self.entries));
            self.b2 = Some(Ghosts::new(self.entries));
        }
        let need: u64 = new.iter().map(|&(_, b)| b).sum();
        let used = self.t1.bytes + self.t2.bytes;
        let free = self.capacity.saturating_sub(used);
        if need > free {
            self.scratch.clear();
            let got = self.t1.victims(need - free, &mut self.scratch);
            if got < need - free
                && got + self.t2.victims(need - free - got, &mut self.scratch) < need - free
            {
                return false;
            }
        }
        while self.capacity.saturating_sub(self.t1.bytes + self.t2.bytes) < need {
            let from_t1 = self.t1.len() as f64 >= self.target.floor();
            let pick = if from_t1 {
                self.t1.oldest_evictable().map(|h| (h, true))
            } else {
                None
            }
            .or_else(|| self.t2.oldest_evictable().map(|h| (h, false)))
            .or_else(|| self.t1.oldest_evictable().map(|h| (h, true)));
            let Some((h, t1)) = pick else {
                return false;
            };
            let (list, ghosts) = if t1 {
                (&mut self.t1, &mut self.b1)
            } else {
                (&mut self.t2, &mut self.b2)
            };
            list.remove(h);
            if let Some(g) = ghosts {
                self.scratch.clear();
                g.insert(h, &mut self.scratch);
            }
            evicted.push(h);
        }
        for &(h, b) in new {
            self.t1.insert(h, b, -1);
            for g in [&mut self.b1, &mut self.b2].into_iter().flatten() {
                g.remove(h);
            }
        }
        true
    }

    fn ready(&mut self, hashes: &[u64]) {
        for &h in hashes {
            for l in [&mut self.t1, &mut self.t2] {
                if l.get(h).is_some_and(|e| e.refs < 0) {
                    l.set_refs(h, 0);
                }
            }
        }
    }

    fn pin(&mut self, hashes: &[u64], delta: i32) {
        for &h in hashes {
            for l in [&mut self.t1, &mut self.t2] {
                if let Some(e) = l.get(h) {
                    let r = (e.refs + delta).max(0);
                    l.set_refs(h, r);
                }
            }
        }
    }

    fn used_bytes(&self) -> u64 {
        self.t1.bytes + self.t2.bytes
    }

    fn room(&self) -> u64 {
        self.capacity.saturating_sub(self.t1.bytes + self.t2.bytes)
            + self.t1.evictable
            + self.t2.evictable
    }

    fn bytes_of(&self, h: u64) -> Option<u64> {
        self.get(h).map(|e| e.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_use_protects_an_entry_from_a_scan() {
        // Capacity 4 entries. A is used twice (T2); a scan of single-use entries then evicts
        // from T1, never A.
        let mut a = Arc::new(40);
        let mut ev = Vec::new();
        assert!(a.reserve(&[(100, 10)], &mut ev));
        a.ready(&[100]);
        a.touch(&[100]);
        for h in 1..=10u64 {
            assert!(a.reserve(&[(h, 10)], &mut ev));
            a.ready(&[h]);
        }
        assert!(a.contains(100));
        assert!(!ev.contains(&100));
        assert!(a.used_bytes() <= 40);
        // A ghost hit in B1 raises T1's target.
        let before = a.target;
        a.touch(&[*ev.last().unwrap()]);
        assert!(a.target > before);
    }
}
