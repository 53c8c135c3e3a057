//! The line a CSV record starts on, from its byte offset: the one rule every reader of a
//! measured CSV (traces, measured runs, stage tables, calibration tables) names rows by.
//!
//! The `csv` crate's `Position::line` counts the line breaks its parser has consumed when the
//! record begins. With `\r\n` line ends the parser stops at the `\r` and takes the `\n` with the
//! next record, so every record after the first is reported one line early (the second row of a
//! Windows-saved file at line 1), and a record after blank lines at the first blank one. The
//! byte offset is exact: a record starts at the first byte from its offset that is not a line
//! break, and its line is one more than the `\n`s before that byte.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;

/// Lines of records in a CSV text held in memory, asked in increasing byte order.
#[derive(Debug)]
pub struct LineCounter<'a> {
    text: &'a [u8],
    byte: usize,
    line: u64,
}

impl<'a> LineCounter<'a> {
    /// A counter over `text`, at its start.
    pub fn new(text: &'a str) -> Self {
        LineCounter {
            text: text.as_bytes(),
            byte: 0,
            line: 1,
        }
    }

    /// The 1-based line of the record at `byte` (a `csv::Position::byte`); offsets increase
    /// from call to call (an earlier one gives the line reached so far).
    pub fn line_at(&mut self, byte: u64) -> u64 {
        let mut start = usize::try_from(byte)
            .unwrap_or(usize::MAX)
            .min(self.text.len());
        while matches!(self.text.get(start), Some(b'\r' | b'\n')) {
            start += 1;
        }
        if start > self.byte {
            let span = &self.text[self.byte..start];
            let breaks = (0..span.len())
                .filter(|&i| is_break(span[i], self.text.get(self.byte + i + 1).copied()))
                .count();
            self.line += breaks as u64;
            self.byte = start;
        }
        self.line
    }
}

/// Whether `c` ends a line: a `\n`, or a `\r` not followed by one (`next`).
fn is_break(c: u8, next: Option<u8>) -> bool {
    c == b'\n' || (c == b'\r' && next != Some(b'\n'))
}

/// Lines of records in a CSV read from a stream: [`track`] wraps the reader the CSV parser
/// reads, noting where line breaks fall; [`LineTracker::line_at`] names a record's line from
/// its byte offset. Only the breaks not yet passed are kept (what the parser has read ahead),
/// so memory does not grow with the file.
#[derive(Debug, Clone)]
pub struct LineTracker(Rc<RefCell<Breaks>>);

#[derive(Debug, Default)]
struct Breaks {
    /// Bytes read from the stream so far.
    read: u64,
    /// Offsets of `\r` and `\n` bytes read but not yet passed, with the byte.
    pending: VecDeque<(u64, u8)>,
    /// Line breaks passed.
    newlines: u64,
}

/// A reader that notes line breaks for its [`LineTracker`].
#[derive(Debug)]
pub struct Tracked<R> {
    inner: R,
    breaks: Rc<RefCell<Breaks>>,
}

/// `reader`, noting its line breaks, and the tracker that names lines from byte offsets.
pub fn track<R: io::Read>(reader: R) -> (Tracked<R>, LineTracker) {
    let breaks = Rc::new(RefCell::new(Breaks::default()));
    (
        Tracked {
            inner: reader,
            breaks: Rc::clone(&breaks),
        },
        LineTracker(breaks),
    )
}

impl<R: io::Read> io::Read for Tracked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut b = self.breaks.borrow_mut();
        let at = b.read;
        for (i, &c) in buf[..n].iter().enumerate() {
            if c == b'\n' || c == b'\r' {
                b.pending.push_back((at + i as u64, c));
            }
        }
        b.read += n as u64;
        Ok(n)
    }
}

impl LineTracker {
    /// The 1-based line of the record at `byte` (a `csv::Position::byte`), which the parser has
    /// read; offsets increase from call to call.
    pub fn line_at(&self, byte: u64) -> u64 {
        let mut b = self.0.borrow_mut();
        let mut start = byte;
        while let Some(&(at, c)) = b.pending.front() {
            if at > start {
                break;
            }
            // A break before the record, or one it starts at (the `\n` of a `\r\n`, a blank
            // line): the record starts after it. The byte after a `\r` before the record's
            // first byte has been read: a `\n` there is the next pending break.
            if at == start {
                start += 1;
            }
            b.pending.pop_front();
            let next = b
                .pending
                .front()
                .filter(|&&(o, _)| o == at + 1)
                .map(|&(_, n)| n);
            if is_break(c, next) {
                b.newlines += 1;
            }
        }
        b.newlines + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first byte of each record, as the `csv` crate reports it.
    fn offsets(text: &str) -> Vec<u64> {
        let mut r = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(text.as_bytes());
        r.records()
            .map(|r| r.unwrap().position().unwrap().byte())
            .collect()
    }

    #[test]
    fn lines_follow_the_text_whatever_its_line_ends() {
        for (text, want) in [
            ("a,b\n1,2\n3,4\n", vec![1, 2, 3]),
            ("a,b\r\n1,2\r\n3,4\r\n", vec![1, 2, 3]),
            ("a,b\r\n\r\n1,2\n\n\n3,4", vec![1, 3, 6]),
            ("a,b\r1,2\r3,4\r", vec![1, 2, 3]),
            ("a,\"x\ny\"\r\n1,2\r\n", vec![1, 3]),
        ] {
            let at = offsets(text);
            let mut counter = LineCounter::new(text);
            let from_text: Vec<u64> = at.iter().map(|&b| counter.line_at(b)).collect();
            assert_eq!(from_text, want, "{text:?}");
            // The stream's tracker, the reader read to the end first (as far ahead as a
            // parser can be) and a byte at a time.
            let (mut all, tracker) = track(text.as_bytes());
            io::copy(&mut all, &mut io::sink()).unwrap();
            let from_stream: Vec<u64> = at.iter().map(|&b| tracker.line_at(b)).collect();
            assert_eq!(from_stream, want, "{text:?}");
        }
        // The csv crate's own count is a line early after a `\r\n`.
        let mut r = csv::Reader::from_reader("a\r\n1\r\n".as_bytes());
        let rec = r.records().next().unwrap().unwrap();
        assert_eq!(rec.position().unwrap().line(), 1);
    }

    #[test]
    fn a_tracked_parser_names_each_record_line() {
        let text = "h1,h2\r\n1,2\r\n\r\n3,4\r\n5,6\n";
        let (reader, lines) = track(text.as_bytes());
        let mut r = csv::ReaderBuilder::new()
            .buffer_capacity(3)
            .from_reader(reader);
        let got: Vec<u64> = r
            .records()
            .map(|rec| lines.line_at(rec.unwrap().position().unwrap().byte()))
            .collect();
        assert_eq!(got, vec![2, 4, 5]);
    }
}
