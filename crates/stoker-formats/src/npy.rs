//! Loading `.npy` and `.npz` files into tensors.

use std::fs::File;
use std::io::{BufReader, Read};

use npyz::{NpyFile, Order};
use stoker_core::{DType, Error, Result, Tensor};

fn dtype_of(path: &str, descr: &npyz::DType) -> Result<DType> {
    let npyz::DType::Plain(ts) = descr else {
        return Err(Error::invalid(
            "npy",
            format!("{path}: structured arrays are not supported"),
        ));
    };
    let size = ts.size_field();
    let kind = ts.type_char();
    use npyz::TypeChar as T;
    let d = match (kind, size) {
        (T::Bool, 1) => DType::Bool,
        (T::Uint, 1) => DType::U8,
        (T::Uint, 2) => DType::U16,
        (T::Int, 1) => DType::I8,
        (T::Int, 2) => DType::I16,
        (T::Int, 4) => DType::I32,
        (T::Int, 8) => DType::I64,
        (T::Float, 2) => DType::F16,
        (T::Float, 4) => DType::F32,
        (T::Float, 8) => DType::F64,
        _ => {
            return Err(Error::invalid(
                "npy",
                format!("{path}: dtype '{ts}' is not supported"),
            ))
        }
    };
    Ok(d)
}

fn read_array<R: Read>(path: &str, npy: NpyFile<R>) -> Result<Tensor> {
    let bad = |e: std::io::Error| Error::invalid("npy", format!("{path}: {e}"));
    if npy.order() == Order::Fortran {
        return Err(Error::invalid(
            "npy",
            format!(
                "{path}: Fortran-ordered arrays are not supported; save np.ascontiguousarray(a)"
            ),
        ));
    }
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let dtype = dtype_of(path, &npy.dtype())?;
    match dtype {
        DType::Bool => {
            let v: Vec<bool> = npy.into_vec().map_err(bad)?;
            let v: Vec<u8> = v.into_iter().map(u8::from).collect();
            Tensor::from_slice(DType::Bool, shape, &v)
        }
        DType::U8 => Tensor::from_slice(dtype, shape, &npy.into_vec::<u8>().map_err(bad)?),
        DType::I8 => Tensor::from_slice(dtype, shape, &npy.into_vec::<i8>().map_err(bad)?),
        DType::U16 => Tensor::from_slice(dtype, shape, &npy.into_vec::<u16>().map_err(bad)?),
        DType::I16 => Tensor::from_slice(dtype, shape, &npy.into_vec::<i16>().map_err(bad)?),
        DType::I32 => Tensor::from_slice(dtype, shape, &npy.into_vec::<i32>().map_err(bad)?),
        DType::I64 => Tensor::from_slice(dtype, shape, &npy.into_vec::<i64>().map_err(bad)?),
        DType::F16 => {
            let v: Vec<half::f16> = npy.into_vec().map_err(bad)?;
            Tensor::from_slice(dtype, shape, &v)
        }
        DType::F32 => Tensor::from_slice(dtype, shape, &npy.into_vec::<f32>().map_err(bad)?),
        DType::F64 => Tensor::from_slice(dtype, shape, &npy.into_vec::<f64>().map_err(bad)?),
        DType::BF16 | DType::Bytes => Err(Error::internal("unreachable npy dtype")),
    }
}

/// Loads one `.npy` file.
pub fn load_npy(path: &str) -> Result<Tensor> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let npy = NpyFile::new(BufReader::new(file))
        .map_err(|e| Error::invalid("npy", format!("{path}: not a valid .npy file: {e}")))?;
    read_array(path, npy)
}

/// Loads every array of an `.npz` archive, in the archive's order.
pub fn load_npz(path: &str) -> Result<Vec<(String, Tensor)>> {
    let bad = |e: std::io::Error| Error::invalid("npz", format!("{path}: {e}"));
    let mut archive = npyz::npz::NpzArchive::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::io(path, e),
        _ => bad(e),
    })?;
    // In the archive's order (NumPy's `np.load(path).files`), not the zip index's hash order.
    let zip = archive.zip_archive();
    let mut names = Vec::with_capacity(zip.len());
    for i in 0..zip.len() {
        let entry = zip
            .by_index(i)
            .map_err(|e| Error::invalid("npz", format!("{path}: {e}")))?;
        if let Some(name) = npyz::npz::array_name_from_file_name(entry.name()) {
            names.push(name.to_string());
        }
    }
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let npy = archive
            .by_name(&name)
            .map_err(bad)?
            .ok_or_else(|| Error::invalid("npz", format!("{path}: array '{name}' vanished")))?;
        out.push((name.clone(), read_array(&format!("{path}[{name}]"), npy)?));
    }
    Ok(out)
}
