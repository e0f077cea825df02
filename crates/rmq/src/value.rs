//! Small readers for script replies (arrays of integers, strings and nils).

use redis::Value;

/// The items of an array reply (empty for anything else).
pub(crate) fn items(v: Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a,
        _ => Vec::new(),
    }
}

/// A ZSET score as Lua hands it over: a string, possibly in exponent form
/// (a whole number, as every score rmq writes is).
pub(crate) fn as_score(v: &Value) -> Option<i64> {
    if let Some(n) = as_int(v) {
        return Some(n);
    }
    let Value::BulkString(b) = v else { return None };
    let f: f64 = std::str::from_utf8(b).ok()?.parse().ok()?;
    f.is_finite().then_some(f as i64)
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
