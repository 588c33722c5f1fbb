//! Ground floor: pure helpers every floor above may use, with no crate type above them.
//!
//! [`path`] (the validated `VirtualPath`), [`limits`] and [`quota`] (memory bounds), [`text`]
//! (pure text functions), [`content`] (binary and image sniffing), [`config`] (the mount
//! grammar), [`grants`] and [`confirm_policy`] (who may see what, and what a person is asked
//! about), [`search`] (what a glob or grep asks every backend), [`migrations`] (which schema migrations
//! a database still needs), [`time`], [`uri`], [`progress`].

pub mod config;
pub mod confirm_policy;
pub mod content;
#[cfg(test)]
mod floors;
pub mod grants;
pub mod limits;
pub mod migrations;
pub mod path;
pub mod progress;
pub mod quota;
pub mod search;
pub mod text;
pub mod time;
pub mod uri;
