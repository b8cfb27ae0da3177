//! C library (in progress).
