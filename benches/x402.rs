//! Placeholder until the x402 benchmark lands.
fn main() {}
