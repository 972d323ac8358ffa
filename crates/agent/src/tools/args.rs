//! Tool argument tables. One table per tool drives both the JSON schema the model is shown and
//! the checking of what it sends back, so the two cannot drift apart.

use serde_json::{Map, Value, json};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    String,
    /// A non-negative whole number.
    Integer,
    Boolean,
}

impl Kind {
    fn json_type(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Integer => "integer",
            Kind::Boolean => "boolean",
        }
    }

    fn accepts(self, value: &Value) -> bool {
        match self {
            Kind::String => value.is_string(),
            Kind::Integer => as_count(value).is_some(),
            Kind::Boolean => value.is_boolean(),
        }
    }
}

/// Whole non-negative numbers, including `10.0` (some JSON writers emit every number as a float).
fn as_count(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f <= u64::MAX as f64)
            .map(|f| f as u64)
    })
}

pub(crate) struct Param {
    pub name: &'static str,
    pub kind: Kind,
    pub required: bool,
    pub description: &'static str,
}

impl Param {
    pub const fn required(name: &'static str, kind: Kind, description: &'static str) -> Self {
        Self {
            name,
            kind,
            required: true,
            description,
        }
    }

    pub const fn optional(name: &'static str, kind: Kind, description: &'static str) -> Self {
        Self {
            name,
            kind,
            required: false,
            description,
        }
    }
}

/// A tool as the model sees it: name, description and arguments.
pub(crate) struct Spec {
    pub name: &'static str,
    pub description: &'static str,
    pub params: &'static [Param],
}

impl Spec {
    /// The OpenAI-style function schema.
    pub fn schema(&self) -> Value {
        let mut properties = Map::new();
        for p in self.params {
            properties.insert(
                p.name.into(),
                json!({ "type": p.kind.json_type(), "description": p.description }),
            );
        }
        let required: Vec<&str> = self
            .params
            .iter()
            .filter(|p| p.required)
            .map(|p| p.name)
            .collect();
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": properties,
                    "required": required,
                    "additionalProperties": false,
                },
            },
        })
    }

    /// `file_path (string, required), offset (integer, optional)`: repeated in every argument
    /// error so the model can fix its call without looking the schema up again.
    fn usage(&self) -> String {
        self.params
            .iter()
            .map(|p| {
                let need = if p.required { "required" } else { "optional" };
                format!("{} ({}, {need})", p.name, p.kind.json_type())
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn invalid(&self, problem: String) -> String {
        format!(
            "Invalid arguments for {}: {problem}. Expected arguments: {}.",
            self.name,
            self.usage()
        )
    }

    /// Checks a call's arguments against the table. A JSON object encoded as a string is
    /// accepted too (some tool-call formats quote the whole object), and `null` counts as
    /// leaving an optional argument out.
    pub fn check(&self, arguments: &Value) -> Result<Args, String> {
        let map = match arguments {
            Value::Object(map) => map.clone(),
            Value::Null => Map::new(),
            Value::String(text) => match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(map)) => map,
                _ => return Err(self.invalid("arguments must be a JSON object".into())),
            },
            other => {
                return Err(self.invalid(format!(
                    "arguments must be a JSON object, not {}",
                    json_kind(other)
                )));
            }
        };
        let mut unknown: Vec<&str> = map
            .keys()
            .filter(|k| !self.params.iter().any(|p| p.name == k.as_str()))
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            unknown.sort_unstable();
            let list = unknown
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(self.invalid(format!("unknown argument {list}")));
        }
        let mut values = Map::new();
        for p in self.params {
            match map.get(p.name) {
                None | Some(Value::Null) if p.required => {
                    return Err(self.invalid(format!("missing required argument `{}`", p.name)));
                }
                None | Some(Value::Null) => {}
                Some(v) if !p.kind.accepts(v) => {
                    let want = match p.kind {
                        Kind::Integer => "a non-negative integer",
                        Kind::String => "a string",
                        Kind::Boolean => "a boolean (true or false)",
                    };
                    return Err(self.invalid(format!(
                        "`{}` must be {want}, not {}",
                        p.name,
                        json_kind(v)
                    )));
                }
                Some(v) => {
                    values.insert(p.name.into(), v.clone());
                }
            }
        }
        Ok(Args(values))
    }
}

fn json_kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// Arguments that passed [`Spec::check`]: present values have their declared kind.
pub(crate) struct Args(Map<String, Value>);

impl Args {
    pub fn str(&self, name: &str) -> Option<&str> {
        self.0.get(name).and_then(Value::as_str)
    }

    /// A required string: after checking it is always there, and `""` stands in otherwise.
    pub fn text(&self, name: &str) -> &str {
        self.str(name).unwrap_or_default()
    }

    pub fn count(&self, name: &str) -> Option<u64> {
        self.0.get(name).and_then(as_count)
    }

    pub fn flag(&self, name: &str) -> Option<bool> {
        self.0.get(name).and_then(Value::as_bool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: Spec = Spec {
        name: "T",
        description: "test",
        params: &[
            Param::required("p", Kind::String, ""),
            Param::optional("n", Kind::Integer, ""),
            Param::optional("b", Kind::Boolean, ""),
        ],
    };

    #[test]
    fn schema_lists_required_and_types() {
        let s = SPEC.schema();
        assert_eq!(s["function"]["name"], "T");
        assert_eq!(s["function"]["parameters"]["required"], json!(["p"]));
        assert_eq!(
            s["function"]["parameters"]["properties"]["n"]["type"],
            "integer"
        );
    }

    #[test]
    fn accepts_good_and_stringified_arguments() {
        let a = SPEC.check(&json!({"p": "x", "n": 3.0, "b": null})).unwrap();
        assert_eq!(
            (a.text("p"), a.count("n"), a.flag("b")),
            ("x", Some(3), None)
        );
        let a = SPEC.check(&json!("{\"p\": \"y\"}")).unwrap();
        assert_eq!(a.text("p"), "y");
    }

    #[test]
    fn every_problem_is_named_with_the_usage() {
        for (args, needle) in [
            (json!({}), "missing required argument `p`"),
            (json!({"p": null}), "missing required argument `p`"),
            (
                json!({"p": "x", "zz": 1, "aa": 2}),
                "unknown argument `aa`, `zz`",
            ),
            (json!({"p": 1}), "`p` must be a string, not the number 1"),
            (
                json!({"p": "x", "n": -1}),
                "`n` must be a non-negative integer",
            ),
            (
                json!({"p": "x", "n": 1.5}),
                "`n` must be a non-negative integer",
            ),
            (json!({"p": "x", "b": "yes"}), "`b` must be a boolean"),
            (json!([1]), "arguments must be a JSON object, not an array"),
            (json!("not json"), "arguments must be a JSON object"),
        ] {
            let err = SPEC.check(&args).err().unwrap_or_default();
            assert!(err.contains(needle), "{args} -> {err}");
            assert!(
                err.contains("p (string, required), n (integer, optional), b (boolean, optional)"),
                "{err}"
            );
        }
    }
}
