//! Integration tests of the simulated network, driving toy endpoints.

mod determinism;
mod faults;
mod reliable;
mod timeouts;
mod toys;
