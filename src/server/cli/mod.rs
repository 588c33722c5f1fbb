//! The subcommands of the `mountfs` binary beside serving, as library code `main.rs` calls.

pub mod check;
pub mod code_pages;
pub mod cp;
