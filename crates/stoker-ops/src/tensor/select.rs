//! `select(fields)`: keeps only the named fields, in the order given.

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Names, Schema};
use stoker_core::op::{Op, OpCtx};
use stoker_core::{Error, Result};

use crate::kernels::spec_json::spec_json;

const OP: &str = "select";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Select {
    pub fields: Vec<String>,
}

impl Op for Select {
    fn name(&self) -> &str {
        OP
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        if input.dynamic {
            return Ok(input.clone());
        }
        let fields = self
            .fields
            .iter()
            .map(|n| input.lookup(OP, n).map(|f| f.cloned()))
            .collect::<Result<Vec<_>>>()?;
        Ok(Schema::new(fields.into_iter().flatten().collect()))
    }

    fn elementwise(&self) -> bool {
        true
    }

    fn apply(&self, input: Element, _ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let mut tensors = Vec::with_capacity(self.fields.len());
        for n in &self.fields {
            let i = input.require(OP, n)?;
            tensors.push(input.tensors[i].clone());
        }
        if tensors.is_empty() {
            return Err(Error::invalid(OP, "select needs at least one field"));
        }
        let names: Names = self
            .fields
            .iter()
            .map(|n| std::sync::Arc::from(n.as_str()))
            .collect();
        Ok(Some(Element::new(names, tensors)))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}
