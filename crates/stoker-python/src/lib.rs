//! The `stoker._stoker` extension module. The Python package `stoker` wraps it.

mod convert;
mod errors;
mod host_memory;
mod io;
mod iter;
mod offline;
mod plan;
mod py_ops;
mod py_plan;
mod trace;

use pyo3::prelude::*;

#[pymodule]
fn _stoker(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<py_plan::PyPlan>()?;
    m.add_function(wrap_pyfunction!(step_kinds, m)?)?;
    m.add_function(wrap_pyfunction!(cli, m)?)?;
    m.add_class::<iter::PyIter>()?;
    m.add_class::<io::TFRecordWriter>()?;
    m.add_class::<convert::TensorBuffer>()?;
    m.add_class::<offline::PyConversion>()?;
    m.add_function(wrap_pyfunction!(offline::convert_job, m)?)?;
    m.add_function(wrap_pyfunction!(offline::read_manifest, m)?)?;
    m.add_function(wrap_pyfunction!(offline::verify_converted, m)?)?;
    m.add_function(wrap_pyfunction!(offline::from_converted, m)?)?;
    m.add_function(wrap_pyfunction!(offline::tf_parse_code, m)?)?;
    m.add_function(wrap_pyfunction!(io::serialize_example, m)?)?;
    m.add_function(wrap_pyfunction!(io::parse_example_proto, m)?)?;
    m.add_function(wrap_pyfunction!(io::encode_png, m)?)?;
    m.add_function(wrap_pyfunction!(io::encode_jpeg, m)?)?;
    m.add_function(wrap_pyfunction!(trace::trace_start, m)?)?;
    m.add_function(wrap_pyfunction!(trace::trace_stop, m)?)?;
    m.add_function(wrap_pyfunction!(trace::trace_write, m)?)?;
    m.add_function(wrap_pyfunction!(trace::analyze_trace, m)?)?;
    m.add_function(wrap_pyfunction!(trace::compare_traces, m)?)?;
    m.add_function(wrap_pyfunction!(host_memory::set_batch_host_memory, m)?)?;
    m.add_function(wrap_pyfunction!(set_device_cpu_share, m)?)?;
    m.add_function(wrap_pyfunction!(py_ops::quiesce, m)?)?;
    m.add_function(wrap_pyfunction!(set_local_ranks, m)?)?;
    m.add_function(wrap_pyfunction!(local_ranks, m)?)?;
    errors::register(m)?;
    m.add("AUTOTUNE", stoker::AUTOTUNE)?;
    m.add("JPEG_BACKEND", stoker_ops::codecs::jpeg::BACKEND)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// Sets the number of ranks of a data-parallel job on this machine (0 forgets it): each
/// pipeline's default thread budget is then its share of the cores.
/// `counted`: the adapters counted them in the job's process group (`LOCAL_WORLD_SIZE` then
/// wins); else the user said so (it wins).
#[pyfunction]
#[pyo3(signature = (n, counted=false))]
fn set_local_ranks(n: usize, counted: bool) {
    use stoker_core::options::RanksFrom;
    let from = if counted {
        RanksFrom::ProcessGroup
    } else {
        RanksFrom::User
    };
    stoker_core::options::set_local_ranks(n, from);
}

/// The ranks of a data-parallel job on this machine, and where the number comes from.
#[pyfunction]
fn local_ranks() -> (usize, &'static str) {
    stoker_core::options::local_ranks()
}

/// mimalloc for every Rust allocation in the extension (Python's and NumPy's own memory stays
/// with their allocators). The ops' per-image scratch (the resizer's coefficient tables, decoder
/// state) is many mid-sized blocks, allocated and freed once per image, where glibc's malloc
/// spent 4 % of a W3 worker's time walking and merging its free lists. In alternating runs of
/// W3's pipeline on one core, mimalloc gave 3-10 % more images/s (medians of three series) at
/// the same peak RSS. It is built not to use transparent huge pages (`no_thp` in Cargo.toml):
/// with them, a long run's resident memory crept up.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The CPU share of the image chains a loader tunes (`decode_on=..., cpu_share="auto"`): the
/// share of JPEGs the engine decodes itself from now on, in [0, 1].
#[pyfunction]
fn set_device_cpu_share(share: f64) {
    stoker_ops::fused::device_image::set_auto_share(share);
}

/// Every operator's name, as a spec file and `Plan.step` name it (the registry's list).
#[pyfunction]
fn step_kinds() -> Vec<&'static str> {
    stoker::registry::KINDS.to_vec()
}

/// The `stoker` command line (`argv` with the program's name first), run as the `stoker`
/// binary runs it; returns its exit status. The GIL is released while it runs.
#[pyfunction]
fn cli(py: Python<'_>, argv: Vec<std::ffi::OsString>) -> u8 {
    py.detach(|| stoker_cli::run(argv))
}
