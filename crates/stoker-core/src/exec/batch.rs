//! `batch(n, drop_remainder)`: stacks n elements into one, writing into a pooled buffer.

use std::sync::Arc;

use crate::element::Element;
use crate::error::{Error, Result};
use crate::exec::{BoxIter, ElementIter};
use crate::stats::StageStats;
use crate::storage::BufferPool;
use crate::tensor::Tensor;

pub struct BatchIter {
    input: BoxIter,
    size: usize,
    drop_remainder: bool,
    pool: Arc<BufferPool>,
    stats: Arc<StageStats>,
    pending: Vec<Element>,
}

impl BatchIter {
    pub fn new(input: BoxIter, size: usize, drop_remainder: bool, stats: Arc<StageStats>) -> Self {
        BatchIter {
            input,
            size,
            drop_remainder,
            // Shared, so batch buffers are reused across epochs (a new iterator each time).
            pool: Arc::clone(crate::storage::shared_pool()),
            stats,
            pending: Vec::with_capacity(size),
        }
    }
}

impl ElementIter for BatchIter {
    fn next(&mut self) -> Result<Option<Element>> {
        while self.pending.len() < self.size {
            match self.stats.pull(&mut self.input)? {
                Some(e) => self.pending.push(e),
                None => break,
            }
        }
        if self.pending.is_empty() || (self.drop_remainder && self.pending.len() < self.size) {
            self.pending.clear();
            return Ok(None);
        }
        let out = stack(&self.pending, &self.pool)?;
        self.pending.clear();
        Ok(Some(out))
    }
}

/// Stacks elements of equal shapes along a new first axis.
pub fn stack(elements: &[Element], pool: &Arc<BufferPool>) -> Result<Element> {
    let Some(first) = elements.first() else {
        return Err(Error::internal("stack of no elements"));
    };
    let n = elements.len();
    let mut tensors = Vec::with_capacity(first.tensors.len());
    for (f, proto) in first.tensors.iter().enumerate() {
        let mut shape = Vec::with_capacity(proto.shape().len() + 1);
        shape.push(n);
        shape.extend_from_slice(proto.shape());
        for (i, e) in elements.iter().enumerate() {
            let t = &e.tensors[f];
            if t.shape() != proto.shape() || t.dtype() != proto.dtype() {
                return Err(Error::invalid(
                    "batch",
                    format!(
                        "field '{}': element {i} of the batch is {} {:?} but element 0 is {} {:?}; \
                         elements of a batch must have equal shapes (pad or resize them first)",
                        first.names[f],
                        t.dtype(),
                        t.shape(),
                        proto.dtype(),
                        proto.shape()
                    ),
                ));
            }
        }
        let tensor = if let Some(size) = proto.dtype().size() {
            let row = proto.numel() * size;
            let mut storage = pool.take(row * n);
            for (dst, e) in storage
                .as_bytes_mut()
                .chunks_exact_mut(row.max(1))
                .zip(elements)
            {
                dst.copy_from_slice(e.tensors[f].raw().unwrap_or_default());
            }
            Tensor::from_storage(proto.dtype(), shape, storage)?
        } else {
            let mut values = Vec::with_capacity(n * proto.numel());
            let mut origins = Vec::new();
            for e in elements {
                let b = e.tensors[f]
                    .bytes_data()
                    .ok_or_else(|| Error::internal("bytes tensor without bytes data"))?;
                values.extend(b.values.iter().cloned());
                origins.extend(b.origins.iter().cloned());
            }
            Tensor::from_bytes(shape, values, origins)?
        };
        tensors.push(tensor);
    }
    Ok(Element::new(first.names.clone(), tensors))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testutil::*;

    fn sizes(it: BoxIter) -> Vec<Vec<i64>> {
        let mut it = it;
        let mut out = Vec::new();
        while let Some(e) = it.next().unwrap() {
            out.push(e.tensors[0].typed::<i64>().unwrap().to_vec());
        }
        out
    }

    #[test]
    fn batches_and_remainder() {
        let st = Arc::new(StageStats::new("batch", "batch"));
        let b = BatchIter::new(ints(0..7), 3, false, st.clone());
        assert_eq!(
            sizes(Box::new(b)),
            vec![vec![0, 1, 2], vec![3, 4, 5], vec![6]]
        );
        let b = BatchIter::new(ints(0..7), 3, true, st);
        assert_eq!(sizes(Box::new(b)), vec![vec![0, 1, 2], vec![3, 4, 5]]);
    }

    #[test]
    fn unequal_shapes_are_an_error_naming_the_field() {
        use crate::dtype::DType;
        use crate::element::names;
        use crate::exec::VecIter;
        let n = names(&["v"]);
        let e = |len: usize| {
            Ok(Element::new(
                n.clone(),
                vec![Tensor::from_slice(DType::F32, vec![len], &vec![0f32; len]).unwrap()],
            ))
        };
        let st = Arc::new(StageStats::new("batch", "batch"));
        let mut b = BatchIter::new(VecIter::boxed(vec![e(2), e(3)]), 2, false, st);
        let err = b.next().unwrap_err().to_string();
        assert!(
            err.contains("field 'v'") && err.contains("element 1"),
            "{err}"
        );
    }
}
