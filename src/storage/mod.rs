//! Storage floor: files and where they are kept.
//!
//! [`backend`] (the `Backend` trait, `Router`, and one backend per mount kind: memory, disk,
//! store, shell, overlay, object, composite), [`store`] (versioned items: the SQLite and
//! PostgreSQL engines), [`audit`] (the audit log's store and spool) and [`exec`] (execute's
//! process, namespace and sandbox machinery; it imports no tool type).

pub mod audit;
pub mod backend;
pub mod exec;
pub mod store;
