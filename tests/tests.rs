//! End-to-end tests that run the `strata` binary.

mod cli;
