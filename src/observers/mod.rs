//! Observers floor: fed by what a call changed.
//!
//! [`audit_record`] (the audit log's entry built from a finished call), [`changes`] (the hub of
//! change notifications: sessions' subscriptions, fed by tools, the disk watcher and PostgreSQL's
//! LISTEN) and [`resources`] (files as MCP resources).

pub mod audit_record;
pub mod changes;
pub mod resources;
