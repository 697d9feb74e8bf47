//! A WASI command, not a handler: it exports `wasi:cli/run`, not `handle`.

fn main() {
    println!("I am not an idem handler");
}
