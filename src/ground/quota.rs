//! Memory quotas (issue 34): what one workspace may hold in memory (`--memory-quota`) and what
//! all workspaces of the server may hold together (`--memory-budget`).
//!
//! Bytes are accounted where they are held, not counted by walking maps: every holder of a
//! workspace's memory (each `memory` mount and in-memory overlay layer, `/scratch/` included,
//! see `backend::memory`; the undo history, see `session`) shares the workspace's
//! [`MemoryAccount`] and reserves bytes *before* it holds them ([`MemoryAccount::reserve`]),
//! then keeps the reservation ([`Reserved::keep`]) once they are held, or lets it go (dropping
//! the [`Reserved`]) when the change failed. Freeing (a delete, an overwrite with less, a
//! commit or discard of an overlay, the end of a session) gives the bytes back with
//! [`MemoryAccount::release`]; a holder that is dropped releases all it held.
//!
//! The counters are atomics updated by compare-and-swap, so two concurrent reservations cannot
//! both pass a limit: a reservation takes the workspace's room first, then the server's, and
//! gives the first back if the second is refused. Before refusing, a reservation asks the
//! workspace's undo history to give up its oldest steps (the one holder that can let go of
//! bytes without asking: see [`MemoryAccount::set_reclaim`]), so that deleting a file frees
//! room even though undo kept its content. A refusal ([`MemoryRefused`]) says which
//! limit, what is used and what was asked; the backend error built from it tells the agent how
//! to free space.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Default of `--memory-quota`: 256 MiB per workspace, room for a few large results, an
/// overlay's worth of edits and the undo history (64 MiB by default) on a laptop.
pub const DEFAULT_MEMORY_QUOTA: u64 = 256 * 1024 * 1024;
/// Default of `--memory-budget`: 1 GiB over all workspaces of the server.
pub const DEFAULT_MEMORY_BUDGET: u64 = 1024 * 1024 * 1024;
/// A new HTTP session is refused (503) once less than this is free in the budget (or an
/// eighth of a smaller budget): a workspace that could not write a single file is no use.
pub const SESSION_HEADROOM: u64 = 1024 * 1024;

/// Which limit refused a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryLimit {
    /// The workspace's `--memory-quota`.
    Quota,
    /// The server's `--memory-budget`, over all workspaces.
    Budget,
}

/// A reservation refused: `needed` more bytes would pass `limit` bytes, of which `used` are
/// held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryRefused {
    /// Which limit.
    pub limit: MemoryLimit,
    /// Its size in bytes.
    pub limit_bytes: u64,
    /// Bytes held under it when the reservation was refused.
    pub used: u64,
    /// Bytes the change needed.
    pub needed: u64,
}

impl fmt::Display for MemoryRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.limit {
            MemoryLimit::Quota => write!(
                f,
                "it needs {} more, and this workspace already holds {} of its memory quota of {} (--memory-quota), counting memory mounts, /scratch/, in-memory overlay layers and undo history. Free space: delete files you no longer need from memory mounts or /scratch/, commit or discard the overlay's changes, or ask the operator to raise --memory-quota",
                size(self.needed),
                size(self.used),
                size(self.limit_bytes),
            ),
            MemoryLimit::Budget => write!(
                f,
                "it needs {} more, and the server's memory budget of {} (--memory-budget) is used up by all workspaces together ({} held). Free space: delete files you no longer need from memory mounts or /scratch/, commit or discard the overlay's changes, retry later when other workspaces have ended, or ask the operator to raise --memory-budget",
                size(self.needed),
                size(self.limit_bytes),
                size(self.used),
            ),
        }
    }
}

/// `n` bytes as people read them: `512 bytes`, `8.0 MiB`, `1.5 GiB`.
pub fn size(n: u64) -> String {
    const KIB: f64 = 1024.0;
    let x = n as f64;
    if n < 1024 {
        format!("{n} bytes")
    } else if x < KIB * KIB {
        format!("{:.1} KiB", x / KIB)
    } else if x < KIB * KIB * KIB {
        format!("{:.1} MiB", x / (KIB * KIB))
    } else {
        format!("{:.1} GiB", x / (KIB * KIB * KIB))
    }
}

/// Adds `n` to `counter` unless the sum would pass `limit`; the value seen otherwise.
fn try_add(counter: &AtomicU64, n: u64, limit: u64) -> Result<(), u64> {
    let mut current = counter.load(Ordering::Relaxed);
    loop {
        let next = current.checked_add(n).filter(|next| *next <= limit);
        let Some(next) = next else {
            return Err(current);
        };
        match counter.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return Ok(()),
            Err(seen) => current = seen,
        }
    }
}

/// Takes `n` from `counter`, never below zero (a release is never larger than what was
/// reserved; saturating keeps a bug from wrapping the count around).
fn sub(counter: &AtomicU64, n: u64) {
    let _ = counter.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |current| {
        Some(current.saturating_sub(n))
    });
}

/// The server-wide budget (`--memory-budget`), shared by every workspace's account.
#[derive(Debug)]
pub struct MemoryBudget {
    used: AtomicU64,
    budget: u64,
}

impl MemoryBudget {
    /// A budget of `budget` bytes, none used.
    pub fn new(budget: u64) -> Self {
        Self {
            used: AtomicU64::new(0),
            budget,
        }
    }

    /// No budget: only each workspace's quota holds.
    pub fn unlimited() -> Self {
        Self::new(u64::MAX)
    }

    /// Bytes held by all workspaces.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// The budget in bytes.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Whether a new workspace (an HTTP session) should be refused: less than
    /// [`SESSION_HEADROOM`] (or an eighth of a smaller budget) is free.
    pub fn is_exhausted(&self) -> bool {
        let headroom = SESSION_HEADROOM.min(self.budget / 8).max(1);
        self.budget.saturating_sub(self.used()) < headroom
    }
}

/// What a workspace can give up when a reservation would be refused: asked to free at least
/// the bytes given (releasing them on the account given), it answers how many it freed.
type Reclaim = Box<dyn Fn(&MemoryAccount, u64) -> u64 + Send + Sync>;

/// One workspace's memory (see the module doc); shared by everything that holds its bytes.
pub struct MemoryAccount {
    used: AtomicU64,
    quota: u64,
    server: Arc<MemoryBudget>,
    reclaim: std::sync::OnceLock<Reclaim>,
}

impl fmt::Debug for MemoryAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryAccount")
            .field("used", &self.used)
            .field("quota", &self.quota)
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl MemoryAccount {
    /// An account of `quota` bytes within the server's `server` budget.
    pub fn new(quota: u64, server: Arc<MemoryBudget>) -> Arc<Self> {
        Arc::new(Self {
            used: AtomicU64::new(0),
            quota,
            server,
            reclaim: std::sync::OnceLock::new(),
        })
    }

    /// An account with neither quota nor budget (tests, tools used as a library).
    pub fn unlimited() -> Arc<Self> {
        Self::new(u64::MAX, Arc::new(MemoryBudget::unlimited()))
    }

    /// Bytes this workspace holds.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// This workspace's quota in bytes.
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// The server's budget this account draws on.
    pub fn server(&self) -> &Arc<MemoryBudget> {
        &self.server
    }

    /// Sets what this workspace gives up when a reservation would be refused (its undo
    /// history's oldest steps); once per account, later calls are ignored. `reclaim` must not
    /// reserve on this account (it is called while a reservation is being decided).
    pub fn set_reclaim(
        &self,
        reclaim: impl Fn(&MemoryAccount, u64) -> u64 + Send + Sync + 'static,
    ) {
        let _ = self.reclaim.set(Box::new(reclaim));
    }

    /// Reserves `n` bytes before holding them: refused, with nothing reserved, when the
    /// workspace's quota or the server's budget would be passed even after the workspace gave
    /// up what it can ([`Self::set_reclaim`]).
    pub fn reserve(self: &Arc<Self>, n: u64) -> Result<Reserved, MemoryRefused> {
        let refused = match self.reserve_without_reclaim(n) {
            Ok(reserved) => return Ok(reserved),
            Err(refused) => refused,
        };
        let Some(reclaim) = self.reclaim.get() else {
            return Err(refused);
        };
        let short = (refused.used + refused.needed).saturating_sub(refused.limit_bytes);
        if reclaim(self, short) == 0 {
            return Err(refused);
        }
        self.reserve_without_reclaim(n)
    }

    /// [`Self::reserve`] without asking the workspace to give anything up (for the undo
    /// history itself, which makes its own room).
    pub fn reserve_without_reclaim(self: &Arc<Self>, n: u64) -> Result<Reserved, MemoryRefused> {
        if n == 0 {
            return Ok(Reserved {
                account: self.clone(),
                bytes: 0,
            });
        }
        try_add(&self.used, n, self.quota).map_err(|used| MemoryRefused {
            limit: MemoryLimit::Quota,
            limit_bytes: self.quota,
            used,
            needed: n,
        })?;
        if let Err(used) = try_add(&self.server.used, n, self.server.budget) {
            sub(&self.used, n);
            return Err(MemoryRefused {
                limit: MemoryLimit::Budget,
                limit_bytes: self.server.budget,
                used,
                needed: n,
            });
        }
        Ok(Reserved {
            account: self.clone(),
            bytes: n,
        })
    }

    /// Counts `n` bytes already held (put back after being taken out), whatever the limits:
    /// the count stays exact, and the next reservation finds less room.
    pub fn charge(&self, n: u64) {
        self.used.fetch_add(n, Ordering::AcqRel);
        self.server.used.fetch_add(n, Ordering::AcqRel);
    }

    /// Gives back `n` bytes held until now.
    pub fn release(&self, n: u64) {
        if n == 0 {
            return;
        }
        sub(&self.used, n);
        sub(&self.server.used, n);
    }

    /// The line `file_info` of a mount root shows: what this workspace holds against its quota,
    /// and the server against its budget.
    pub fn describe(&self) -> String {
        let mut line = format!(
            "Workspace memory: {} used of {} (--memory-quota; memory mounts, /scratch/, in-memory overlay layers, undo history)",
            size(self.used()),
            size(self.quota),
        );
        if self.server.budget != u64::MAX {
            line.push_str(&format!(
                "; server: {} used of {} (--memory-budget)",
                size(self.server.used()),
                size(self.server.budget),
            ));
        }
        line
    }
}

/// Bytes reserved and not yet held: given back when dropped, unless [`Reserved::keep`] says
/// they are now held (and will be given back by [`MemoryAccount::release`]).
#[derive(Debug)]
#[must_use = "a reservation is given back when dropped; keep it once the bytes are held"]
pub struct Reserved {
    account: Arc<MemoryAccount>,
    bytes: u64,
}

impl Reserved {
    /// The bytes are held now: the holder releases them when it frees them.
    pub fn keep(mut self) {
        self.bytes = 0;
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.account.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_past_the_quota_is_refused_and_takes_nothing() {
        let budget = Arc::new(MemoryBudget::new(1000));
        let account = MemoryAccount::new(100, budget.clone());
        account.reserve(60).unwrap().keep();
        let refused = account.reserve(41).unwrap_err();
        assert_eq!(
            refused,
            MemoryRefused {
                limit: MemoryLimit::Quota,
                limit_bytes: 100,
                used: 60,
                needed: 41
            }
        );
        assert_eq!((account.used(), budget.used()), (60, 60));
        account.reserve(40).unwrap().keep();
        assert_eq!(account.used(), 100);
        account.release(100);
        assert_eq!((account.used(), budget.used()), (0, 0));
    }

    #[test]
    fn the_budget_is_shared_and_a_refusal_gives_the_quota_back() {
        let budget = Arc::new(MemoryBudget::new(150));
        let a = MemoryAccount::new(100, budget.clone());
        let b = MemoryAccount::new(100, budget.clone());
        a.reserve(100).unwrap().keep();
        let refused = b.reserve(60).unwrap_err();
        assert_eq!(refused.limit, MemoryLimit::Budget);
        assert_eq!(refused.used, 100);
        assert_eq!(b.used(), 0, "the quota taken first was given back");
        b.reserve(50).unwrap().keep();
        assert_eq!(budget.used(), 150);
        assert!(budget.is_exhausted());
    }

    #[test]
    fn a_dropped_reservation_is_given_back() {
        let account = MemoryAccount::new(100, Arc::new(MemoryBudget::new(100)));
        let reserved = account.reserve(70).unwrap();
        assert!(account.reserve(31).is_err());
        drop(reserved);
        assert_eq!(account.used(), 0);
        assert_eq!(account.server().used(), 0);
    }

    #[test]
    fn concurrent_reservations_never_pass_the_quota_together() {
        let account = MemoryAccount::new(1000, Arc::new(MemoryBudget::unlimited()));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let account = account.clone();
                std::thread::spawn(move || {
                    let mut won = 0u64;
                    for _ in 0..1000 {
                        if let Ok(reserved) = account.reserve(7) {
                            reserved.keep();
                            won += 7;
                        }
                    }
                    won
                })
            })
            .collect();
        let won: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(won, account.used());
        assert!(account.used() <= 1000);
        assert!(
            account.used() > 1000 - 7,
            "filled up to the last whole step"
        );
    }

    #[test]
    fn a_refused_reservation_first_asks_the_workspace_to_give_up_what_it_can() {
        let account = MemoryAccount::new(100, Arc::new(MemoryBudget::unlimited()));
        account.reserve(90).unwrap().keep();
        let asked = Arc::new(AtomicU64::new(0));
        let seen = asked.clone();
        account.set_reclaim(move |account, short| {
            seen.store(short, Ordering::Relaxed);
            account.release(40);
            40
        });
        account.reserve(30).unwrap().keep();
        assert_eq!(asked.load(Ordering::Relaxed), 20, "90 + 30 is 20 over 100");
        assert_eq!(account.used(), 80);
        assert!(account.reserve_without_reclaim(30).is_err());
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size(512), "512 bytes");
        assert_eq!(size(8 * 1024 * 1024), "8.0 MiB");
        assert_eq!(size(3 * 1024 * 1024 * 1024 / 2), "1.5 GiB");
    }
}
