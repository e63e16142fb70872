//! The spec JSON of an op (`Op::spec`): its fields with the `"op"` key naming it, exactly as
//! the registry (`OpSpec`, whose serde tag is `op`) writes it, so that the ops need not know
//! the registry.

use serde::Serialize;
use stoker_core::{Error, Result};

/// `{"op": op, ...}`: the fields of `value` (a struct that serialises as a map) with the
/// `"op"` key added, as an internally tagged enum variant serialises.
pub(crate) fn spec_json<T: Serialize>(op: &str, value: &T) -> Result<serde_json::Value> {
    let fields = serde_json::to_value(value).map_err(|e| Error::Spec(e.to_string()))?;
    let serde_json::Value::Object(fields) = fields else {
        return Err(Error::Spec(format!(
            "{op}: the op's spec is not a JSON object"
        )));
    };
    let mut spec = serde_json::Map::new();
    spec.insert("op".to_string(), op.into());
    spec.extend(fields);
    Ok(serde_json::Value::Object(spec))
}
