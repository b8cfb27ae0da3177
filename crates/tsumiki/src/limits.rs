//! The limits on what a user may store, in one place: every layer that checks a length
//! (the index on keys, transactions on values, the log on a write set, the page store's
//! decoders on images) takes its bound from here.

/// The longest key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 4096;

/// The longest value accepted, in bytes.
pub const MAX_VALUE_LEN: usize = 16 << 20;

/// The most bytes of one transaction's write set: the longest log record body (keys,
/// values and their headers). A larger transaction fails at commit.
pub const MAX_WRITE_SET_BYTES: usize = 1 << 30;
