//! Gives the shared library a soname that names its ABI, so that programs linked against
//! it load `libtsumiki.so.0.1` and a later incompatible library can be installed beside it.
//! Before 1.0 every minor version may break the ABI, so the soname carries major.minor.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_default();
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").unwrap_or_default();
    let abi = if major == "0" { format!("0.{minor}") } else { major };
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libtsumiki.so.{abi}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
