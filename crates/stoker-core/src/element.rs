//! Elements (named tensors) and schemas (what a pipeline will produce, known when it is built).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Field names of an element, shared by all elements of a stage.
pub type Names = Arc<[Arc<str>]>;

/// One element of a dataset: tensors with names.
#[derive(Clone, Debug)]
pub struct Element {
    pub names: Names,
    pub tensors: Vec<Tensor>,
}

impl Element {
    pub fn new(names: Names, tensors: Vec<Tensor>) -> Element {
        debug_assert_eq!(names.len(), tensors.len());
        Element { names, tensors }
    }

    pub fn index(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n.as_ref() == name)
    }

    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.index(name).map(|i| &self.tensors[i])
    }

    /// Bytes held by all tensors.
    pub fn nbytes(&self) -> usize {
        self.tensors.iter().map(Tensor::nbytes).sum()
    }

    /// The index of field `name`, or an error naming the op and the fields there are.
    pub fn require(&self, op: &str, name: &str) -> Result<usize> {
        self.index(name).ok_or_else(|| {
            Error::invalid(
                op,
                format!(
                    "no field '{name}' in the element; fields are: {}",
                    self.names.join(", ")
                ),
            )
        })
    }
}

/// Builds a [`Names`] list.
pub fn names<S: AsRef<str>>(names: &[S]) -> Names {
    names.iter().map(|n| Arc::from(n.as_ref())).collect()
}

/// The field names of elements made of other elements' fields whose names are known only
/// when they come (after a Python function): `leading` names, then each part's names behind
/// its prefix. Built again only when a part's names change.
pub struct NamesOf {
    leading: Vec<Arc<str>>,
    prefixes: Vec<String>,
    seen: Vec<Names>,
    names: Names,
}

impl NamesOf {
    pub fn new(leading: &[&str], prefixes: Vec<String>) -> NamesOf {
        NamesOf {
            leading: leading.iter().map(|n| Arc::from(*n)).collect(),
            prefixes,
            seen: Vec::new(),
            names: names::<&str>(&[]),
        }
    }

    /// The names of an element whose parts have the names `parts` (one per prefix).
    pub fn of(&mut self, parts: &[Names]) -> Names {
        let same = self.seen.len() == parts.len()
            && self.seen.iter().zip(parts).all(|(a, b)| Arc::ptr_eq(a, b));
        if !same {
            let mut all: Vec<Arc<str>> = self.leading.clone();
            for (part, prefix) in parts.iter().zip(&self.prefixes) {
                all.extend(part.iter().map(|n| Arc::from(format!("{prefix}{n}"))));
            }
            self.names = all.into();
            self.seen = parts.to_vec();
        }
        self.names.clone()
    }
}

/// A field of a schema. `None` dimensions are unknown until run time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldSpec {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<Option<usize>>,
}

impl FieldSpec {
    pub fn new(name: impl Into<String>, dtype: DType, shape: Vec<Option<usize>>) -> FieldSpec {
        FieldSpec {
            name: name.into(),
            dtype,
            shape,
        }
    }

    /// A field whose shape is fully known.
    pub fn fixed(name: impl Into<String>, dtype: DType, shape: &[usize]) -> FieldSpec {
        FieldSpec::new(name, dtype, shape.iter().map(|&d| Some(d)).collect())
    }

    /// The shape when every dimension is known.
    pub fn static_shape(&self) -> Option<Vec<usize>> {
        self.shape.iter().copied().collect()
    }

    pub fn shape_str(&self) -> String {
        let dims: Vec<String> = self
            .shape
            .iter()
            .map(|d| d.map_or("?".to_string(), |d| d.to_string()))
            .collect();
        format!("({})", dims.join(", "))
    }
}

impl fmt::Display for FieldSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} {}", self.name, self.dtype, self.shape_str())
    }
}

/// What every element of a stage looks like. A *dynamic* schema (after a Python function
/// without a declared output signature) is only known at run time.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Schema {
    pub fields: Vec<FieldSpec>,
    pub dynamic: bool,
}

impl Schema {
    pub fn new(fields: Vec<FieldSpec>) -> Schema {
        Schema {
            fields,
            dynamic: false,
        }
    }

    pub fn dynamic() -> Schema {
        Schema {
            fields: Vec::new(),
            dynamic: true,
        }
    }

    pub fn field(&self, name: &str) -> Option<&FieldSpec> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Field `name` as seen by pipeline step `step`: `Ok(None)` if the schema is dynamic,
    /// an error listing the fields if it is missing.
    pub fn lookup(&self, step: &str, name: &str) -> Result<Option<&FieldSpec>> {
        if self.dynamic {
            return Ok(None);
        }
        match self.field(name) {
            Some(f) => Ok(Some(f)),
            None => Err(Error::schema(
                step,
                format!("no field '{name}'; the input has {}", self.describe()),
            )),
        }
    }

    pub fn names(&self) -> Names {
        self.fields
            .iter()
            .map(|f| Arc::from(f.name.as_str()))
            .collect()
    }

    pub fn describe(&self) -> String {
        if self.dynamic {
            return "fields known only at run time".into();
        }
        let parts: Vec<String> = self.fields.iter().map(|f| f.to_string()).collect();
        format!("{{{}}}", parts.join(", "))
    }
}

impl fmt::Display for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}
