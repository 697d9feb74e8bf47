//! librdkafka (rdkafka-sys) and libpg_query (pg_query) each link their own
//! static copy of xxHash, so XXH32*/XXH64* are defined twice. Both are the
//! same algorithms with the same state layouts (xxHash 0.6 vs 0.8 differ
//! only in XXH3, which librdkafka does not have), so letting the linker keep
//! one copy is sound. Every crate that links both needs this.
///
/// `sqlx::migrate!` embeds `../migrations` at compile time, but cargo does
/// not know that a new file there must rebuild this crate: say so.
fn main() {
    println!("cargo:rustc-link-arg=-Wl,--allow-multiple-definition");
    println!("cargo:rerun-if-changed=../migrations");
}
