//! State floor: what a session remembers between calls.
//!
//! [`session`] (read ledger, undo history, file locks, the call's mount table), [`call_trail`]
//! (what a call changed, for the audit log and the subscriptions) and [`arrival`] (the arrival
//! order of file calls: tickets issued by every transport as a request is read, redeemed when the
//! tool locks the file).

pub mod arrival;
pub mod call_trail;
pub mod session;
