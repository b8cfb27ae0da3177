//! Accounts for the bank tests of lazily loaded and evicted databases: a balance in the
//! first 8 bytes of a padded value, and an audit that sums every balance in one
//! transaction.

use tsumiki::Db;

/// The balance an account's value holds.
pub fn balance(v: &[u8]) -> u64 {
    u64::from_be_bytes(v[..8].try_into().expect("a balance"))
}

/// An account's value: `b`, padded to `len` bytes (padding spreads accounts over pages).
pub fn account(b: u64, len: usize) -> Vec<u8> {
    let mut v = b.to_be_bytes().to_vec();
    v.resize(len, 0);
    v
}

/// The sum of every balance, read by one (retried) transaction scanning everything.
pub fn audit(db: &Db) -> u64 {
    db.run(|t| {
        let mut sum = 0u64;
        for r in t.iter() {
            sum = sum.wrapping_add(balance(&r?.1));
        }
        Ok(sum)
    })
    .unwrap()
}
