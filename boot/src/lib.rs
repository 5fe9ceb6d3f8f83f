//! Reset to Rust.
#![no_std]
