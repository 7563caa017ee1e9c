//! Planner benches (filled in with the planner).

fn main() {}
