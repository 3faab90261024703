//! Links the cdylib as rdma-core's `libibverbs.so.1`: its SONAME, and the
//! version nodes every rdma-core 44 binary requires. Symbols are placed in
//! their nodes by `.symver` directives next to each export (see
//! `src/export.rs`); the script only defines the nodes and hides the rest.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,now");
}
