//! Output of measured cases: the `Row` of one case, its JSON line on stdout
//! and the summary table on stderr. One place so field names and table
//! columns stay consistent.

use rmq::TopicKind;
use serde_json::{Map, Value};

/// One measured case.
pub(crate) struct Row {
    pub(crate) scenario: &'static str,
    pub(crate) kind: TopicKind,
    pub(crate) params: Value,
    pub(crate) msgs: u64,
    pub(crate) secs: f64,
    pub(crate) extra: Map<String, Value>,
}

impl Row {
    pub(crate) fn new(
        scenario: &'static str,
        kind: TopicKind,
        params: Value,
        msgs: u64,
        secs: f64,
    ) -> Row {
        Row {
            scenario,
            kind,
            params,
            msgs,
            secs,
            extra: Map::new(),
        }
    }
    pub(crate) fn with(mut self, name: &str, v: impl Into<Value>) -> Row {
        self.extra.insert(name.into(), v.into());
        self
    }
    pub(crate) fn rate(&self) -> f64 {
        if self.secs > 0.0 {
            self.msgs as f64 / self.secs
        } else {
            0.0
        }
    }
    pub(crate) fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("scenario".into(), self.scenario.into());
        m.insert("kind".into(), self.kind.as_str().into());
        m.insert("params".into(), self.params.clone());
        m.insert("msgs".into(), self.msgs.into());
        m.insert("secs".into(), round(self.secs, 4).into());
        m.insert("msgs_per_sec".into(), round(self.rate(), 1).into());
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        Value::Object(m)
    }
}

pub(crate) fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

fn compact(v: &Value) -> String {
    match v {
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{k}={}", compact(v)))
            .collect::<Vec<_>>()
            .join(" "),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub(crate) fn table(rows: &[Row]) -> String {
    let mut lines = vec![format!(
        "{:<12} {:<11} {:<28} {:>9} {:>8} {:>11}  {}",
        "scenario", "kind", "params", "msgs", "secs", "msgs/s", "extra"
    )];
    for r in rows {
        lines.push(format!(
            "{:<12} {:<11} {:<28} {:>9} {:>8.3} {:>11.0}  {}",
            r.scenario,
            r.kind.as_str(),
            compact(&r.params),
            r.msgs,
            r.secs,
            r.rate(),
            compact(&Value::Object(r.extra.clone()))
        ));
    }
    lines.join("\n")
}
