//! Asking the person before a change lands (`--confirm`, issue 46): a tool that has worked out
//! what it will change, and has not changed anything yet, calls [`ask_first`] with the question
//! (the paths, how many files, the command and its directory). The answer decides:
//! accepted, the call goes on (a file changed meanwhile is stale as usual, by the conditional
//! write); declined, cancelled or unanswered within the policy's time, [`ToolError::Declined`]
//! and nothing changes; a client that cannot ask, [`ToolError::ConfirmUnavailable`].
//!
//! How the question reaches the person is an [`Asker`]'s business (the server's: an
//! `elicitation/create` request to the peer of the call, or, on MCP 2026-07-28, an
//! input-required result the client answers on its retry, [`Answer::Deferred`]); a test drives
//! one of its own. A call that carries no [`Confirmer`] (its tool is not named by `--confirm`,
//! or `--confirm` was not given) costs one `Option` check.

use std::sync::Arc;
use std::time::Duration;

use super::{CallContext, ToolError};
use crate::ground::confirm_policy::ConfirmScope;

/// What came of a question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The person said yes.
    Accepted,
    /// The person said no.
    Declined,
    /// The person dismissed the question.
    Cancelled,
    /// The answer came too late (a retry after `--confirm-timeout`): counted as declined.
    Unanswered,
    /// Nobody can be asked: why (the client did not declare elicitation, …).
    Unable(String),
    /// MCP 2026-07-28: the question goes back to the client in an input-required result; the
    /// client asks the person and retries the call with the answer and this state.
    Deferred {
        /// The opaque state the retry must echo.
        request_state: String,
    },
}

/// Puts a question to the person behind the call's client.
#[async_trait::async_trait]
pub trait Asker: Send + Sync + std::fmt::Debug {
    /// Asks `question` (yes or no) and waits for the answer. Dropping the future withdraws
    /// the question.
    async fn ask(&self, question: &str) -> Answer;
}

/// A call's handle for asking: present only when its tool is named by `--confirm`.
#[derive(Debug, Clone)]
pub struct Confirmer {
    /// Which of the tool's calls are asked about.
    pub scope: ConfirmScope,
    /// How long a question waits; then it counts as declined.
    pub timeout: Duration,
    /// Who asks.
    pub asker: Arc<dyn Asker>,
}

/// Asks the person before `tool` makes the change `question` describes, when the call
/// carries a [`Confirmer`] whose scope covers it (`destructive`: whether this call deletes,
/// replaces an existing file, commits, discards or runs a command). `Ok` when the call may go
/// on; the error says nothing was changed. A call cancelled while the question waits withdraws
/// it.
pub async fn ask_first(
    context: &CallContext,
    tool: &'static str,
    destructive: bool,
    question: impl FnOnce() -> String,
) -> Result<(), ToolError> {
    let Some(confirmer) = &context.confirm else {
        return Ok(());
    };
    if confirmer.scope == ConfirmScope::Destructive && !destructive {
        return Ok(());
    }
    let question = question();
    let answer = tokio::select! {
        answer = tokio::time::timeout(confirmer.timeout, confirmer.asker.ask(&question)) => answer,
        () = context.cancel.cancelled() => {
            return Err(ToolError::ChangeCancelled {
                tool,
                state: "The question to the person was withdrawn; nothing was changed.".into(),
            });
        }
    };
    let how = match answer {
        Ok(Answer::Accepted) => {
            if let Some(trail) = &context.trail {
                trail.note_confirmed(&question);
            }
            return Ok(());
        }
        Ok(Answer::Declined) => "the person declined".to_owned(),
        Ok(Answer::Cancelled) => "the person cancelled the question".to_owned(),
        Ok(Answer::Unable(why)) => return Err(ToolError::ConfirmUnavailable { tool, why }),
        Ok(Answer::Deferred { request_state }) => {
            return Err(ToolError::InputRequired {
                tool,
                question,
                request_state,
            });
        }
        Ok(Answer::Unanswered) | Err(_) => format!(
            "the person did not answer within {} s (counted as declined)",
            confirmer.timeout.as_secs()
        ),
    };
    if let Some(trail) = &context.trail {
        trail.note_declined(&question, &how);
    }
    Err(ToolError::Declined {
        tool,
        how,
        question,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Answers every question with `answer` after `delay`, keeping the questions.
    #[derive(Debug)]
    struct Scripted {
        answer: Answer,
        delay: Duration,
        asked: Mutex<Vec<String>>,
    }

    #[async_trait::async_trait]
    impl Asker for Scripted {
        async fn ask(&self, question: &str) -> Answer {
            self.asked.lock().unwrap().push(question.to_owned());
            tokio::time::sleep(self.delay).await;
            self.answer.clone()
        }
    }

    fn context(
        answer: Answer,
        delay: Duration,
        scope: ConfirmScope,
    ) -> (CallContext, Arc<Scripted>) {
        let asker = Arc::new(Scripted {
            answer,
            delay,
            asked: Mutex::default(),
        });
        let context = CallContext {
            confirm: Some(Confirmer {
                scope,
                timeout: Duration::from_millis(200),
                asker: asker.clone(),
            }),
            trail: Some(Arc::new(crate::state::call_trail::CallTrail::new(true))),
            ..CallContext::default()
        };
        (context, asker)
    }

    /// A call whose person takes a minute to answer every question.
    fn unanswered() -> (CallContext, Arc<Scripted>) {
        context(
            Answer::Accepted,
            Duration::from_secs(60),
            ConfirmScope::Every,
        )
    }

    #[tokio::test]
    async fn accepted_goes_on_and_the_trail_notes_it() {
        let (context, asker) = context(Answer::Accepted, Duration::ZERO, ConfirmScope::Every);
        ask_first(&context, "delete", true, || "Delete /a?".into())
            .await
            .unwrap();
        assert_eq!(*asker.asked.lock().unwrap(), ["Delete /a?"]);
        let collected = context.trail.unwrap().take();
        assert_eq!(
            collected.confirmation.as_deref(),
            Some("confirmed by the person: Delete /a?")
        );
    }

    #[tokio::test]
    async fn declined_is_an_error_saying_so() {
        let (context, _) = context(Answer::Declined, Duration::ZERO, ConfirmScope::Every);
        let error = ask_first(&context, "delete", true, || "Delete /a?".into())
            .await
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "Error: delete was not run: the person declined (Delete /a?). Nothing was changed. Do not retry it on your own: ask the person what they want done"
        );
        assert_eq!(error.kind().as_str(), "declined");
    }

    #[tokio::test]
    async fn an_unanswered_question_counts_as_declined() {
        let (context, _) = unanswered();
        let error = ask_first(&context, "execute", true, || "Run `ls`?".into())
            .await
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("the person did not answer within 0 s (counted as declined)"),
            "{error}"
        );
        assert_eq!(error.kind().as_str(), "declined");
    }

    #[tokio::test]
    async fn a_cancelled_call_withdraws_its_question() {
        let (context, _) = unanswered();
        context.cancel.cancel();
        let error = ask_first(&context, "delete", true, || "Delete /a?".into())
            .await
            .unwrap_err();
        assert_eq!(error.kind().as_str(), "cancelled");
    }

    #[tokio::test]
    async fn destructive_scope_does_not_ask_about_a_harmless_call_nor_does_a_call_without_confirmer()
     {
        let (context, asker) = context(Answer::Declined, Duration::ZERO, ConfirmScope::Destructive);
        ask_first(&context, "write_file", false, || unreachable!())
            .await
            .unwrap();
        assert!(asker.asked.lock().unwrap().is_empty());
        ask_first(&CallContext::default(), "delete", true, || unreachable!())
            .await
            .unwrap();
    }
}
