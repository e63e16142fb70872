//! `Dataset.convert` and `Dataset.from_converted`: the Python side of `stoker::convert`. A
//! local conversion runs on a thread of its own, so that Python can draw its progress and
//! stop it on Ctrl-C; a cluster's workers each write shards with `convert_shard`.

use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use pyo3::prelude::*;
use stoker::convert::{self, Conversion, ConvertOptions, Images, Manifest, Progress, ShardEntry};
use stoker_core::{Error, Result};

use crate::errors::IntoPyResult;
use crate::py_plan::PyPlan;

fn to_json<T: serde::Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::internal(e.to_string()))
}

/// A conversion of a pipeline's offline part.
#[pyclass(frozen, name = "Conversion", module = "stoker._stoker")]
pub struct PyConversion {
    inner: Arc<Conversion>,
    progress: Arc<Progress>,
    run: Mutex<Option<JoinHandle<Result<Manifest>>>>,
}

#[pymethods]
impl PyConversion {
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (plan, num_shards, compression, images, jpeg_quality, resize=None, epochs=None))]
    fn new(
        py: Python<'_>,
        plan: &PyPlan,
        num_shards: usize,
        compression: &str,
        images: &str,
        jpeg_quality: u8,
        resize: Option<usize>,
        epochs: Option<u64>,
    ) -> PyResult<PyConversion> {
        let options = ConvertOptions {
            num_shards,
            compression: compression.to_ascii_uppercase(),
            images: Images::parse(images).py(py)?,
            jpeg_quality,
            resize,
            epochs,
        };
        let plan = plan.plan.clone();
        let inner = py.detach(|| Conversion::new(&plan, options)).py(py)?;
        Ok(PyConversion {
            inner: Arc::new(inner),
            progress: Arc::new(Progress::default()),
            run: Mutex::new(None),
        })
    }

    /// What a worker needs to write any shard, as JSON.
    fn job(&self, py: Python<'_>) -> PyResult<String> {
        self.inner.job().and_then(|j| to_json(&j)).py(py)
    }

    #[getter]
    fn source_elements(&self) -> u64 {
        self.inner.source_elements
    }

    /// What storing images raw costs, where this conversion does (else `None`).
    #[getter]
    fn raw_images_note(&self) -> Option<String> {
        self.inner.raw_images_note()
    }

    /// How many jobs make the conversion (one per shard, or one per epoch).
    #[getter]
    fn jobs(&self) -> usize {
        self.inner.jobs()
    }

    #[getter]
    fn num_shards(&self) -> usize {
        self.inner.convert.num_shards
    }

    #[getter]
    fn offline(&self) -> Vec<String> {
        self.inner.offline_labels()
    }

    /// Gets `out_dir` ready; the jobs left.
    fn begin(&self, py: Python<'_>, out_dir: PathBuf) -> PyResult<Vec<usize>> {
        py.detach(|| self.inner.begin(&out_dir)).py(py)
    }

    /// Lists the shards a worker's job wrote (their entries, JSON) as complete; the
    /// manifest, JSON.
    fn record(&self, py: Python<'_>, out_dir: PathBuf, entries: &str) -> PyResult<String> {
        let entries: Vec<ShardEntry> = serde_json::from_str(entries)
            .map_err(|e| Error::internal(format!("shard entries: {e}")))
            .py(py)?;
        py.detach(|| {
            self.inner
                .record(&out_dir, entries)
                .and_then(|m| to_json(&m))
        })
        .py(py)
    }

    /// Starts converting into `out_dir` here, `workers` shards at a time, on a thread.
    fn start_local(&self, out_dir: PathBuf, workers: usize) -> PyResult<()> {
        let mut run = self.run.lock().unwrap_or_else(|e| e.into_inner());
        if run.is_some() {
            return Err(crate::errors::stoker_error(
                "this conversion is already running",
            ));
        }
        let (inner, progress) = (Arc::clone(&self.inner), Arc::clone(&self.progress));
        let handle = std::thread::Builder::new()
            .name("stoker-convert".into())
            .spawn(move || inner.run_local(&out_dir, workers, &progress))
            .map_err(|e| crate::errors::resource("starting the conversion's thread", e))?;
        *run = Some(handle);
        Ok(())
    }

    /// Waits up to `timeout` seconds for the local run: its manifest (JSON) once it ended,
    /// `None` while it runs; its error, raised.
    fn wait(&self, py: Python<'_>, timeout: f64) -> PyResult<Option<String>> {
        let deadline =
            std::time::Instant::now() + std::time::Duration::from_secs_f64(timeout.max(0.0));
        loop {
            let finished = {
                let run = self.run.lock().unwrap_or_else(|e| e.into_inner());
                match run.as_ref() {
                    None => return Err(crate::errors::stoker_error("no local run was started")),
                    Some(h) => h.is_finished(),
                }
            };
            if finished {
                let handle = self.run.lock().unwrap_or_else(|e| e.into_inner()).take();
                let Some(handle) = handle else {
                    return Err(crate::errors::stoker_error("no local run was started"));
                };
                let result = handle
                    .join()
                    .map_err(|_| crate::errors::internal("the conversion's thread panicked"))?;
                return result.and_then(|m| to_json(&m)).map(Some).py(py);
            }
            if std::time::Instant::now() >= deadline {
                return Ok(None);
            }
            py.detach(|| std::thread::sleep(std::time::Duration::from_millis(10)));
        }
    }

    /// Stops the local run at its jobs' next elements (finished shards stay listed).
    fn cancel(&self) {
        self.progress.cancel.store(true, Relaxed);
    }

    /// (elements written, bytes written, shards done) so far, here.
    fn progress(&self) -> (u64, u64, usize) {
        let p = &self.progress;
        (
            p.elements.load(Relaxed),
            p.bytes.load(Relaxed),
            p.shards_done.load(Relaxed),
        )
    }
}

/// Runs job `index` of the conversion `job` describes into `out_dir` on `threads` threads
/// (on a cluster's worker); the manifest entries of the shards it wrote, JSON.
#[pyfunction]
#[pyo3(signature = (job, out_dir, index, threads=1))]
pub fn convert_job(
    py: Python<'_>,
    job: &str,
    out_dir: PathBuf,
    index: usize,
    threads: usize,
) -> PyResult<String> {
    let job: serde_json::Value = serde_json::from_str(job)
        .map_err(|e| Error::internal(format!("job description: {e}")))
        .py(py)?;
    py.detach(|| {
        let conv = Conversion::from_job(&job)?;
        let entries = conv.write_job(&out_dir, index, threads, &Progress::default())?;
        to_json(&entries)
    })
    .py(py)
}

/// The manifest of the conversion in `out_dir`, JSON.
#[pyfunction]
pub fn read_manifest(py: Python<'_>, out_dir: PathBuf) -> PyResult<String> {
    Manifest::read(&out_dir).and_then(|m| to_json(&m)).py(py)
}

/// Checks the shards of the conversion in `out_dir` against its manifest (sizes, and sha256
/// with `hash`).
#[pyfunction]
#[pyo3(signature = (out_dir, hash=true))]
pub fn verify_converted(py: Python<'_>, out_dir: PathBuf, hash: bool) -> PyResult<()> {
    py.detach(|| Manifest::read(&out_dir)?.verify(&out_dir, hash))
        .py(py)
}

/// Python code reading the conversion in `out_dir` with TensorFlow.
#[pyfunction]
pub fn tf_parse_code(py: Python<'_>, out_dir: PathBuf) -> PyResult<String> {
    Manifest::read(&out_dir)
        .map(|m| m.tf_parse_code(&out_dir))
        .py(py)
}

/// The plan reading the conversion in `out_dir`.
#[pyfunction]
pub fn from_converted(
    py: Python<'_>,
    out_dir: PathBuf,
    decode_images: bool,
    num_parallel_reads: i64,
) -> PyResult<PyPlan> {
    let plan = py
        .detach(|| convert::from_converted(&out_dir, decode_images, num_parallel_reads))
        .py(py)?;
    Ok(PyPlan::wrap(plan))
}
