//! The columns of a trace CSV file.

/// The header a trace CSV carries (columns may come in any order; others are ignored). The
/// optional columns [`TRACE_OPTIONAL_COLUMNS`] may follow.
pub const TRACE_HEADER: &str = "arrived_at,num_prefill_tokens,num_decode_tokens";

/// Optional trace columns, read when the header names them (an empty cell means none):
/// - `prefix`: the prompt's shared prefix chain, `ID:LEN` segments joined by `/`
///   (`s3:105/u17:488`; IDs are segment names or `#` + 16 hex digits, see
///   [`segment_id`](crate::segment_id)); the lengths sum to at most `num_prefill_tokens`;
/// - `output_id`: the segment name of the request's generated tokens
///   ([`Request::output_segment`](crate::Request::output_segment));
/// - `follows`: the 0-based data row of an earlier request this one follows (closed loop,
///   [`Request::follows`](crate::Request::follows)), with
/// - `think_s`: the seconds between that request's end and this one's release (≥ 0; given
///   exactly when `follows` is).
pub const TRACE_OPTIONAL_COLUMNS: [&str; 4] = ["prefix", "output_id", "follows", "think_s"];

pub(crate) const COLUMNS: [&str; 3] = ["arrived_at", "num_prefill_tokens", "num_decode_tokens"];
pub(crate) const EXPECTED_HEADER: &str = "`arrived_at,num_prefill_tokens,num_decode_tokens` (optional columns: `prefix`, `output_id`, `follows`, `think_s`)";
