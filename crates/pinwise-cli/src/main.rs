//! The `pinwise` command.
fn main() {}
