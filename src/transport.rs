//! The stdio transport, with one addition: it stamps each file call with its arrival ticket.
//!
//! Lines from stdin are passed on to the MCP library unchanged, except that a well-formed
//! `tools/call` naming a `file_path` gets `params._meta["mountfs/ticket"]`, issued from the
//! session's [`ArrivalOrder`] at the moment the line is read. The library then runs requests
//! concurrently; the ticket lets calls on one file take turns in the order they were sent.
//! Anything else (including garbage) is forwarded as it is, for the library to handle.

use std::sync::Arc;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader, DuplexStream};

use crate::path::VirtualPath;
use crate::session::ArrivalOrder;

/// The `_meta` key carrying a call's arrival ticket.
pub const TICKET_META_KEY: &str = "mountfs/ticket";

/// Largest line buffered between stdin and the MCP library (bytes in flight).
const PIPE_BYTES: usize = 1 << 20;

/// Reads `input` line by line, stamps tickets, and returns the stream the MCP library reads.
pub fn stamp_arrivals<R>(input: R, arrival: Arc<ArrivalOrder>) -> DuplexStream
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let (library_side, mut our_side) = tokio::io::duplex(PIPE_BYTES);
    tokio::spawn(async move {
        let mut lines = BufReader::new(input).lines();
        loop {
            let line = match lines.next_line().await {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(error) => {
                    tracing::warn!(%error, "stdin could not be read");
                    break;
                }
            };
            let line = stamp_line(line, &arrival);
            if our_side.write_all(line.as_bytes()).await.is_err()
                || our_side.write_all(b"\n").await.is_err()
            {
                break;
            }
        }
        let _ = our_side.shutdown().await;
    });
    library_side
}

/// Adds the ticket to one line when it is a well-formed `tools/call` on a `file_path`.
fn stamp_line(line: String, arrival: &ArrivalOrder) -> String {
    if !line.contains("tools/call") {
        return line;
    }
    let Ok(mut message) = serde_json::from_str::<Value>(&line) else {
        return line;
    };
    let Some(path) = file_of_call(&message) else {
        return line;
    };
    let ticket = arrival.issue(&path);
    let meta = message
        .get_mut("params")
        .and_then(Value::as_object_mut)
        .map(|params| {
            params
                .entry("_meta")
                .or_insert_with(|| Value::Object(Default::default()))
        });
    match meta.and_then(Value::as_object_mut) {
        Some(meta) => {
            meta.insert(TICKET_META_KEY.into(), Value::from(ticket));
            message.to_string()
        }
        None => line,
    }
}

/// The file a `tools/call` request names, when the request is well formed.
fn file_of_call(message: &Value) -> Option<VirtualPath> {
    if message.get("method")?.as_str()? != "tools/call" || message.get("id").is_none() {
        return None;
    }
    let params = message.get("params")?.as_object()?;
    params.get("name")?.as_str()?;
    if let Some(meta) = params.get("_meta")
        && !meta.is_object()
    {
        return None;
    }
    let path = params
        .get("arguments")?
        .as_object()?
        .get("file_path")?
        .as_str()?;
    VirtualPath::parse(path).ok()
}

/// The ticket stamped on a call, read back from its `_meta`.
pub fn ticket_of(meta: &serde_json::Map<String, Value>) -> Option<u64> {
    meta.get(TICKET_META_KEY).and_then(Value::as_u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_well_formed_file_calls_are_stamped() {
        let arrival = ArrivalOrder::default();
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"edit_file","arguments":{"file_path":"a.txt"}}}"#;
        let stamped: Value = serde_json::from_str(&stamp_line(call.into(), &arrival)).unwrap();
        assert_eq!(stamped["params"]["_meta"][TICKET_META_KEY], 0);
        let again: Value = serde_json::from_str(&stamp_line(call.into(), &arrival)).unwrap();
        assert_eq!(again["params"]["_meta"][TICKET_META_KEY], 1);
        for untouched in [
            "garbage tools/call",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"x","arguments":{"file_path":"/a"}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x","arguments":{"file_path":"/../a"}}}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"x","arguments":{"path":"/a"}}}"#,
        ] {
            assert_eq!(stamp_line(untouched.into(), &arrival), untouched);
        }
    }
}
