//! Tells the tests whether they are built optimized: a few of them size their work by it
//! (`cfg(tsumiki_unoptimized)`: the full counts are minutes in an unoptimized build). Not
//! `cfg(debug_assertions)`, because CI runs the optimized tests with debug assertions and
//! overflow checks on (`CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS`, see .ci/run), at full size.
//! The library itself does not look at it.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(tsumiki_unoptimized)");
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var("OPT_LEVEL").is_ok_and(|l| l == "0") {
        println!("cargo::rustc-cfg=tsumiki_unoptimized");
    }
}
