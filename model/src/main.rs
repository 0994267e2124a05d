//! `make model`: runs the checker deeper than `cargo test` does.
fn main() {}
