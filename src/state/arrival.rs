//! The arrival order of a session's file calls: one ticket per call naming a file, issued as the
//! request is read, redeemed when the tool locks that file.
//!
//! The MCP library runs requests concurrently, so calls that arrive together reach the tools in
//! any order. [`take_turn`] gives a `tools/call` naming a `file_path` a ticket from the session's
//! [`ArrivalOrder`] the moment a transport reads it (stdio: the line; HTTP: the body, in
//! `http::gate`), as an [`Arc<Turn>`] in the request's extensions; the server takes it out with
//! [`turn_of`] — no second parse — and hands it to the tool call as an argument
//! (`tools::CallContext::turn`). A tool redeems it in `Session::lock_file`: [`Turn::wait`] until
//! every call that arrived earlier on that file is done, so parallel edits land in the order they
//! were sent (CONTRACT §4). Whoever drops the turn last — the tool when it is done, or the library
//! when it refuses, cancels or drops the request unserved — releases the place, so no call ever
//! waits for one that will not come.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use serde_json::Value;
use tokio::sync::watch;

use crate::ground::path::VirtualPath;

/// How long a call waits for the calls that arrived before it on the same file. Only a bug
/// (a ticket never released) could make it wait this long; then it goes ahead rather than hang.
pub const TURN_WAIT_LIMIT: Duration = Duration::from_secs(60);

/// Arrival order of this session's calls per file.
///
/// The MCP library runs each request in a task of its own, so requests that arrive together
/// reach the tools in any order. The transport reader issues a ticket per file-changing call
/// *as the line arrives*; a call then waits for its [`Turn`] before it touches the file, so
/// parallel edits land in the order they were sent (CONTRACT §4).
#[derive(Debug, Default)]
pub struct ArrivalOrder {
    queues: Mutex<HashMap<VirtualPath, PathQueue>>,
}

#[derive(Debug)]
struct PathQueue {
    issued: u64,
    next: watch::Sender<u64>,
    done: BTreeSet<u64>,
}

impl ArrivalOrder {
    /// Issues the next ticket for `path` (call in arrival order).
    pub fn issue(&self, path: &VirtualPath) -> u64 {
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        let queue = queues.entry(path.clone()).or_insert_with(|| PathQueue {
            issued: 0,
            next: watch::Sender::new(0),
            done: BTreeSet::new(),
        });
        let ticket = queue.issued;
        queue.issued += 1;
        ticket
    }

    /// The turn of `ticket` on `path`; released when dropped, used or not.
    pub fn turn(self: &Arc<Self>, path: VirtualPath, ticket: u64) -> Turn {
        Turn {
            order: self.clone(),
            path,
            ticket,
        }
    }

    fn release(&self, path: &VirtualPath, ticket: u64) {
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(queue) = queues.get_mut(path) else {
            return;
        };
        queue.done.insert(ticket);
        let mut next = *queue.next.borrow();
        while queue.done.remove(&next) {
            next += 1;
        }
        queue.next.send_replace(next);
        if next == queue.issued {
            queues.remove(path);
        }
    }

    fn receiver(&self, path: &VirtualPath) -> Option<watch::Receiver<u64>> {
        let queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        queues.get(path).map(|q| q.next.subscribe())
    }
}

/// One call's place in the arrival order of a file (see [`ArrivalOrder`]).
#[derive(Debug)]
pub struct Turn {
    order: Arc<ArrivalOrder>,
    path: VirtualPath,
    ticket: u64,
}

impl Turn {
    /// The file this turn is for.
    pub fn path(&self) -> &VirtualPath {
        &self.path
    }

    /// Waits until every call that arrived earlier on this file has finished.
    pub async fn wait(&self) {
        let Some(mut next) = self.order.receiver(&self.path) else {
            return;
        };
        let ticket = self.ticket;
        let waited = tokio::time::timeout(TURN_WAIT_LIMIT, next.wait_for(|n| *n >= ticket)).await;
        if waited.is_err() {
            tracing::warn!(path = %self.path, ticket, "gave up waiting for earlier calls");
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.order.release(&self.path, self.ticket);
    }
}

/// Gives `message` its place in the arrival order of its file when it is a `tools/call` whose
/// arguments name a valid `file_path`. Call in arrival order.
pub fn take_turn(message: &mut ClientJsonRpcMessage, arrival: &Arc<ArrivalOrder>) {
    let JsonRpcMessage::Request(request) = message else {
        return;
    };
    let ClientRequest::CallToolRequest(call) = &mut request.request else {
        return;
    };
    let Some(path) = call
        .params
        .arguments
        .as_ref()
        .and_then(|arguments| arguments.get("file_path"))
        .and_then(Value::as_str)
        .and_then(|path| VirtualPath::parse(path).ok())
    else {
        return;
    };
    let ticket = arrival.issue(&path);
    call.extensions.insert(Arc::new(arrival.turn(path, ticket)));
}

/// The turn [`take_turn`] gave a request, from the extensions the library hands the handler
/// (over HTTP, from the request's `http::request::Parts`, where the gate put it).
pub fn turn_of(extensions: &rmcp::model::Extensions) -> Option<Arc<Turn>> {
    extensions.get::<Arc<Turn>>().cloned().or_else(|| {
        let parts = extensions.get::<http::request::Parts>()?;
        parts.extensions.get::<Arc<Turn>>().cloned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> VirtualPath {
        VirtualPath::parse(s).unwrap()
    }

    fn call(id: u64, tool: &str, arguments: Value) -> ClientJsonRpcMessage {
        serde_json::from_value(serde_json::json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}
        }))
        .unwrap()
    }

    fn turn(message: &ClientJsonRpcMessage) -> Option<Arc<Turn>> {
        match message {
            JsonRpcMessage::Request(request) => match &request.request {
                ClientRequest::CallToolRequest(call) => turn_of(&call.extensions),
                _ => None,
            },
            _ => None,
        }
    }

    #[test]
    fn only_file_calls_take_a_turn() {
        let arrival = Arc::new(ArrivalOrder::default());
        let mut edit = call(1, "edit_file", serde_json::json!({"file_path": "a.txt"}));
        take_turn(&mut edit, &arrival);
        assert_eq!(turn(&edit).unwrap().path().as_str(), "/a.txt");
        for mut other in [
            call(2, "ls", serde_json::json!({"path": "/"})),
            call(3, "edit_file", serde_json::json!({"file_path": "/../a"})),
            call(4, "edit_file", serde_json::json!({"file_path": 5})),
        ] {
            take_turn(&mut other, &arrival);
            assert!(turn(&other).is_none());
        }
    }

    #[tokio::test]
    async fn a_request_dropped_unserved_releases_its_place() {
        let arrival = Arc::new(ArrivalOrder::default());
        let mut dropped = call(1, "edit_file", serde_json::json!({"file_path": "/a.txt"}));
        take_turn(&mut dropped, &arrival);
        let mut next = call(2, "edit_file", serde_json::json!({"file_path": "/a.txt"}));
        take_turn(&mut next, &arrival);
        let next_turn = turn(&next).unwrap();
        let waiting = tokio::spawn(async move { next_turn.wait().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiting.is_finished(),
            "the second call waits for the first"
        );
        drop(dropped);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("released when the first request was dropped")
            .unwrap();
    }

    #[tokio::test]
    async fn turns_are_served_in_ticket_order_even_when_skipped() {
        let order = Arc::new(ArrivalOrder::default());
        let path = p("/f");
        let tickets: Vec<u64> = (0..3).map(|_| order.issue(&path)).collect();
        assert_eq!(tickets, vec![0, 1, 2]);
        let first = order.turn(path.clone(), 0);
        let second = order.turn(path.clone(), 1);
        let third = order.turn(path.clone(), 2);
        // The second is dropped unused (a call that failed before touching the file).
        drop(second);
        let waiting = tokio::spawn(async move {
            third.wait().await;
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "the third waits for the first");
        drop(first);
        waiting.await.unwrap();
        assert!(order.receiver(&path).is_none(), "an idle queue is removed");
    }
}
