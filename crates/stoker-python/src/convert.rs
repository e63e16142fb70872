//! Tensors to NumPy arrays without copying, and NumPy arrays to tensors (one copy).

use std::ffi::c_void;
use std::sync::Arc;

use bytes::Bytes;
use numpy::npyffi::{self, npy_intp, NpyTypes, PY_ARRAY_API};
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};
use stoker_core::storage::Storage;
use stoker_core::{DType, Tensor};

/// Keeps a tensor's buffer alive for as long as a NumPy array views it.
#[pyclass(frozen, module = "stoker._stoker")]
pub struct TensorBuffer {
    _storage: Arc<Storage>,
}

/// A NumPy array viewing `t`'s buffer (no copy). Writable only when no one else shares the
/// buffer (e.g. a cached batch comes out read-only, so it cannot be corrupted).
pub fn tensor_to_py<'py>(py: Python<'py>, t: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    if t.dtype() == DType::Bytes {
        return bytes_to_py(py, t);
    }
    if t.dtype() == DType::BF16 {
        // NumPy has no bfloat16: hand out float32.
        let v: Vec<f32> = t
            .typed::<half::bf16>()
            .ok_or_else(|| crate::errors::internal("bad bfloat16 tensor"))?
            .iter()
            .map(|x| x.to_f32())
            .collect();
        let f = Tensor::from_slice(DType::F32, t.shape().to_vec(), &v)
            .map_err(crate::errors::core_error)?;
        return tensor_to_py(py, &f);
    }
    let writable = t.is_exclusive();
    let (storage, offset) = t
        .storage()
        .ok_or_else(|| crate::errors::internal("dense tensor without storage"))?;
    let descr = PyArrayDescr::new(py, t.dtype().name())?;
    let mut dims: Vec<npy_intp> = t.shape().iter().map(|&d| d as npy_intp).collect();
    // From the pointer, not a slice: NumPy may write through it (the bytes are `UnsafeCell`s,
    // see `Storage::as_ptr`), which a pointer made from a shared slice would not allow.
    let data = storage.as_ptr().wrapping_add(offset) as *mut c_void;
    let mut flags = npyffi::flags::NPY_ARRAY_C_CONTIGUOUS | npyffi::flags::NPY_ARRAY_ALIGNED;
    if writable {
        flags |= npyffi::flags::NPY_ARRAY_WRITEABLE;
    }
    let owner = Bound::new(
        py,
        TensorBuffer {
            _storage: Arc::clone(storage),
        },
    )?;
    // SAFETY: `data` points into `storage`, which holds at least the tensor's bytes from `offset`
    // (checked when the tensor was made) and is 64-byte aligned. The array gets `owner` as its
    // base object, which keeps the storage alive (and unmoved: it is never reallocated) for the
    // array's lifetime. It is writable only if no other tensor shares the storage.
    // `PyArray_NewFromDescr` steals the descr reference; `PyArray_SetBaseObject` steals `owner`.
    unsafe {
        let subtype = npyffi::get_type_object(py, NpyTypes::PyArray_Type);
        let ptr = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            subtype,
            descr.into_dtype_ptr(),
            dims.len() as i32,
            dims.as_mut_ptr(),
            std::ptr::null_mut(),
            data,
            flags,
            std::ptr::null_mut(),
        );
        if ptr.is_null() {
            return Err(PyErr::fetch(py));
        }
        let array = Bound::from_owned_ptr(py, ptr);
        if PY_ARRAY_API.PyArray_SetBaseObject(py, ptr.cast(), owner.into_ptr()) < 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(array)
    }
}

/// Scalars as `bytes`, anything else as a NumPy object array of `bytes` (as tf.data's
/// `as_numpy_iterator` does).
fn bytes_to_py<'py>(py: Python<'py>, t: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    let values = &t
        .bytes_data()
        .ok_or_else(|| crate::errors::internal("bytes tensor without values"))?
        .values;
    if t.shape().is_empty() {
        return Ok(PyBytes::new(py, values.first().map_or(&[][..], |v| v.as_ref())).into_any());
    }
    let list = PyList::new(py, values.iter().map(|v| PyBytes::new(py, v)))?;
    let np = py.import("numpy")?;
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("dtype", "object")?;
    let arr = np.call_method("empty", (values.len(),), Some(&kwargs))?;
    arr.set_item(pyo3::types::PySlice::full(py), list)?;
    arr.call_method1("reshape", (t.shape().to_vec(),))
}

fn dtype_of(kind: u8, size: usize) -> Option<DType> {
    Some(match (kind, size) {
        (b'b', 1) => DType::Bool,
        (b'u', 1) => DType::U8,
        (b'u', 2) => DType::U16,
        (b'i', 1) => DType::I8,
        (b'i', 2) => DType::I16,
        (b'i', 4) => DType::I32,
        (b'i', 8) => DType::I64,
        (b'f', 2) => DType::F16,
        (b'f', 4) => DType::F32,
        (b'f', 8) => DType::F64,
        _ => return None,
    })
}

/// A tensor holding a copy of `obj` (anything `numpy.asarray` accepts). Strings and bytes
/// become a bytes tensor (str is encoded as UTF-8).
pub fn py_to_tensor(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Tensor> {
    let py = obj.py();
    let np = py.import("numpy")?;
    let c_order = pyo3::types::PyDict::new(py);
    c_order.set_item("order", "C")?;
    // `asarray(order="C")` keeps 0-d arrays 0-d (`ascontiguousarray` would make them 1-d).
    let mut arr = np.call_method("asarray", (obj,), Some(&c_order))?;
    let kind = arr.getattr("dtype")?.getattr("kind")?.extract::<String>()?;
    if matches!(kind.as_str(), "S" | "U") && !obj.is_instance(&np.getattr("ndarray")?)? {
        // NumPy's fixed-width strings drop trailing NUL bytes (a serialized record may end in
        // one): Python strings are taken whole, as objects.
        let objects = pyo3::types::PyDict::new(py);
        objects.set_item("dtype", py.import("builtins")?.getattr("object")?)?;
        arr = np.call_method("asarray", (obj,), Some(&objects))?;
        return strings_to_tensor(&arr, what);
    }
    if matches!(kind.as_str(), "O" | "S" | "U") {
        return strings_to_tensor(&arr, what);
    }
    if arr
        .getattr("dtype")?
        .getattr("byteorder")?
        .extract::<String>()?
        == ">"
    {
        arr = arr.call_method1(
            "astype",
            (arr.getattr("dtype")?.call_method1("newbyteorder", ("=",))?,),
        )?;
        arr = np.call_method("asarray", (arr,), Some(&c_order))?;
    }
    let arr = arr
        .cast_into::<PyUntypedArray>()
        .map_err(|_| crate::errors::argument_type(format!("{what}: not an array")))?;
    let descr = arr.dtype();
    let dtype = dtype_of(descr.kind(), descr.itemsize()).ok_or_else(|| {
        crate::errors::argument_type(format!(
            "{what}: dtype {} is not supported (use bool, uint8/16, int8/16/32/64, float16/32/64, bytes or str)",
            arr.dtype()
        ))
    })?;
    let shape = arr.shape().to_vec();
    let nbytes = shape.iter().product::<usize>() * descr.itemsize();
    if let Some(t) = view_of_own_buffer(&arr, dtype, &shape, nbytes)? {
        return Ok(t);
    }
    let storage = if nbytes == 0 {
        Storage::zeroed(0)
    } else {
        // SAFETY: `asarray(order="C")` made `arr` C-contiguous with native byte order; its data
        // pointer is valid for `nbytes` bytes while we hold the GIL and a reference to it.
        let bytes = unsafe {
            std::slice::from_raw_parts((*arr.as_array_ptr()).fields.data as *const u8, nbytes)
        };
        Storage::copy_from(bytes)
    };
    Tensor::from_storage(dtype, shape, storage).map_err(crate::errors::core_error)
}

/// A tensor viewing the same storage, if `arr` is (a contiguous part of) an array stoker
/// handed out: a Python function passing a batch's array through costs no copy.
fn view_of_own_buffer(
    arr: &Bound<'_, PyUntypedArray>,
    dtype: DType,
    shape: &[usize],
    nbytes: usize,
) -> PyResult<Option<Tensor>> {
    let Ok(base) = arr.getattr("base") else {
        return Ok(None);
    };
    let Ok(owner) = base.cast::<TensorBuffer>() else {
        return Ok(None);
    };
    let storage = &owner.get()._storage;
    // SAFETY: reading the data pointer of a live array while holding the GIL.
    let data = unsafe { (*arr.as_array_ptr()).fields.data as usize };
    let start = storage.as_bytes().as_ptr() as usize;
    let aligned = dtype.size().is_some_and(|s| data % s == 0);
    if data < start || data + nbytes > start + storage.len() || !aligned {
        return Ok(None);
    }
    Tensor::view(dtype, shape.to_vec(), Arc::clone(storage), data - start)
        .map(Some)
        .map_err(|e| crate::errors::invalid_argument(e.to_string()))
}

fn strings_to_tensor(arr: &Bound<'_, PyAny>, what: &str) -> PyResult<Tensor> {
    let shape: Vec<usize> = arr.getattr("shape")?.extract()?;
    let flat = arr.call_method0("ravel")?.call_method0("tolist")?;
    let mut values = Vec::new();
    for item in flat.try_iter()? {
        let item = item?;
        if let Ok(b) = item.cast::<PyBytes>() {
            values.push(Bytes::copy_from_slice(b.as_bytes()));
        } else if let Ok(s) = item.cast::<PyString>() {
            values.push(Bytes::from(s.to_cow()?.into_owned().into_bytes()));
        } else {
            return Err(crate::errors::argument_type(format!(
                "{what}: object arrays must hold bytes or str, found {}",
                item.get_type().name()?
            )));
        }
    }
    Tensor::from_bytes(shape, values, Vec::new()).map_err(crate::errors::core_error)
}
