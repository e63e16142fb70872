//! `stoker.io`: writing TFRecord files and serialising `tf.train.Example`.

use std::fs::File;
use std::io::BufWriter;
use std::sync::Mutex;

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use stoker_formats::example::{Example, Feature, Kind};
use stoker_formats::{Compression, RecordWriter};
use stoker_ops::codecs::encode;

use crate::errors::IntoPyResult;

/// Writes records to a TFRecord file that TensorFlow reads, as ``tf.io.TFRecordWriter``:
/// ``compression_type`` ``None``/``""``, ``"GZIP"`` or ``"ZLIB"``. Use it as a context manager,
/// or call ``close()``: the file is complete only once closed.
#[pyclass(module = "stoker._stoker")]
pub struct TFRecordWriter {
    path: String,
    inner: Mutex<Option<RecordWriter<BufWriter<File>>>>,
}

fn io_err(path: &str, e: std::io::Error) -> PyErr {
    crate::errors::file_error_at(path, &e)
}

#[pymethods]
impl TFRecordWriter {
    #[new]
    #[pyo3(signature = (path, compression_type=None))]
    fn new(py: Python<'_>, path: String, compression_type: Option<&str>) -> PyResult<Self> {
        let compression = Compression::parse(compression_type.unwrap_or("")).py(py)?;
        let w = RecordWriter::create(&path, compression).map_err(|e| io_err(&path, e))?;
        Ok(TFRecordWriter {
            path,
            inner: Mutex::new(Some(w)),
        })
    }

    /// Appends one record (bytes, e.g. from ``serialize_example``) with its length and CRCs.
    fn write(&self, record: &[u8]) -> PyResult<()> {
        let mut g = self
            .inner
            .lock()
            .map_err(|_| crate::errors::internal("writer lock poisoned"))?;
        let w = g.as_mut().ok_or_else(|| {
            crate::errors::invalid_argument(format!("{}: the writer is closed", self.path))
        })?;
        w.write(record).map_err(|e| io_err(&self.path, e))
    }

    /// Writes what is buffered to the file (a compressed stream stays open).
    fn flush(&self) -> PyResult<()> {
        let mut g = self
            .inner
            .lock()
            .map_err(|_| crate::errors::internal("writer lock poisoned"))?;
        if let Some(w) = g.as_mut() {
            w.flush().map_err(|e| io_err(&self.path, e))?;
        }
        Ok(())
    }

    /// Ends the file (and its compressed stream); later writes raise.
    fn close(&self) -> PyResult<()> {
        let mut g = self
            .inner
            .lock()
            .map_err(|_| crate::errors::internal("writer lock poisoned"))?;
        if let Some(w) = g.take() {
            w.finish().map_err(|e| io_err(&self.path, e))?;
        }
        Ok(())
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        _t: Option<Bound<'_, PyAny>>,
        _v: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.close()?;
        Ok(false)
    }
}

fn feature_of(name: &str, value: &Bound<'_, PyAny>) -> PyResult<Feature> {
    // An explicit (kind, values) pair from stoker.io.bytes_feature / int64_feature / float_feature.
    if let Ok(t) = value.cast::<PyTuple>() {
        if t.len() == 2 {
            if let Ok(kind) = t.get_item(0)?.extract::<String>() {
                let values = t.get_item(1)?;
                return match kind.as_str() {
                    "bytes" => Ok(Feature::bytes(bytes_list(name, &values)?)),
                    "int64" => Ok(Feature::int64s(values.extract::<Vec<i64>>()?)),
                    "float" => Ok(Feature::floats(values.extract::<Vec<f32>>()?)),
                    other => Err(crate::errors::invalid_argument(format!(
                        "feature '{name}': unknown kind '{other}'"
                    ))),
                };
            }
        }
    }
    let py = value.py();
    if value.cast::<PyBytes>().is_ok() || value.cast::<PyString>().is_ok() {
        return Ok(Feature::bytes(bytes_list(
            name,
            &PyList::new(py, [value])?.into_any(),
        )?));
    }
    let np = py.import("numpy")?;
    let arr = np
        .call_method1("asarray", (value,))?
        .call_method0("ravel")?;
    let kind: String = arr.getattr("dtype")?.getattr("kind")?.extract()?;
    if arr.len()? == 0 {
        return Err(crate::errors::invalid_argument(format!(
            "feature '{name}': an empty list has no type; use stoker.io.int64_feature([]) (or bytes_/float_feature)"
        )));
    }
    match kind.as_str() {
        "b" | "i" | "u" => Ok(Feature::int64s(
            arr.call_method1("astype", ("int64",))?
                .call_method0("tolist")?
                .extract()?,
        )),
        "f" => Ok(Feature::floats(
            arr.call_method1("astype", ("float32",))?
                .call_method0("tolist")?
                .extract()?,
        )),
        "S" | "U" | "O" => Ok(Feature::bytes(bytes_list(
            name,
            &arr.call_method0("tolist")?,
        )?)),
        _ => Err(crate::errors::argument_type(format!(
            "feature '{name}': values of dtype kind '{kind}' cannot be stored"
        ))),
    }
}

fn bytes_list(name: &str, values: &Bound<'_, PyAny>) -> PyResult<Vec<Bytes>> {
    let mut out = Vec::new();
    for v in values.try_iter()? {
        let v = v?;
        if let Ok(b) = v.cast::<PyBytes>() {
            out.push(Bytes::copy_from_slice(b.as_bytes()));
        } else if let Ok(s) = v.cast::<PyString>() {
            out.push(Bytes::from(s.to_cow()?.into_owned().into_bytes()));
        } else {
            return Err(crate::errors::argument_type(format!(
                "feature '{name}': bytes_list values must be bytes or str"
            )));
        }
    }
    Ok(out)
}

/// Serialises `{name: value}` as a `tf.train.Example`.
#[pyfunction]
pub fn serialize_example<'py>(
    py: Python<'py>,
    features: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut map = Vec::with_capacity(features.len());
    for (k, v) in features.iter() {
        let name: String = k.extract()?;
        let f = feature_of(&name, &v)?;
        map.push((name, f));
    }
    Ok(PyBytes::new(py, &Example::with_features(map).serialize()))
}

/// Decodes a serialized `tf.train.Example` into `{name: (kind, [values])}`.
#[pyfunction]
pub fn parse_example_proto<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    let ex = Example::parse(Bytes::copy_from_slice(data)).map_err(|e| {
        crate::errors::invalid_argument(format!("not a valid tf.train.Example: {e}"))
    })?;
    let out = PyDict::new(py);
    if let Some(f) = ex.features {
        for (name, feature) in f.feature {
            let value = match feature.kind {
                Some(Kind::BytesList(l)) => (
                    "bytes",
                    PyList::new(py, l.value.iter().map(|b| PyBytes::new(py, b)))?.into_any(),
                ),
                Some(Kind::FloatList(l)) => ("float", PyList::new(py, l.value)?.into_any()),
                Some(Kind::Int64List(l)) => ("int64", PyList::new(py, l.value)?.into_any()),
                None => ("none", PyList::empty(py).into_any()),
            };
            out.set_item(name, value)?;
        }
    }
    Ok(out)
}

/// Encodes a uint8 `[H, W, C]` array (C = 1, 2, 3 or 4) as PNG.
#[pyfunction]
#[pyo3(signature = (image, fast=false))]
pub fn encode_png<'py>(
    py: Python<'py>,
    image: &Bound<'py, PyAny>,
    fast: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    let t = crate::convert::py_to_tensor(image, "encode_png")?;
    let (h, w, c, pixels) = hwc_u8(&t, "encode_png")?;
    let out = py.detach(|| encode::encode_png(pixels, (h, w, c), fast));
    let out = out.map_err(|e| crate::errors::invalid_argument(format!("encode_png: {e}")))?;
    Ok(PyBytes::new(py, &out))
}

/// Encodes a uint8 `[H, W, C]` array (C = 1 or 3) as baseline JPEG with 4:2:0 chroma
/// subsampling for colour, as libjpeg and PIL do by default.
#[pyfunction]
#[pyo3(signature = (image, quality=90))]
pub fn encode_jpeg<'py>(
    py: Python<'py>,
    image: &Bound<'py, PyAny>,
    quality: u8,
) -> PyResult<Bound<'py, PyBytes>> {
    let t = crate::convert::py_to_tensor(image, "encode_jpeg")?;
    let (h, w, c, pixels) = hwc_u8(&t, "encode_jpeg")?;
    let out = py.detach(|| encode::encode_jpeg(pixels, (h, w, c), quality));
    let out = out.map_err(|e| crate::errors::invalid_argument(format!("encode_jpeg: {e}")))?;
    Ok(PyBytes::new(py, &out))
}

/// `(height, width, channels, pixels)` of a uint8 `[H, W, C]` tensor.
fn hwc_u8<'t>(t: &'t stoker_core::Tensor, op: &str) -> PyResult<(usize, usize, usize, &'t [u8])> {
    match (t.dtype(), t.raw(), t.shape()) {
        (stoker_core::DType::U8, Some(raw), &[h, w, c]) => Ok((h, w, c, raw)),
        (stoker_core::DType::U8, _, shape) => Err(crate::errors::invalid_argument(format!(
            "{op} takes [H, W, C], got {shape:?}"
        ))),
        _ => Err(crate::errors::argument_type(format!(
            "{op} takes a uint8 array [H, W, C]"
        ))),
    }
}
