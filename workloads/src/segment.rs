//! Token identity: segments, their stable ids, and prefix chains (`s3:105/u17:488`).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What a segment name may be, for error messages.
pub(crate) const NAME_FORMS: &str = "a name of ASCII letters, digits, `.`, `_` and `-`, or `#` followed by exactly 16 hex digits (a raw id)";
/// What a prefix chain looks like, for error messages.
pub(crate) const CHAIN_FORMS: &str =
    "`ID:LEN` segments joined by `/`, e.g. `s3:105/u17:488` (LEN a whole number of tokens ≥ 1)";

/// FNV-1a, 64-bit, over `bytes`: the stable id of a segment name.
///
/// Hand-written on purpose: a segment id is stored in trace files and keys the serving
/// simulator's prefix cache, so it must never change across crate versions, platforms or Rust
/// releases. `std`'s hashers are randomly keyed or explicitly unstable, and a hashing crate may
/// change its algorithm in a minor release; FNV-1a is fixed by its definition (offset basis
/// `0xcbf29ce484222325`, prime `0x100000001b3`) and takes five lines.
pub fn fnv1a_64(bytes: &[u8]) -> u64 {
    fnv1a_64_extend(FNV_OFFSET, bytes)
}

/// FNV-1a's offset basis: the hash of no bytes.
pub(crate) const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// Continues an FNV-1a hash `h` over `bytes`: hashing a name piece by piece gives the hash of
/// the whole name.
pub(crate) fn fnv1a_64_extend(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The segment id of a name built from text and decimal numbers, hashed piece by piece without
/// formatting it: `NameHash::new().text("conversation.").num(12).id()` is
/// `fnv1a_64(b"conversation.12")`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NameHash(u64);

impl NameHash {
    pub(crate) fn new() -> NameHash {
        NameHash(FNV_OFFSET)
    }

    pub(crate) fn text(self, s: &str) -> NameHash {
        NameHash(fnv1a_64_extend(self.0, s.as_bytes()))
    }

    /// Appends `n` in decimal.
    pub(crate) fn num(self, n: u64) -> NameHash {
        let mut buf = [0u8; 20];
        let mut i = buf.len();
        let mut n = n;
        loop {
            i -= 1;
            buf[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        NameHash(fnv1a_64_extend(self.0, &buf[i..]))
    }

    pub(crate) fn id(self) -> u64 {
        self.0
    }
}

/// A run of `len` tokens named by `id`: the first `len` tokens of the token sequence `id` stands
/// for. Two segments with the same id share their first `min(len)` tokens; segments with
/// different ids share none (up to 64-bit hash collisions).
///
/// A request's prompt starts with its [`prefix`](crate::Request::prefix) chain, so two requests
/// whose chains start with the same segments share those tokens; the rest of a prompt is unique
/// to its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Segment {
    /// The segment's id ([`segment_id`] of its name).
    pub id: u64,
    /// Tokens.
    pub len: u32,
}

impl Segment {
    /// The segment `id` of `len` tokens.
    pub const fn new(id: u64, len: u32) -> Segment {
        Segment { id, len }
    }
}

/// Writes `#` + the id's 16 hex digits, `:`, the length (`#00000000000000ff:12`), which
/// [`parse_prefix`] reads back.
impl fmt::Display for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", format_segment_id(self.id), self.len)
    }
}

/// The id of a segment name: a name of ASCII letters, digits, `.`, `_` and `-` hashes to its
/// [`fnv1a_64`]; `#` followed by exactly 16 hex digits is that raw id (so ids written by
/// [`format_segment_id`] read back unchanged). Errors name the field `segment`.
pub fn segment_id(name: &str) -> Result<u64> {
    parse_id(name).map_err(|why| Error::BadSegment {
        field: "segment",
        got: name.to_string(),
        why,
    })
}

/// `#` + the id's 16 lower-case hex digits: the raw-id form of a segment name.
pub fn format_segment_id(id: u64) -> String {
    format!("#{id:016x}")
}

pub(crate) fn parse_id(name: &str) -> Result<u64, String> {
    if let Some(hex) = name.strip_prefix('#') {
        if hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            // 16 hex digits always fit a u64.
            return u64::from_str_radix(hex, 16).map_err(|e| e.to_string());
        }
        return Err(format!(
            "a raw id is `#` followed by exactly 16 hex digits (got {} character(s) after `#`)",
            hex.chars().count()
        ));
    }
    if name.is_empty() {
        return Err(format!("empty segment name; expected {NAME_FORMS}"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "the character `{c}` is not allowed; expected {NAME_FORMS}"
        ));
    }
    Ok(fnv1a_64(name.as_bytes()))
}

/// Parses a prefix chain: `ID:LEN` segments joined by `/` (`s3:105/u17:488`), IDs as in
/// [`segment_id`], LEN a whole number of tokens ≥ 1. An empty (or all-blank) string is the empty
/// chain. Errors name the field `prefix` and the 1-based segment.
pub fn parse_prefix(s: &str) -> Result<Vec<Segment>> {
    parse_chain(s).map_err(|why| Error::BadSegment {
        field: "prefix",
        got: s.to_string(),
        why,
    })
}

/// [`parse_prefix`] with the reason as text (for trace rows, which add file and line).
pub(crate) fn parse_chain(s: &str) -> Result<Vec<Segment>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(Vec::new());
    }
    s.split('/')
        .enumerate()
        .map(|(i, seg)| {
            let k = i + 1;
            let seg = seg.trim();
            if seg.is_empty() {
                return Err(format!("segment {k} is empty; expected {CHAIN_FORMS}"));
            }
            let Some((id, len)) = seg.rsplit_once(':') else {
                return Err(format!(
                    "segment {k} `{seg}` has no `:LEN`; expected {CHAIN_FORMS}"
                ));
            };
            let id = parse_id(id).map_err(|why| format!("segment {k} `{seg}`: ID: {why}"))?;
            let len = match len.parse::<u32>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    return Err(format!(
                        "segment {k} `{seg}`: LEN `{len}` must be a whole number of tokens from 1 to 4294967295"
                    ));
                }
            };
            Ok(Segment { id, len })
        })
        .collect()
}

/// Writes a chain as [`parse_prefix`] reads it, every id in its raw `#hex` form
/// (`#…:105/#…:488`); the empty chain is the empty string.
pub fn format_prefix(chain: &[Segment]) -> String {
    let mut s = String::with_capacity(chain.len() * 24);
    for (i, seg) in chain.iter().enumerate() {
        if i > 0 {
            s.push('/');
        }
        use fmt::Write;
        // Writing to a String cannot fail.
        let _ = write!(s, "{seg}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference values of FNV-1a 64 from its specification's test suite
    /// (<http://www.isthe.com/chongo/src/fnv/test_fnv.c>): "", "a", "foobar".
    #[test]
    fn fnv1a_64_matches_the_reference_vectors() {
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn names_hash_piece_by_piece() {
        for n in [0u64, 7, 10, 123, 4_294_967_295, u64::MAX] {
            let name = format!("conversation.{n}.answer.{}", n / 3);
            let pieces = NameHash::new()
                .text("conversation.")
                .num(n)
                .text(".answer.")
                .num(n / 3);
            assert_eq!(pieces.id(), fnv1a_64(name.as_bytes()), "{name}");
        }
    }

    #[test]
    fn names_and_raw_ids() {
        assert_eq!(segment_id("a").unwrap(), 0xaf63_dc4c_8601_ec8c);
        let id = segment_id("s3").unwrap();
        assert_eq!(segment_id(&format_segment_id(id)).unwrap(), id);
        assert_eq!(segment_id("#00000000000000FF").unwrap(), 255);
        for bad in ["", "a b", "s/3", "s:3", "#ff", "#00000000000000fg", "é"] {
            let e = segment_id(bad).unwrap_err().to_string();
            assert!(e.starts_with("segment: "), "{bad}: {e}");
        }
    }
}
