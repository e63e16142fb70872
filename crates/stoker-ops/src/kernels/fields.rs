//! Helpers shared by the ops: finding the input field, placing the output field.

use std::sync::Arc;

use stoker_core::element::{Element, FieldSpec, Names, Schema};
use stoker_core::op::OpCtx;
use stoker_core::stream_copy::{fill_chunks, ChunkWriter, STREAM_MIN_BYTES};
use stoker_core::{DType, Error, Result, Tensor};

/// The input field's spec (`None` when the schema is dynamic), checking its dtype.
pub fn input_spec<'a>(
    schema: &'a Schema,
    op: &str,
    field: &str,
    accepts: impl Fn(DType) -> bool,
    wanted: &str,
) -> Result<Option<&'a FieldSpec>> {
    let spec = schema.lookup(op, field)?;
    if let Some(f) = spec {
        if !accepts(f.dtype) {
            return Err(Error::schema(
                op,
                format!("field '{field}' is {}, expected {wanted}", f.dtype),
            ));
        }
    }
    Ok(spec)
}

/// The schema with `name` replaced by (or, if new, extended with) `spec`.
pub fn with_field(schema: &Schema, spec: FieldSpec) -> Schema {
    if schema.dynamic {
        return schema.clone();
    }
    let mut out = schema.clone();
    match out.fields.iter_mut().find(|f| f.name == spec.name) {
        Some(f) => *f = spec,
        None => out.fields.push(spec),
    }
    out
}

/// The element with field `name` replaced by (or, if new, extended with) `tensor`.
pub fn put(mut element: Element, name: &str, tensor: Tensor) -> Element {
    if let Some(i) = element.index(name) {
        element.tensors[i] = tensor;
        return element;
    }
    let mut names: Vec<Arc<str>> = element.names.iter().cloned().collect();
    names.push(Arc::from(name));
    element.tensors.push(tensor);
    Element::new(Names::from(names), element.tensors)
}

/// The output name: `output` if given, else the input field's name.
pub fn out_name<'a>(field: &'a str, output: &'a Option<String>) -> &'a str {
    output.as_deref().unwrap_or(field)
}

/// Resolves a possibly negative axis against `rank`.
pub fn resolve_axis(op: &str, axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r {
        return Err(Error::invalid(
            op,
            format!("axis {axis} is out of range for a tensor of rank {rank}"),
        ));
    }
    Ok(a as usize)
}

/// A dense tensor of `shape` written in place by `fill`, into a pooled buffer whose old
/// content `fill` must overwrite completely. `T` is the dtype's value type, or `u8` to fill
/// any dtype's bytes.
pub fn build<T: bytemuck::Pod>(
    dtype: DType,
    shape: Vec<usize>,
    fill: impl FnOnce(&mut [T]) -> Result<()>,
) -> Result<Tensor> {
    let bytes = shape.iter().product::<usize>() * dtype.size().unwrap_or(0);
    let mut storage = stoker_core::storage::shared_pool().take(bytes);
    let values = bytemuck::try_cast_slice_mut(storage.as_bytes_mut())
        .map_err(|e| Error::internal(format!("{dtype} output as values: {e}")))?;
    fill(values)?;
    Tensor::from_storage(dtype, shape, storage)
}

/// Like [`build`], for output field `name`: into the batch row the element will be stored in,
/// when the batch offers one of exactly this dtype and shape (see [`OpCtx::row_slot`]), so
/// that the batch has nothing left to copy.
pub fn build_into<T: bytemuck::Pod>(
    ctx: &OpCtx<'_>,
    name: &str,
    dtype: DType,
    shape: Vec<usize>,
    fill: impl FnOnce(&mut [T]) -> Result<()>,
) -> Result<Tensor> {
    match ctx.row_slot(name, dtype, &shape) {
        Some(slot) => slot.fill(fill),
        None => build(dtype, shape, fill),
    }
}

/// Like [`build_into`], for outputs made in chunks of `chunk` values (image rows, say; the last
/// may be shorter): `make(i, out)` writes chunk `i` whole. Into a large batch row or a large
/// buffer of its own, the chunks go to memory with non-temporal stores (see
/// `stream_copy::fill_chunks`).
pub fn build_chunks_into<T: bytemuck::Pod>(
    ctx: &OpCtx<'_>,
    name: &str,
    dtype: DType,
    shape: Vec<usize>,
    chunk: usize,
    make: impl FnMut(usize, &mut [T]),
) -> Result<Tensor> {
    if let Some(slot) = ctx.row_slot(name, dtype, &shape) {
        return slot.fill_chunks(chunk, make);
    }
    build(dtype, shape, |out: &mut [T]| {
        let streaming = std::mem::size_of_val(out) >= STREAM_MIN_BYTES;
        fill_chunks(out, chunk, streaming, make);
        Ok(())
    })
}

/// Like [`build_chunks_into`], for chunks that `fill` pushes in any order (it must write every
/// one) through a [`ChunkWriter`].
pub fn build_chunks_with<T: bytemuck::Pod>(
    ctx: &OpCtx<'_>,
    name: &str,
    dtype: DType,
    shape: Vec<usize>,
    chunk: usize,
    fill: impl FnOnce(&mut ChunkWriter<'_, T>) -> Result<()>,
) -> Result<Tensor> {
    if let Some(slot) = ctx.row_slot(name, dtype, &shape) {
        return slot.write_chunks(chunk, fill);
    }
    build(dtype, shape, |out: &mut [T]| {
        let streaming = std::mem::size_of_val(out) >= STREAM_MIN_BYTES;
        fill(&mut ChunkWriter::new(out, chunk, streaming))
    })
}

/// Like [`build`], for fills that write only part of the buffer: the rest is zero.
pub fn build_zeroed<T: bytemuck::Pod>(
    dtype: DType,
    shape: Vec<usize>,
    fill: impl FnOnce(&mut [T]) -> Result<()>,
) -> Result<Tensor> {
    build(dtype, shape, |out: &mut [T]| {
        out.fill(T::zeroed());
        fill(out)
    })
}
