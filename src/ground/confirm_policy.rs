//! What `--confirm TOOL[,TOOL...]` asks a person about (issue 46): the text of the flag →
//! which tool's calls are asked about, and which of them (every call, or only the destructive
//! ones). Asking itself (the question, its answer, its time limit) is
//! `tools::change::confirm`'s; this module only parses and answers "is this tool asked about".

use std::collections::BTreeSet;
use std::time::Duration;

use thiserror::Error;

/// The tools `--confirm destructive` names, each asked about only for its destructive calls:
/// `delete`, `move` over an existing file, `write_file` over an existing file, `apply_patch`
/// deleting files, `commit`, `discard`, `execute`.
pub const DESTRUCTIVE_TOOLS: [&str; 7] = [
    "delete",
    "move",
    "write_file",
    "apply_patch",
    "commit",
    "discard",
    "execute",
];

/// The word of `--confirm` standing for [`DESTRUCTIVE_TOOLS`].
pub const DESTRUCTIVE: &str = "destructive";

/// How long a question waits for the person by default (`--confirm-timeout`).
pub const DEFAULT_CONFIRM_TIMEOUT_SECS: u64 = 120;

/// Which calls of a tool are asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfirmScope {
    /// Every call that would change something (the tool was named).
    Every,
    /// Only the destructive ones (the tool came with `destructive`): a delete, a move or
    /// write over an existing file, a patch deleting files, a commit, a discard, a command.
    Destructive,
}

/// A `--confirm` list that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfirmListError {
    /// A name that is not a tool changing files (nor `destructive`).
    #[error(
        "--confirm: {name:?} is not a tool that changes files; name any of {valid}, or destructive (delete, move and write_file over an existing file, apply_patch deleting files, commit, discard, execute)"
    )]
    NotAChangeTool {
        /// The name given.
        name: String,
        /// The tools that can be named.
        valid: String,
    },
    /// An empty list.
    #[error(
        "--confirm: give at least one tool name (e.g. --confirm delete,execute) or destructive"
    )]
    Empty,
}

/// What `--confirm` asks about, and how long a question waits (`--confirm-timeout`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfirmPolicy {
    /// Tools named one by one: every call is asked about.
    every: BTreeSet<String>,
    /// Whether `destructive` was named.
    destructive: bool,
    /// How long a question waits before it counts as declined.
    pub timeout: Duration,
}

impl ConfirmPolicy {
    /// Parses `text` (comma-separated tool names and/or `destructive`); `change_tools` are the
    /// tools that may be named (those that change files, and `execute`).
    pub fn parse(
        text: &str,
        timeout: Duration,
        change_tools: &[&str],
    ) -> Result<Self, ConfirmListError> {
        let mut every = BTreeSet::new();
        let mut destructive = false;
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if name == DESTRUCTIVE {
                destructive = true;
            } else if change_tools.contains(&name) {
                every.insert(name.to_owned());
            } else {
                return Err(ConfirmListError::NotAChangeTool {
                    name: name.to_owned(),
                    valid: change_tools.join(", "),
                });
            }
        }
        if every.is_empty() && !destructive {
            return Err(ConfirmListError::Empty);
        }
        Ok(Self {
            every,
            destructive,
            timeout,
        })
    }

    /// Which calls of `tool` are asked about; `None`: none.
    pub fn scope(&self, tool: &str) -> Option<ConfirmScope> {
        if self.every.contains(tool) {
            Some(ConfirmScope::Every)
        } else if self.destructive && DESTRUCTIVE_TOOLS.contains(&tool) {
            Some(ConfirmScope::Destructive)
        } else {
            None
        }
    }

    /// One line for `mountfs check` and the start-up log: what is asked about, and the wait.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self.every.iter().cloned().collect();
        if self.destructive {
            let rest: Vec<&str> = DESTRUCTIVE_TOOLS
                .iter()
                .copied()
                .filter(|tool| !self.every.contains(*tool))
                .collect();
            if !rest.is_empty() {
                parts.push(format!("the destructive calls of {}", rest.join(", ")));
            }
        }
        format!(
            "{}; a question unanswered in {} s counts as declined",
            parts.join(", "),
            self.timeout.as_secs()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOOLS: &[&str] = &["write_file", "edit_file", "delete", "move", "execute"];

    fn policy(text: &str) -> Result<ConfirmPolicy, ConfirmListError> {
        ConfirmPolicy::parse(text, Duration::from_secs(5), TOOLS)
    }

    #[test]
    fn named_tools_are_asked_about_every_call_and_others_never() {
        let policy = policy("delete, edit_file").unwrap();
        assert_eq!(policy.scope("delete"), Some(ConfirmScope::Every));
        assert_eq!(policy.scope("edit_file"), Some(ConfirmScope::Every));
        assert_eq!(policy.scope("write_file"), None);
        assert_eq!(policy.scope("read_file"), None);
    }

    #[test]
    fn destructive_names_the_destructive_calls_and_a_named_tool_keeps_every_call() {
        let policy = policy("destructive,write_file").unwrap();
        assert_eq!(policy.scope("write_file"), Some(ConfirmScope::Every));
        assert_eq!(policy.scope("delete"), Some(ConfirmScope::Destructive));
        assert_eq!(policy.scope("execute"), Some(ConfirmScope::Destructive));
        assert_eq!(policy.scope("edit_file"), None);
        assert_eq!(
            policy.describe(),
            "write_file, the destructive calls of delete, move, apply_patch, commit, discard, execute; a question unanswered in 5 s counts as declined"
        );
    }

    #[test]
    fn a_tool_that_changes_nothing_or_an_empty_list_is_refused() {
        assert_eq!(
            policy("read_file").unwrap_err().to_string(),
            "--confirm: \"read_file\" is not a tool that changes files; name any of write_file, edit_file, delete, move, execute, or destructive (delete, move and write_file over an existing file, apply_patch deleting files, commit, discard, execute)"
        );
        assert_eq!(policy(" , ").unwrap_err(), ConfirmListError::Empty);
    }
}
