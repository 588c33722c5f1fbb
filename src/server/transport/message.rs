//! One incoming line (or HTTP body) → a JSON-RPC message for the MCP library, or the JSON-RPC
//! error the specification gives it. Pure: no I/O, no state.
//!
//! The steps, each with its answer when it fails (JSON-RPC 2.0 §5.1, MCP "Base Protocol"):
//! 1. UTF-8 (a leading byte-order mark is ignored): else -32700, id null.
//! 2. JSON: else -32700, id null. Nesting is measured first by a scan without recursion
//!    ([`scan_json`]), so a 100,000-deep array is answered, never a stack overflow.
//! 3. One object: an array is a batch, removed from MCP in 2025-06-18: -32600, id null; a
//!    string, number, … is not a message: -32600, id null; nesting deeper than
//!    [`MAX_NESTING`] levels: -32600.
//! 4. Its shape: `"jsonrpc": "2.0"`, a string `method`, an `id` that is a string or an integer
//!    (not null, not a fraction, not an object): else -32600, with the id when it is readable.
//! 5. Its params: a known method whose params do not fit: -32602 with the id. An unknown
//!    method goes on to the library, which answers -32601.
//!
//! Notifications and responses are never answered (JSON-RPC forbids it): a malformed one is
//! dropped with a log line.

use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, InitializeRequestParams,
    JsonRpcMessage, JsonRpcRequest,
};
use serde::Deserialize;
use serde_json::{Value, json};

/// JSON-RPC "Parse error": the line is not UTF-8 JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC "Invalid Request": JSON, but not a request or notification.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC "Invalid params".
pub const INVALID_PARAMS: i64 = -32602;

/// Deepest nesting of arrays and objects a message may have. No MCP message needs more than
/// a dozen; `serde_json` itself stops at 128, and staying under that keeps its error for a
/// deep line from being the answer to a valid one.
pub const MAX_NESTING: usize = 100;

/// The requests MCP defines from client to server, which the library parses into typed
/// variants. A line naming one of these whose params do not fit falls through the library's
/// untagged parse to its "custom request" variant, which would be answered -32601 (method not
/// found); it is answered -32602 (invalid params) here instead.
const TYPED_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "resources/directory/read",
    "subscriptions/listen",
    "tools/call",
    "tools/list",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "skills/list",
    "skills/get",
];

/// What to do with one line.
#[derive(Debug)]
pub enum Incoming {
    /// A message for the MCP library.
    Message(Box<ClientJsonRpcMessage>),
    /// The JSON-RPC error response to write back (a complete JSON-RPC object).
    Answer(Value),
    /// Nothing to deliver and nothing to answer (a blank line, a malformed notification or
    /// response); the reason is for the log.
    Dropped(String),
}

/// Classifies one line without its line ending (see the module doc).
pub fn classify(line: &[u8]) -> Incoming {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Incoming::Dropped("blank line".into());
    }
    if let Err(error) = std::str::from_utf8(line) {
        return answer(
            PARSE_ERROR,
            None,
            format!(
                "Parse error: the message is not valid UTF-8 (bad byte at offset {}); send UTF-8 JSON, one message per line",
                error.valid_up_to()
            ),
        );
    }
    if let Ok(depth) = scan_json(line)
        && depth > MAX_NESTING
    {
        let what = match line.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'[') => "an array (a batch? batches were removed from MCP in 2025-06-18)",
            _ => "a value",
        };
        return answer(
            INVALID_REQUEST,
            None,
            format!(
                "Invalid Request: {what} nested {depth} levels deep; a message may nest at most {MAX_NESTING} levels"
            ),
        );
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(error) => {
            return answer(
                PARSE_ERROR,
                None,
                format!(
                    "Parse error: the message is not valid JSON ({error}); send one JSON-RPC object per line"
                ),
            );
        }
    };
    classify_value(value)
}

/// Steps 3 to 5 of the module doc, on a parsed value.
pub fn classify_value(value: Value) -> Incoming {
    let object = match &value {
        Value::Object(object) => object,
        Value::Array(_) => {
            return answer(
                INVALID_REQUEST,
                None,
                "Invalid Request: batches (JSON arrays) are not supported since MCP 2025-06-18; send each message on its own line".into(),
            );
        }
        other => {
            return answer(
                INVALID_REQUEST,
                None,
                format!(
                    "Invalid Request: a JSON-RPC message is an object, not {}",
                    kind(other)
                ),
            );
        }
    };
    let id = object.get("id");
    let readable_id = id.and_then(readable_id);
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return match object.get("method") {
            Some(_) if id.is_none() => Incoming::Dropped("notification without jsonrpc 2.0".into()),
            None if !object.contains_key("result") && !object.contains_key("error") => answer(
                INVALID_REQUEST,
                readable_id,
                "Invalid Request: \"jsonrpc\" must be \"2.0\"".into(),
            ),
            None => Incoming::Dropped("response without jsonrpc 2.0".into()),
            Some(_) => answer(
                INVALID_REQUEST,
                readable_id,
                "Invalid Request: \"jsonrpc\" must be \"2.0\"".into(),
            ),
        };
    }
    let method = match object.get("method") {
        None if object.contains_key("result") || object.contains_key("error") => {
            // A response to a request of ours: handed on; a malformed one is dropped.
            return match serde_json::from_value::<ClientJsonRpcMessage>(value) {
                Ok(message) => Incoming::Message(Box::new(message)),
                Err(error) => Incoming::Dropped(format!("malformed response: {error}")),
            };
        }
        None => {
            return answer(
                INVALID_REQUEST,
                readable_id,
                "Invalid Request: the object has no \"method\" (nor \"result\"/\"error\" of a response)".into(),
            );
        }
        Some(Value::String(method)) => method.clone(),
        Some(other) if id.is_none() => {
            return Incoming::Dropped(format!("notification whose method is {}", kind(other)));
        }
        Some(other) => {
            return answer(
                INVALID_REQUEST,
                readable_id,
                format!(
                    "Invalid Request: \"method\" must be a string, not {}",
                    kind(other)
                ),
            );
        }
    };
    let Some(id) = id else {
        return match serde_json::from_value::<ClientJsonRpcMessage>(value) {
            Ok(message) => Incoming::Message(Box::new(message)),
            Err(error) => Incoming::Dropped(format!("malformed notification {method}: {error}")),
        };
    };
    if readable_id.is_none() {
        return answer(
            INVALID_REQUEST,
            None,
            format!(
                "Invalid Request: \"id\" must be a string or an integer, not {}",
                kind(id)
            ),
        );
    }
    // Parsed from a borrow, so that the params are still at hand for an error message without
    // a copy of them (they can be megabytes) on every request.
    let parsed = ClientJsonRpcMessage::deserialize(&value);
    let params = object.get("params");
    let problem = match &parsed {
        Err(_)
        | Ok(JsonRpcMessage::Request(JsonRpcRequest {
            request: ClientRequest::CustomRequest(_),
            ..
        })) if TYPED_METHODS.contains(&method.as_str()) => Some(params_problem(&method, params)),
        Err(error) => Some(error.to_string()),
        Ok(_) => None,
    };
    match (parsed, problem) {
        (Ok(message), None) => Incoming::Message(Box::new(message)),
        (_, problem) => answer(
            INVALID_PARAMS,
            readable_id,
            format!(
                "Invalid params for {method}: {}",
                problem.unwrap_or_default()
            ),
        ),
    }
}

/// Why `params` do not fit `method`, in the words of the params type's own parser.
fn params_problem(method: &str, params: Option<&Value>) -> String {
    let Some(params) = params else {
        return "\"params\" is missing".into();
    };
    if !params.is_object() {
        return format!("\"params\" must be an object, not {}", kind(params));
    }
    let error = match method {
        "tools/call" => CallToolRequestParams::deserialize(params).err(),
        "initialize" => InitializeRequestParams::deserialize(params).err(),
        _ => None,
    };
    match error {
        Some(error) => error.to_string(),
        None => "they do not match the method's schema".into(),
    }
}

/// The id when it is one MCP allows (a string, or an integer — `1.0` counts, as the library
/// reads it so), to echo in an error.
fn readable_id(id: &Value) -> Option<Value> {
    match id {
        Value::String(_) => Some(id.clone()),
        Value::Number(n) if n.is_i64() => Some(id.clone()),
        Value::Number(n) if n.is_u64() => None,
        Value::Number(n) => n
            .as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0)
            .map(|f| json!(f as i64)),
        _ => None,
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a fractional number",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn answer(code: i64, id: Option<Value>, message: String) -> Incoming {
    Incoming::Answer(json!({
        "jsonrpc": "2.0",
        "id": id.unwrap_or(Value::Null),
        "error": {"code": code, "message": message},
    }))
}

/// Checks that `bytes` are one JSON value (RFC 8259) and returns its deepest nesting of arrays
/// and objects, or the offset of the first byte that is wrong. Iterative, with one byte of
/// state per open container, so any depth costs no stack. Assumes valid UTF-8 (checked first).
pub fn scan_json(bytes: &[u8]) -> Result<usize, usize> {
    #[derive(Clone, Copy)]
    enum Want {
        Value,
        ValueOrEnd,
        KeyOrEnd,
        Key,
        Colon,
        After,
    }
    let mut open: Vec<u8> = Vec::new();
    let mut deepest = 0;
    let mut want = Want::Value;
    let mut i = 0;
    loop {
        while i < bytes.len() && matches!(bytes[i], b' ' | b'\t' | b'\n' | b'\r') {
            i += 1;
        }
        let Some(&b) = bytes.get(i) else {
            return match (want, open.is_empty()) {
                (Want::After, true) => Ok(deepest),
                _ => Err(i),
            };
        };
        want = match want {
            Want::ValueOrEnd if b == b']' => {
                open.pop();
                i += 1;
                Want::After
            }
            Want::KeyOrEnd if b == b'}' => {
                open.pop();
                i += 1;
                Want::After
            }
            Want::KeyOrEnd | Want::Key if b == b'"' => {
                i = scan_string(bytes, i)?;
                Want::Colon
            }
            Want::KeyOrEnd | Want::Key => return Err(i),
            Want::Colon if b == b':' => {
                i += 1;
                Want::Value
            }
            Want::Colon => return Err(i),
            Want::Value | Want::ValueOrEnd => match b {
                b'[' | b'{' => {
                    open.push(b);
                    deepest = deepest.max(open.len());
                    i += 1;
                    if b == b'[' {
                        Want::ValueOrEnd
                    } else {
                        Want::KeyOrEnd
                    }
                }
                b'"' => {
                    i = scan_string(bytes, i)?;
                    Want::After
                }
                b'-' | b'0'..=b'9' => {
                    i = scan_number(bytes, i)?;
                    Want::After
                }
                _ => {
                    let literal: &[u8] = match b {
                        b't' => b"true",
                        b'f' => b"false",
                        b'n' => b"null",
                        _ => return Err(i),
                    };
                    if !bytes[i..].starts_with(literal) {
                        return Err(i);
                    }
                    i += literal.len();
                    Want::After
                }
            },
            Want::After => match (open.last(), b) {
                (None, _) => return Err(i),
                (Some(b'['), b',') => {
                    i += 1;
                    Want::Value
                }
                (Some(b'{'), b',') => {
                    i += 1;
                    Want::Key
                }
                (Some(b'['), b']') | (Some(b'{'), b'}') => {
                    open.pop();
                    i += 1;
                    Want::After
                }
                _ => return Err(i),
            },
        };
    }
}

/// The offset after the string starting with the quote at `start`.
fn scan_string(bytes: &[u8], start: usize) -> Result<usize, usize> {
    let mut i = start + 1;
    loop {
        match bytes.get(i) {
            None => return Err(i),
            Some(b'"') => return Ok(i + 1),
            Some(b'\\') => match bytes.get(i + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                Some(b'u') => {
                    let hex = bytes.get(i + 2..i + 6).ok_or(i)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return Err(i);
                    }
                    i += 6;
                }
                _ => return Err(i),
            },
            Some(&c) if c < 0x20 => return Err(i),
            Some(_) => i += 1,
        }
    }
}

/// The offset after the number starting at `start` (`-? int frac? exp?`).
fn scan_number(bytes: &[u8], start: usize) -> Result<usize, usize> {
    let digits = |mut i: usize| {
        let from = i;
        while bytes.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == from { Err(i) } else { Ok(i) }
    };
    let mut i = start;
    if bytes.get(i) == Some(&b'-') {
        i += 1;
    }
    i = match bytes.get(i) {
        Some(b'0') => i + 1,
        _ => digits(i)?,
    };
    if bytes.get(i) == Some(&b'.') {
        i = digits(i + 1)?;
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        i = digits(i)?;
    }
    Ok(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(line: &[u8]) -> (i64, Value, String) {
        match classify(line) {
            Incoming::Answer(answer) => (
                answer["error"]["code"].as_i64().unwrap(),
                answer["id"].clone(),
                answer["error"]["message"].as_str().unwrap().to_owned(),
            ),
            other => panic!(
                "{} was not answered: {other:?}",
                String::from_utf8_lossy(line)
            ),
        }
    }

    fn delivered(line: &str) -> ClientJsonRpcMessage {
        match classify(line.as_bytes()) {
            Incoming::Message(message) => *message,
            other => panic!("{line} was not delivered: {other:?}"),
        }
    }

    #[test]
    fn invalid_utf8_and_invalid_json_are_parse_errors_with_a_null_id() {
        let (code, id, message) =
            answered(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"p\xffng\"}");
        assert_eq!((code, id), (PARSE_ERROR, Value::Null));
        assert!(
            message.contains("not valid UTF-8 (bad byte at offset 35)"),
            "{message}"
        );
        let (code, id, message) = answered(b"{\"jsonrpc\": \"2.0\", \"id\": 9, \"method\": ");
        assert_eq!((code, id), (PARSE_ERROR, Value::Null));
        assert!(
            message.contains("not valid JSON (EOF while parsing"),
            "{message}"
        );
        assert_eq!(answered(b"\0").0, PARSE_ERROR);
        assert_eq!(answered(&[b'['; 100_000]).0, PARSE_ERROR);
    }

    #[test]
    fn deep_nesting_is_an_invalid_request_not_a_stack_overflow() {
        let depth = 100_000;
        let mut deep = vec![b'['; depth];
        deep.extend(std::iter::repeat_n(b']', depth));
        let (code, id, message) = answered(&deep);
        assert_eq!((code, id), (INVALID_REQUEST, Value::Null));
        assert!(message.contains("nested 100000 levels deep"), "{message}");
        let mut object = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":"#.to_vec();
        object.extend(std::iter::repeat_n(b'[', 200));
        object.extend(std::iter::repeat_n(b']', 200));
        object.extend(b"}}");
        assert_eq!(answered(&object).0, INVALID_REQUEST);
    }

    #[test]
    fn values_that_are_not_messages_are_invalid_requests() {
        for (line, id) in [
            (
                &br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#[..],
                Value::Null,
            ),
            (b"[]", Value::Null),
            (b"42", Value::Null),
            (b"\"ping\"", Value::Null),
            (b"null", Value::Null),
            (br#"{}"#, Value::Null),
            (br#"{"jsonrpc":"2.0","id":7}"#, json!(7)),
            (br#"{"jsonrpc":"1.0","id":"a","method":"ping"}"#, json!("a")),
            (br#"{"id":3,"method":"ping"}"#, json!(3)),
            (br#"{"jsonrpc":"2.0","id":4,"method":12}"#, json!(4)),
            (
                br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                Value::Null,
            ),
            (
                br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
                Value::Null,
            ),
            (
                br#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
                Value::Null,
            ),
            (
                br#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#,
                Value::Null,
            ),
            (
                br#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
                Value::Null,
            ),
        ] {
            let (code, got, _) = answered(line);
            assert_eq!(
                (code, got),
                (INVALID_REQUEST, id),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn known_methods_with_bad_params_are_invalid_params_with_the_id() {
        let (code, id, message) = answered(
            br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"ls","arguments":5}}"#,
        );
        assert_eq!((code, id), (INVALID_PARAMS, json!(5)));
        assert!(
            message.starts_with(
                "Invalid params for tools/call: invalid type: integer `5`, expected a map"
            ),
            "{message}"
        );
        let (code, _, message) = answered(br#"{"jsonrpc":"2.0","id":"x","method":"tools/call"}"#);
        assert_eq!(code, INVALID_PARAMS);
        assert!(message.ends_with("\"params\" is missing"), "{message}");
        let (code, _, message) =
            answered(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":[1]}"#);
        assert_eq!(code, INVALID_PARAMS);
        assert!(
            message.contains("must be an object, not an array"),
            "{message}"
        );
    }

    #[test]
    fn good_messages_and_unknown_methods_go_to_the_library() {
        delivered(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
        delivered(r#"{"jsonrpc":"2.0","id":1.0,"method":"tools/list"}"#);
        delivered("\u{feff}{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"no/such\"}");
        delivered(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        delivered(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#);
        let call = delivered(
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ls","arguments":{"path":"/"}}}"#,
        );
        assert!(matches!(
            call,
            JsonRpcMessage::Request(ref r) if matches!(r.request, ClientRequest::CallToolRequest(_))
        ));
    }

    #[test]
    fn notifications_and_responses_are_never_answered() {
        for line in [
            "",
            "   \t",
            r#"{"jsonrpc":"2.0","method":7}"#,
            r#"{"method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":5,"error":{}}"#,
            r#"{"result":{}}"#,
        ] {
            assert!(
                matches!(classify(line.as_bytes()), Incoming::Dropped(_)),
                "{line}"
            );
        }
    }

    #[test]
    fn the_scanner_agrees_with_serde_json() {
        // Each text, and whether it is one JSON value.
        for (text, valid) in [
            ("0", true),
            ("-0.5e+3", true),
            ("\"a\\u00e9\\n\"", true),
            ("[]", true),
            ("{}", true),
            (" [1, {\"a\": [true, false, null]}] ", true),
            ("{\"a\":{\"b\":{}}}", true),
            ("", false),
            ("01", false),
            ("1.", false),
            ("-", false),
            ("[1,]", false),
            ("{\"a\"}", false),
            ("{\"a\":1,}", false),
            ("[1 2]", false),
            ("tru", false),
            ("\"\\x\"", false),
            ("\"a", false),
            ("{1:2}", false),
            ("[}", false),
            ("1 2", false),
            ("\"\u{1}\"", false),
            ("nul", false),
        ] {
            let serde_says = serde_json::from_str::<Value>(text).is_ok();
            assert_eq!(serde_says, valid, "{text}");
            assert_eq!(scan_json(text.as_bytes()).is_ok(), valid, "{text}");
        }
        assert_eq!(scan_json(b"[[1],{\"a\":[2]}]"), Ok(3));
    }

    /// Lines near real messages: each seed with a few bytes flipped, dropped, duplicated or
    /// cut (a fixed xorshift sequence, so a failure is reproducible).
    fn mutated_lines() -> Vec<Vec<u8>> {
        let seeds: [&[u8]; 5] = [
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"edit_file","arguments":{"file_path":"/a.txt","old_string":"x\n","new_string":"\u00e9"}}}"#,
            br#"{"jsonrpc":"2.0","id":"abc","method":"ping"}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"t"}}"#,
            br#"{"jsonrpc":"2.0","id":3,"result":{"roots":[{"uri":"file:///x","name":"x"}]}}"#,
            br#"[{"a":[1,-2.5e3,true,false,null,{}]},"\"\\"]"#,
        ];
        let alphabet = b"{}[]\",:0123456789.-+eE \\\tu\"ntrfals\x00\xff";
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut lines = Vec::new();
        for round in 0..4000 {
            let mut line = seeds[round % seeds.len()].to_vec();
            for _ in 0..1 + next() % 3 {
                let at = (next() % (line.len() as u64 + 1)) as usize;
                let byte = alphabet[(next() % alphabet.len() as u64) as usize];
                match next() % 4 {
                    0 if at < line.len() => line[at] = byte,
                    1 if at < line.len() => {
                        line.remove(at);
                    }
                    2 => line.insert(at, byte),
                    _ => line.truncate(at),
                }
            }
            lines.push(line);
        }
        lines
    }

    #[test]
    fn mutated_messages_are_each_delivered_answered_or_dropped_as_serde_json_reads_them() {
        for line in mutated_lines() {
            let shown = String::from_utf8_lossy(&line).into_owned();
            let parsed = std::str::from_utf8(&line)
                .ok()
                .map(serde_json::from_str::<Value>);
            if let Some(parsed) = &parsed {
                match (scan_json(&line), parsed) {
                    (Ok(_), Ok(_)) | (Err(_), Err(_)) => {}
                    // serde_json refuses some valid JSON: lone surrogates, huge numbers.
                    (Ok(_), Err(e))
                        if e.to_string().contains("surrogate")
                            || e.to_string().contains("out of range") => {}
                    (scan, serde) => panic!("{shown}: scan {scan:?}, serde_json {serde:?}"),
                }
            }
            match classify(&line) {
                Incoming::Answer(answer) => {
                    let code = answer["error"]["code"].as_i64().unwrap();
                    let not_json = !matches!(parsed, Some(Ok(_)));
                    assert_eq!(code == PARSE_ERROR, not_json, "{shown}: {answer}");
                    assert!(
                        [PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS].contains(&code),
                        "{shown}: {answer}"
                    );
                }
                Incoming::Message(message) => {
                    assert!(matches!(parsed, Some(Ok(Value::Object(_)))), "{shown}");
                    serde_json::to_string(&message).unwrap();
                }
                Incoming::Dropped(_) => {
                    assert!(
                        line.iter().all(u8::is_ascii_whitespace)
                            || matches!(parsed, Some(Ok(Value::Object(_)))),
                        "{shown}"
                    );
                }
            }
        }
    }
}
