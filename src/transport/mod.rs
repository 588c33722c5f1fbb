//! Transports: where bytes from a client become MCP messages for the library, and where each
//! file call takes its place in the arrival order of its file.
//!
//! - [`message`]: one line or body → a message, or the JSON-RPC error it deserves (pure).
//! - [`stdio`]: newline-delimited JSON-RPC on stdin/stdout, every line answered.
//!
//! The MCP library runs requests concurrently, so calls that arrive together reach the tools
//! in any order. [`take_turn`] gives a `tools/call` naming a `file_path` a ticket from the
//! session's [`ArrivalOrder`] the moment it is read, as an [`Arc<Turn>`] in the request's
//! extensions. The turn travels with the request; whoever drops the request last — the tool
//! when it is done, or the library when it refuses, cancels or drops it unserved — releases the
//! place, so no call ever waits for one that will not come.

pub mod message;
pub mod stdio;

use std::sync::Arc;

use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use serde_json::Value;

use crate::path::VirtualPath;
use crate::session::{ArrivalOrder, Turn};

pub use stdio::{DEFAULT_MAX_MESSAGE_BYTES, StdioTransport, stdio};

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
    use std::time::Duration;

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
}
