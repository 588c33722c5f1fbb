//! How a `--confirm` question reaches the person behind a call's client (issue 46): the
//! [`Asker`]s the server hands a call whose tool `--confirm` names. What is asked, and when, is
//! `tools::change::confirm`'s.
//!
//! - MCP 2025-11-25 sessions (stdio, an HTTP session): an `elicitation/create` request (a form
//!   with one yes/no field) sent to the peer of the very request being answered — over HTTP
//!   the session that made the call, never another. Dropping the wait (the call was cancelled,
//!   or the question timed out) withdraws it with `notifications/cancelled`.
//! - MCP 2026-07-28 requests (stateless): the call answers with an input-required result
//!   holding the same form; the client asks the person and retries the call with the answer
//!   and the request state. That state is `ISSUED-NONCE.SEAL`, the seal a SHA-256 over a key
//!   this process drew at start, the principal, the tool, the time and a random nonce, a SHA-256 of the call's
//!   arguments and the question: a retry is taken as answered only when it carries a state
//!   this process issued for this principal, these very arguments and this very question (the
//!   call works out its change again on the retry; a different change, or the same question
//!   reached with other arguments, is asked about anew), not older than `--confirm-timeout`
//!   (then it counts as unanswered). Each state answers **one** retry: the states answered are
//!   remembered until their timeout passes (at most [`MAX_ANSWERED`] at once), and a replay of
//!   one is asked about anew. A retry reaching another instance is asked again.
//! - A client that did not declare the elicitation capability (form mode) cannot be asked:
//!   [`Answer::Unable`], and the call is refused. No tool argument can stand in for the
//!   person.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmcp::model::{
    ClientCapabilities, ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationSchema, InputRequest, InputRequiredResult, InputResponses,
    ServerRequest,
};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleServer};
use sha2::{Digest, Sha256};

use crate::change::confirm::{Answer, Asker};

/// The key of the one question in an input-required result's `inputRequests`.
pub const INPUT_KEY: &str = "confirm";

/// The form's one field: `true` to go on.
const FIELD: &str = "confirm";

/// The yes/no form every question carries.
fn form(question: &str) -> ElicitRequestParams {
    let schema = ElicitationSchema::builder()
        .required_bool_with(FIELD, |field| {
            field
                .title("Allow this change")
                .description("Yes lets the agent go on; no leaves everything as it is")
        })
        .build()
        .unwrap_or_else(|_| ElicitationSchema::new(Default::default()));
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: question.to_owned(),
        requested_schema: schema,
    }
}

/// What an elicitation result says: yes only when accepted with the field set to true.
fn answer_of(result: &ElicitResult) -> Answer {
    match result.action {
        ElicitationAction::Accept => {
            let yes = result
                .content
                .as_ref()
                .and_then(|content| content.get(FIELD))
                .and_then(serde_json::Value::as_bool)
                == Some(true);
            if yes {
                Answer::Accepted
            } else {
                Answer::Declined
            }
        }
        ElicitationAction::Cancel => Answer::Cancelled,
        // Decline, and any answer a later protocol adds: not a yes.
        _ => Answer::Declined,
    }
}

/// Why a client with `capabilities` cannot be asked; `None` when it can (form elicitation; an
/// empty `elicitation` object means form, as the 2025-11-25 specification says).
pub fn cannot_ask(capabilities: Option<&ClientCapabilities>) -> Option<String> {
    match capabilities.and_then(|c| c.elicitation.as_ref()) {
        Some(elicitation) if elicitation.form.is_some() || elicitation.url.is_none() => None,
        Some(_) => Some("the client offers only URL elicitation, not the form this question needs".into()),
        None => Some("the client did not declare the MCP elicitation capability, so the person cannot be asked".into()),
    }
}

/// Nobody can be asked, for this reason.
#[derive(Debug)]
pub struct Unable(pub String);

#[async_trait::async_trait]
impl Asker for Unable {
    async fn ask(&self, _question: &str) -> Answer {
        Answer::Unable(self.0.clone())
    }
}

/// Asks with `elicitation/create` on the peer of the call (MCP 2025-11-25).
#[derive(Debug)]
pub struct PeerAsker(pub Peer<RoleServer>);

/// Withdraws a question still waiting when its wait is dropped.
struct Withdraw {
    peer: Peer<RoleServer>,
    id: Option<rmcp::model::RequestId>,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let params = rmcp::model::CancelledNotificationParam::new(
                    Some(id),
                    Some("the tool call was cancelled or the question timed out".into()),
                );
                let _ = peer.notify_cancelled(params).await;
            });
        }
    }
}

#[async_trait::async_trait]
impl Asker for PeerAsker {
    async fn ask(&self, question: &str) -> Answer {
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(form(question)));
        let handle = match self
            .0
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
        {
            Ok(handle) => handle,
            Err(error) => {
                return Answer::Unable(format!(
                    "the question could not be sent to the client ({error})"
                ));
            }
        };
        let mut withdraw = Withdraw {
            peer: self.0.clone(),
            id: Some(handle.id.clone()),
        };
        let response = handle.await_response().await;
        withdraw.id = None;
        match response {
            Ok(ClientResult::ElicitResult(result)) => answer_of(&result),
            Ok(_) => Answer::Unable(
                "the client answered the question with something else than an elicitation result"
                    .into(),
            ),
            Err(rmcp::ServiceError::McpError(error)) => Answer::Unable(format!(
                "the client refused the question ({})",
                error.message
            )),
            Err(error) => Answer::Unable(format!(
                "the question got no answer from the client ({error})"
            )),
        }
    }
}

/// Asks through an input-required result and takes the answer from the retry (MCP 2026-07-28,
/// see the module doc).
#[derive(Debug)]
pub struct RetryAsker {
    /// The retry's answers, when this request is one.
    pub responses: Option<InputResponses>,
    /// The retry's echoed state.
    pub state: Option<String>,
    /// Whose question: the principal, then the tool.
    pub who: String,
    /// The call's arguments, hashed ([`arguments_digest`]): a state answers a retry with these
    /// arguments only.
    pub arguments: [u8; 32],
    /// How old an answered question may be.
    pub timeout: Duration,
}

/// The key the seals of this process are made with, drawn at first use.
fn key() -> &'static [u8; 32] {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    KEY.get_or_init(rand::random)
}

/// The seal of a state issued at `issued` (`SECONDS-NONCE`: two questions of one second get
/// two states).
fn seal(who: &str, issued: &str, arguments: &[u8; 32], question: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(key());
    for part in [
        who.as_bytes(),
        issued.as_bytes(),
        arguments,
        question.as_bytes(),
    ] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    hex::encode(hash.finalize())
}

/// The SHA-256 of a call's arguments as JSON (object keys in order: the same arguments give
/// the same digest however the client ordered them).
pub fn arguments_digest(arguments: &serde_json::Value) -> [u8; 32] {
    Sha256::digest(serde_json::to_vec(arguments).unwrap_or_default()).into()
}

/// The most answered states remembered at once (32 bytes and a time each): more answers
/// within one `--confirm-timeout` than this are refused until older ones expire.
pub const MAX_ANSWERED: usize = 65_536;

/// The states that answered a retry, by their SHA-256, with the time each stops counting
/// (its issue time plus the timeout): a state answers one retry only.
#[derive(Debug, Default)]
struct Answered {
    until: std::collections::HashMap<[u8; 32], u64>,
}

/// What [`Answered::take`] found.
#[derive(Debug, PartialEq, Eq)]
enum Taken {
    /// First use: the answer counts.
    First,
    /// Used before: a replay.
    Replayed,
    /// Too many answers within the timeout to remember one more.
    Full,
}

impl Answered {
    /// Notes the state `sealed` (valid until `until`) as used, at `now`.
    fn take(&mut self, sealed: &str, until: u64, now: u64) -> Taken {
        let id: [u8; 32] = Sha256::digest(sealed.as_bytes()).into();
        if self.until.get(&id).is_some_and(|&end| end >= now) {
            return Taken::Replayed;
        }
        if self.until.len() >= MAX_ANSWERED {
            self.until.retain(|_, end| *end >= now);
            if self.until.len() >= MAX_ANSWERED {
                return Taken::Full;
            }
        }
        self.until.insert(id, until);
        Taken::First
    }
}

/// The answered states of this process (its seals are its own: see [`key`]).
fn answered_states() -> &'static std::sync::Mutex<Answered> {
    static ANSWERED: OnceLock<std::sync::Mutex<Answered>> = OnceLock::new();
    ANSWERED.get_or_init(Default::default)
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

impl RetryAsker {
    /// The time the echoed state was issued for `question`, when this process sealed it for
    /// this principal and tool.
    fn issued_for(&self, question: &str) -> Option<u64> {
        let (issued, sealed) = self.state.as_deref()?.split_once('.')?;
        let expected = seal(&self.who, issued, &self.arguments, question);
        let (seconds, _nonce) = issued.split_once('-')?;
        let seconds: u64 = seconds.parse().ok()?;
        use subtle::ConstantTimeEq as _;
        bool::from(expected.as_bytes().ct_eq(sealed.as_bytes())).then_some(seconds)
    }
}

#[async_trait::async_trait]
impl Asker for RetryAsker {
    async fn ask(&self, question: &str) -> Answer {
        let answered = self
            .responses
            .as_ref()
            .and_then(|responses| responses.get(INPUT_KEY))
            .and_then(|value| serde_json::from_value::<ElicitResult>(value.clone()).ok());
        if let (Some(result), Some(issued)) = (answered, self.issued_for(question)) {
            let now = now_secs();
            if now.saturating_sub(issued) > self.timeout.as_secs() {
                return Answer::Unanswered;
            }
            let until = issued.saturating_add(self.timeout.as_secs());
            let state = self.state.as_deref().unwrap_or_default();
            let taken = answered_states()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(state, until, now);
            match taken {
                Taken::First => return answer_of(&result),
                // A replay of an answered retry: the person answered one call, not this one.
                Taken::Replayed => {}
                Taken::Full => {
                    return Answer::Unable(format!(
                        "more than {MAX_ANSWERED} questions were answered within the confirmation timeout; retry once older answers have expired"
                    ));
                }
            }
        }
        let issued = format!("{}-{}", now_secs(), hex::encode(rand::random::<[u8; 16]>()));
        let sealed = seal(&self.who, &issued, &self.arguments, question);
        Answer::Deferred {
            request_state: format!("{issued}.{sealed}"),
        }
    }
}

/// The input-required result putting `question` to the person, with the state its retry
/// echoes.
pub fn input_required(question: &str, request_state: String) -> InputRequiredResult {
    let mut requests = rmcp::model::InputRequests::new();
    requests.insert(
        INPUT_KEY.to_owned(),
        InputRequest::Elicitation(ElicitRequest::new(form(question))),
    );
    InputRequiredResult::new(Some(requests), Some(request_state))
}

/// A shared asker.
pub fn shared(asker: impl Asker + 'static) -> Arc<dyn Asker> {
    Arc::new(asker)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry(state: Option<String>, answer: ElicitResult) -> RetryAsker {
        let mut responses = InputResponses::new();
        responses.insert(INPUT_KEY.to_owned(), serde_json::to_value(answer).unwrap());
        RetryAsker {
            responses: Some(responses),
            state,
            who: "alice\0delete".into(),
            arguments: arguments_digest(&serde_json::Value::Null),
            timeout: Duration::from_secs(60),
        }
    }

    fn yes() -> ElicitResult {
        ElicitResult::new(ElicitationAction::Accept)
            .with_content(serde_json::json!({"confirm": true}))
    }

    #[tokio::test]
    async fn a_retry_with_the_sealed_state_is_answered_and_anything_else_is_asked_again() {
        let first = RetryAsker {
            responses: None,
            state: None,
            who: "alice\0delete".into(),
            arguments: arguments_digest(&serde_json::Value::Null),
            timeout: Duration::from_secs(60),
        };
        let Answer::Deferred { request_state } = first.ask("Delete /a?").await else {
            panic!("a first call is not asked through an input-required result");
        };
        let answered = retry(Some(request_state.clone()), yes());
        assert_eq!(answered.ask("Delete /a?").await, Answer::Accepted);
        // Another question (the change is no longer what the person saw), another principal,
        // or a made-up state: asked again.
        assert!(matches!(
            answered.ask("Delete /b?").await,
            Answer::Deferred { .. }
        ));
        let mut bob = retry(Some(request_state), yes());
        bob.who = "bob\0delete".into();
        assert!(matches!(
            bob.ask("Delete /a?").await,
            Answer::Deferred { .. }
        ));
        let forged = retry(Some(format!("{}-00.{}", now_secs(), "0".repeat(64))), yes());
        assert!(matches!(
            forged.ask("Delete /a?").await,
            Answer::Deferred { .. }
        ));
        let Answer::Deferred { request_state } = first.ask("Delete /a?").await else {
            panic!("asked anew");
        };
        let no = retry(
            Some(request_state),
            ElicitResult::new(ElicitationAction::Decline),
        );
        assert_eq!(no.ask("Delete /a?").await, Answer::Declined);
    }

    /// Attack review of issue 41: one acceptance confirms exactly one call. The answered
    /// retry replayed, or retried with other arguments under the same state, is asked anew.
    #[tokio::test]
    async fn a_state_answers_one_retry_of_the_very_arguments_it_was_issued_for() {
        let args = |recursive: bool| {
            let value = serde_json::json!({"file_path": "/a", "recursive": recursive});
            arguments_digest(&value)
        };
        let mut first = retry(None, yes());
        first.responses = None;
        first.arguments = args(false);
        let Answer::Deferred { request_state } = first.ask("Delete /a?").await else {
            panic!("a first call is asked");
        };
        let mut other = retry(Some(request_state.clone()), yes());
        other.arguments = args(true);
        assert!(
            matches!(other.ask("Delete /a?").await, Answer::Deferred { .. }),
            "the same question reached with other arguments"
        );
        let mut answered = retry(Some(request_state), yes());
        answered.arguments = args(false);
        assert_eq!(answered.ask("Delete /a?").await, Answer::Accepted);
        assert!(
            matches!(answered.ask("Delete /a?").await, Answer::Deferred { .. }),
            "a replay"
        );
    }

    #[test]
    fn answered_states_are_remembered_until_they_expire_and_bounded() {
        let mut answered = Answered::default();
        assert_eq!(answered.take("1.a", 100, 50), Taken::First);
        assert_eq!(answered.take("1.a", 100, 60), Taken::Replayed);
        for k in 1..MAX_ANSWERED {
            assert_eq!(answered.take(&format!("2.{k}"), 200, 60), Taken::First);
        }
        assert_eq!(answered.take("3.x", 300, 60), Taken::Full);
        // Once the first expired, its room is taken back.
        assert_eq!(answered.take("3.x", 300, 101), Taken::First);
        assert_eq!(answered.until.len(), MAX_ANSWERED);
    }

    #[tokio::test]
    async fn an_answer_after_the_timeout_counts_as_unanswered() {
        let issued = format!("{}-00", now_secs() - 61);
        let state = format!(
            "{issued}.{}",
            seal(
                "alice\0delete",
                &issued,
                &arguments_digest(&serde_json::Value::Null),
                "Delete /a?"
            )
        );
        assert_eq!(
            retry(Some(state), yes()).ask("Delete /a?").await,
            Answer::Unanswered
        );
    }

    #[test]
    fn a_client_is_asked_only_with_form_elicitation() {
        let mut capabilities = ClientCapabilities::default();
        assert!(cannot_ask(Some(&capabilities)).is_some());
        assert!(cannot_ask(None).is_some());
        capabilities.elicitation = Some(Default::default());
        assert_eq!(cannot_ask(Some(&capabilities)), None);
    }
}
