//! Small readers for script replies (arrays of integers, strings and nils).

use redis::Value;

/// The items of an array reply (empty for anything else).
pub(crate) fn items(v: Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a,
        _ => Vec::new(),
    }
}

/// An integer at `i` (also parsed from a string).
pub(crate) fn int_at(a: &[Value], i: usize) -> Option<i64> {
    a.get(i).and_then(as_int)
}

pub(crate) fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

/// Bytes at `i` (a bulk string).
pub(crate) fn bytes_at(a: &[Value], i: usize) -> Option<Vec<u8>> {
    match a.get(i)? {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.as_bytes().to_vec()),
        Value::Int(n) => Some(n.to_string().into_bytes()),
        _ => None,
    }
}
