//! `stoker._stoker.Plan`: the dataset graph as the Python `Dataset` builds it.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use stoker::datasets::{
    choose_from_datasets::ChooseFromDatasets, concatenate::Concatenate, enumerate::Enumerate,
    filter::Filter, fixed_length_record::FixedLengthRecord, from_generator::FromGenerator,
    from_tensor_slices::FromTensorSlices, global_shuffle::GlobalShuffle,
    group_by_window::GroupByWindow, interleave::Interleave, options::WithOptions, range::Range,
    sample_from_datasets::SampleFromDatasets, scan::Scan, shard::Shard, take_while::TakeWhile,
    text_line::TextLine, tfrecord::TfRecord, window::Window, zip::Zip,
};
use stoker::plan::{Plan, SpecCtx};
use stoker::sources::{Opener, TfRecordOpener};
use stoker_core::element::{FieldSpec, Schema};
use stoker_core::exec::padded_batch::Padding;
use stoker_core::op::Op;
use stoker_core::{DType, ErrorPolicy, PipelineOptions};
use stoker_formats::fixed_length::Framing;
use stoker_formats::Compression;
use stoker_ops::OpSpec;

use crate::convert::py_to_tensor;
use crate::errors::IntoPyResult;
use crate::iter::PyIter;
use crate::py_ops::{PyFuncOp, PyGenerator, PyGrouper, PyOpener, PyPredicate, PyScanner};
pub use crate::py_plan::PyPlan;

pub(crate) fn json_to_py<'py>(
    py: Python<'py>,
    v: &serde_json::Value,
) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (v.to_string(),))
}

fn py_to_json(obj: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    let s: String = obj
        .py()
        .import("json")?
        .call_method1("dumps", (obj,))?
        .extract()?;
    serde_json::from_str(&s).map_err(|e| crate::errors::invalid_argument(e.to_string()))
}

/// A native op from its spec dict, or a Python callable.
fn op_of(py: Python<'_>, item: &Bound<'_, PyAny>) -> PyResult<Arc<dyn Op>> {
    if item.cast::<PyDict>().is_ok() {
        let spec = OpSpec::from_json(&py_to_json(item)?).py(py)?;
        return spec.build().py(py);
    }
    if item.is_callable() {
        return Ok(Arc::new(PyFuncOp::new(py, item.clone().unbind())));
    }
    Err(crate::errors::argument_type(format!(
        "map takes native ops (stoker.ops.*) or Python functions, got {}",
        item.get_type().name()?
    )))
}

#[pymethods]
impl PyPlan {
    #[staticmethod]
    fn range(py: Python<'_>, start: i64, stop: i64, step: i64) -> PyResult<PyPlan> {
        Ok(PyPlan::wrap(Plan::new(Range { start, stop, step }).py(py)?))
    }

    #[staticmethod]
    fn from_arrays(
        py: Python<'_>,
        names: Vec<String>,
        arrays: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<PyPlan> {
        let columns = names
            .iter()
            .zip(&arrays)
            .map(|(n, a)| py_to_tensor(a, &format!("from_tensor_slices: '{n}'")))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyPlan::wrap(
            Plan::new(FromTensorSlices { names, columns }).py(py)?,
        ))
    }

    #[staticmethod]
    #[pyo3(signature = (path, name=None))]
    fn from_npz(py: Python<'_>, path: &str, name: Option<String>) -> PyResult<PyPlan> {
        let path = path.to_string();
        let plan = py.detach(move || Plan::from_npz(&path, name)).py(py)?;
        Ok(PyPlan::wrap(plan))
    }

    #[staticmethod]
    #[pyo3(signature = (patterns, shuffle, seed=None))]
    fn list_files(
        py: Python<'_>,
        patterns: Vec<String>,
        shuffle: bool,
        seed: Option<u64>,
    ) -> PyResult<PyPlan> {
        Ok(PyPlan::wrap(
            Plan::list_files(patterns, shuffle, seed).py(py)?,
        ))
    }

    #[staticmethod]
    fn tfrecord(
        py: Python<'_>,
        patterns: Vec<String>,
        compression_type: &str,
        verify_crc: bool,
        num_parallel_reads: i64,
        max_record_bytes: u64,
    ) -> PyResult<PyPlan> {
        let compression = Compression::parse(compression_type).py(py)?;
        let step = TfRecord::new(patterns, compression, verify_crc, num_parallel_reads)
            .py(py)?
            .with_max_record_bytes(max_record_bytes);
        Ok(PyPlan::wrap(Plan::new(step).py(py)?))
    }

    /// Lines of text files; with `csv` (field delimiter, quoting), CSV records as
    /// `CsvDataset` splits them.
    #[staticmethod]
    #[pyo3(signature = (patterns, compression_type, num_parallel_reads, csv=None))]
    fn text_line(
        py: Python<'_>,
        patterns: Vec<String>,
        compression_type: &str,
        num_parallel_reads: i64,
        csv: Option<(String, bool)>,
    ) -> PyResult<PyPlan> {
        let compression = Compression::parse(compression_type).py(py)?;
        let mut step = TextLine::new(patterns, compression, num_parallel_reads).py(py)?;
        if let Some((delim, quote)) = csv {
            let delim = stoker::datasets::text_line::csv_delim(&delim).py(py)?;
            step = step.csv_records(delim, quote);
        }
        Ok(PyPlan::wrap(Plan::new(step).py(py)?))
    }

    #[staticmethod]
    fn fixed_length_record(
        py: Python<'_>,
        patterns: Vec<String>,
        record_bytes: usize,
        header_bytes: u64,
        footer_bytes: u64,
        compression_type: &str,
        num_parallel_reads: i64,
    ) -> PyResult<PyPlan> {
        let compression = Compression::parse(compression_type).py(py)?;
        let framing = Framing {
            record_bytes,
            header_bytes,
            footer_bytes,
        };
        let step =
            FixedLengthRecord::new(patterns, framing, compression, num_parallel_reads).py(py)?;
        Ok(PyPlan::wrap(Plan::new(step).py(py)?))
    }

    /// Interleaves TFRecord files named by this dataset's elements.
    #[allow(clippy::too_many_arguments)]
    fn interleave_tfrecord(
        &self,
        py: Python<'_>,
        compression_type: &str,
        verify_crc: bool,
        cycle_length: Option<usize>,
        block_length: usize,
        num_parallel_calls: Option<i64>,
        max_record_bytes: u64,
    ) -> PyResult<PyPlan> {
        let opener: Arc<dyn Opener> = Arc::new(TfRecordOpener {
            compression: Compression::parse(compression_type).py(py)?,
            verify_crc,
            max_record_bytes,
        });
        self.then(
            py,
            Interleave {
                input: self.plan.clone(),
                opener,
                cycle_length,
                block_length,
                num_parallel_calls,
            },
        )
    }

    fn interleave(
        &self,
        py: Python<'_>,
        func: Py<PyAny>,
        cycle_length: Option<usize>,
        block_length: usize,
        num_parallel_calls: Option<i64>,
    ) -> PyResult<PyPlan> {
        let opener: Arc<dyn Opener> = Arc::new(PyOpener::new(py, func));
        self.then(
            py,
            Interleave {
                input: self.plan.clone(),
                opener,
                cycle_length,
                block_length,
                num_parallel_calls,
            },
        )
    }

    #[staticmethod]
    fn load_spec(py: Python<'_>, path: &str) -> PyResult<PyPlan> {
        Ok(PyPlan::wrap(stoker::spec::load(path).py(py)?))
    }

    #[staticmethod]
    fn from_spec_json(py: Python<'_>, text: &str) -> PyResult<PyPlan> {
        let doc: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| crate::errors::invalid_argument(e.to_string()))?;
        Ok(PyPlan::wrap(stoker::spec::from_spec(&doc).py(py)?))
    }

    /// The step its spec describes (the `step` key names the operator; the other keys are
    /// its spec form's), over this plan: how `Dataset` adds an operator whose parameters are
    /// data, with no binding of its own.
    fn step(&self, py: Python<'_>, spec: &Bound<'_, PyDict>) -> PyResult<PyPlan> {
        let mut fields = py_to_json(spec.as_any())?;
        let kind = match fields.as_object_mut().and_then(|m| m.remove("step")) {
            Some(serde_json::Value::String(kind)) => kind,
            _ => {
                return Err(crate::errors::invalid_argument(
                    "step: the spec needs a 'step' key naming the operator",
                ))
            }
        };
        let ctx = SpecCtx::new(None, Some(stoker::registry::parse_step));
        let step =
            stoker::registry::parse_step(&kind, fields, Some(self.plan.clone()), &ctx).py(py)?;
        Ok(PyPlan::wrap(Plan::of_step(step).py(py)?))
    }

    #[pyo3(signature = (buffer_size, seed=None, reshuffle_each_iteration=true))]
    fn shuffle(
        &self,
        py: Python<'_>,
        buffer_size: usize,
        seed: Option<u64>,
        reshuffle_each_iteration: bool,
    ) -> PyResult<PyPlan> {
        Ok(PyPlan::wrap(
            self.plan
                .shuffle(buffer_size, seed, reshuffle_each_iteration)
                .py(py)?,
        ))
    }

    #[pyo3(signature = (seed=None, reshuffle_each_iteration=true))]
    fn global_shuffle(
        &self,
        py: Python<'_>,
        seed: Option<u64>,
        reshuffle_each_iteration: bool,
    ) -> PyResult<PyPlan> {
        let input = self.plan.clone();
        self.then(
            py,
            GlobalShuffle::new(input, seed, reshuffle_each_iteration),
        )
    }

    fn map(
        &self,
        py: Python<'_>,
        ops: Vec<Bound<'_, PyAny>>,
        num_parallel_calls: Option<i64>,
        deterministic: Option<bool>,
    ) -> PyResult<PyPlan> {
        let ops = ops
            .iter()
            .map(|o| op_of(py, o))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyPlan::wrap(
            self.plan
                .map(ops, num_parallel_calls, deterministic)
                .py(py)?,
        ))
    }

    /// `padding_json`: `{"shapes": {field: [size or null, ...]}, "values": {field: number}}`.
    fn padded_batch(
        &self,
        py: Python<'_>,
        batch_size: usize,
        drop_remainder: bool,
        padding_json: &str,
    ) -> PyResult<PyPlan> {
        let padding: Padding = serde_json::from_str(padding_json)
            .map_err(|e| crate::errors::invalid_argument(format!("padded_batch: {e}")))?;
        Ok(PyPlan::wrap(
            self.plan
                .padded_batch(batch_size, drop_remainder, padding)
                .py(py)?,
        ))
    }

    fn take_while(&self, py: Python<'_>, predicate: Py<PyAny>) -> PyResult<PyPlan> {
        let predicate = Arc::new(PyPredicate::new(py, predicate));
        self.then(
            py,
            TakeWhile {
                input: self.plan.clone(),
                predicate,
            },
        )
    }

    fn filter(&self, py: Python<'_>, predicate: Py<PyAny>) -> PyResult<PyPlan> {
        let predicate = Arc::new(PyPredicate::new(py, predicate));
        self.then(
            py,
            Filter {
                input: self.plan.clone(),
                predicate,
            },
        )
    }

    fn concatenate(&self, py: Python<'_>, other: PyRef<'_, PyPlan>) -> PyResult<PyPlan> {
        self.then(
            py,
            Concatenate {
                input: self.plan.clone(),
                other: other.plan.clone(),
            },
        )
    }

    fn window(
        &self,
        py: Python<'_>,
        size: usize,
        shift: usize,
        stride: usize,
        drop_remainder: bool,
    ) -> PyResult<PyPlan> {
        self.then(
            py,
            Window {
                input: self.plan.clone(),
                size,
                shift,
                stride,
                drop_remainder,
            },
        )
    }

    /// `init()` gives the initial state; `step(state, {name: array})` gives
    /// `(next state, [(name, array), ...])`.
    fn scan(&self, py: Python<'_>, init: Py<PyAny>, step: Py<PyAny>) -> PyResult<PyPlan> {
        self.then(
            py,
            Scan {
                input: self.plan.clone(),
                scanner: Arc::new(PyScanner::new(py, init, step)),
            },
        )
    }

    /// `key({name: array})` → int, `size(key)` → int, `reduce(key, window plan)` → Plan.
    fn group_by_window(
        &self,
        py: Python<'_>,
        key: Py<PyAny>,
        size: Py<PyAny>,
        reduce: Py<PyAny>,
    ) -> PyResult<PyPlan> {
        self.then(
            py,
            GroupByWindow {
                input: self.plan.clone(),
                grouper: Arc::new(PyGrouper::new(py, key, size, reduce)),
            },
        )
    }

    /// Every `num_shards`-th element from the `index`-th; `by_rank`: a rank's share of a
    /// data-parallel job (as many elements for every rank; batches regrouped per rank);
    /// `uneven` (a rank's share too): no element left out, each share's last batch may be short.
    #[pyo3(signature = (num_shards, index, by_rank=false, uneven=false))]
    fn shard(
        &self,
        py: Python<'_>,
        num_shards: u64,
        index: u64,
        by_rank: bool,
        uneven: bool,
    ) -> PyResult<PyPlan> {
        let shard = Shard::new(self.plan.clone(), num_shards, index, by_rank || uneven);
        if uneven {
            return self.then(py, shard.uneven());
        }
        if by_rank && num_shards > 0 && index < num_shards {
            stoker::datasets::shard::check_rank_share(&shard).py(py)?;
        }
        self.then(py, shard)
    }

    /// The rows one pass hands out, as planned, where it ends in a batch whose input's
    /// length is known (the steps after the batch must keep its rows: the caller checks);
    /// `None` otherwise.
    fn rows_per_pass(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        Ok(stoker::datasets::shard::rows_per_pass(
            self.pipeline(py)?.plan(),
        ))
    }

    #[staticmethod]
    fn zip(
        py: Python<'_>,
        plans: Vec<PyRef<'_, PyPlan>>,
        prefixes: Vec<String>,
    ) -> PyResult<PyPlan> {
        let inputs = plans.iter().map(|p| p.plan.clone()).collect();
        Ok(PyPlan::wrap(Plan::new(Zip { inputs, prefixes }).py(py)?))
    }

    /// `make()` starts the generator: an iterator of `[(name, array), ...]` lists, one per
    /// element, of the fields `fields` declares (name, dtype, shape with `None` for any).
    #[staticmethod]
    fn from_generator(
        py: Python<'_>,
        make: Py<PyAny>,
        name: String,
        fields: Vec<(String, String, Vec<Option<usize>>)>,
    ) -> PyResult<PyPlan> {
        let specs = fields
            .into_iter()
            .map(|(n, d, shape)| {
                let dtype = DType::parse(&d).ok_or_else(|| {
                    crate::errors::invalid_argument(format!(
                        "from_generator: unknown dtype '{d}' of '{n}'"
                    ))
                })?;
                Ok(FieldSpec::new(n, dtype, shape))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let step = FromGenerator {
            generator: Arc::new(PyGenerator::new(make, name)),
            schema: Schema::new(specs),
        };
        Ok(PyPlan::wrap(Plan::new(step).py(py)?))
    }

    #[staticmethod]
    #[pyo3(signature = (plans, weights, seed, stop_on_empty_dataset, rerandomize_each_iteration))]
    fn sample_from_datasets(
        py: Python<'_>,
        plans: Vec<PyRef<'_, PyPlan>>,
        weights: Option<Vec<f64>>,
        seed: Option<u64>,
        stop_on_empty_dataset: bool,
        rerandomize_each_iteration: bool,
    ) -> PyResult<PyPlan> {
        let inputs = plans.iter().map(|p| p.plan.clone()).collect();
        let step = SampleFromDatasets::new(
            inputs,
            weights,
            seed,
            stop_on_empty_dataset,
            rerandomize_each_iteration,
        )
        .py(py)?;
        Ok(PyPlan::wrap(Plan::new(step).py(py)?))
    }

    #[staticmethod]
    fn choose_from_datasets(
        py: Python<'_>,
        plans: Vec<PyRef<'_, PyPlan>>,
        choices: PyRef<'_, PyPlan>,
        stop_on_empty_dataset: bool,
    ) -> PyResult<PyPlan> {
        let step = ChooseFromDatasets {
            inputs: plans.iter().map(|p| p.plan.clone()).collect(),
            choices: choices.plan.clone(),
            stop_on_empty_dataset,
        };
        Ok(PyPlan::wrap(Plan::new(step).py(py)?))
    }

    fn enumerate(
        &self,
        py: Python<'_>,
        start: i64,
        index_name: String,
        prefix: String,
    ) -> PyResult<PyPlan> {
        self.then(
            py,
            Enumerate {
                input: self.plan.clone(),
                start,
                index_name,
                prefix,
            },
        )
    }

    #[pyo3(signature = (on_bad_record=None, threads=None, optimizations=None, deterministic=None, autotune=None, ram_budget=None))]
    #[allow(clippy::too_many_arguments)]
    fn with_options(
        &self,
        py: Python<'_>,
        on_bad_record: Option<&str>,
        threads: Option<usize>,
        optimizations: Option<std::collections::BTreeMap<String, bool>>,
        deterministic: Option<bool>,
        autotune: Option<bool>,
        ram_budget: Option<u64>,
    ) -> PyResult<PyPlan> {
        let on_bad_record = match on_bad_record {
            None | Some("raise") => ErrorPolicy::Raise,
            Some("skip") => ErrorPolicy::Skip,
            Some(other) => {
                return Err(crate::errors::invalid_argument(format!(
                    "on_bad_record must be 'raise' or 'skip', not '{other}'"
                )))
            }
        };
        if threads == Some(0) {
            return Err(crate::errors::invalid_argument(
                "threads must be at least 1",
            ));
        }
        if ram_budget == Some(0) {
            return Err(crate::errors::invalid_argument(
                "ram_budget must be at least 1 byte",
            ));
        }
        self.then(
            py,
            WithOptions {
                input: self.plan.clone(),
                options: PipelineOptions {
                    on_bad_record,
                    threads,
                    deterministic,
                    autotune,
                    ram_budget,
                    optimizations: optimizations.unwrap_or_default(),
                },
            },
        )
    }

    /// `[(name, dtype, shape)]`, shape dims `None` when unknown; `None` for a dynamic schema.
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        let s = self.plan.schema();
        if s.dynamic {
            return Ok(None);
        }
        let items = s
            .fields
            .iter()
            .map(|f| (f.name.clone(), f.dtype.name(), f.shape.clone()))
            .collect::<Vec<_>>();
        Ok(Some(PyList::new(py, items)?))
    }

    fn explain(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.pipeline(py)?.explain())
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let snapshot = self.pipeline(py)?.stats();
        let v =
            serde_json::to_value(snapshot).map_err(|e| crate::errors::internal(e.to_string()))?;
        json_to_py(py, &v)
    }

    /// Runs the pipeline alone on fresh counters and returns throughput, counters and the
    /// bottleneck verdict (with its text under `verdict.text`).
    #[pyo3(signature = (seconds, elements, warmup))]
    fn diagnose<'py>(
        &self,
        py: Python<'py>,
        seconds: Option<f64>,
        elements: Option<u64>,
        warmup: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let result = self.bench(py, seconds, elements, warmup)?;
        let mut v =
            serde_json::to_value(&result).map_err(|e| crate::errors::internal(e.to_string()))?;
        v["verdict"]["text"] = serde_json::Value::String(result.verdict.to_text());
        json_to_py(py, &v)
    }

    /// Runs the pipeline alone like `diagnose` and writes the HTML report to `path`, with a
    /// training loop's steps (milliseconds) when given.
    #[pyo3(signature = (path, title, seconds, elements, warmup, steps=None))]
    #[allow(clippy::too_many_arguments)]
    fn report(
        &self,
        py: Python<'_>,
        path: std::path::PathBuf,
        title: String,
        seconds: Option<f64>,
        elements: Option<u64>,
        warmup: u64,
        steps: Option<(Vec<f64>, Vec<f64>, String)>,
    ) -> PyResult<()> {
        let result = self.bench(py, seconds, elements, warmup)?;
        let steps = steps.map(|(input_ms, compute_ms, verdict)| stoker::report::Steps {
            input_ms,
            compute_ms,
            verdict,
        });
        let html = stoker::report::render(&title, &result, steps.as_ref());
        std::fs::write(&path, html)
            .map_err(|e| crate::errors::file_error_at(&path.to_string_lossy(), &e))
    }

    fn spec<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let v = stoker::spec::to_spec(&self.plan).py(py)?;
        json_to_py(py, &v)
    }

    fn save_spec(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        stoker::spec::save(&self.plan, path).py(py)
    }

    /// What this pipeline's drawn seeds (of the steps given no seed) stand for, in the
    /// plan's order.
    fn seed_values(&self, py: Python<'_>) -> PyResult<Vec<u64>> {
        Ok(self.pipeline(py)?.seed_values())
    }

    /// Makes the iterations started from now on take `values` for the drawn seeds.
    fn set_seed_values(&self, py: Python<'_>, values: Vec<u64>) -> PyResult<()> {
        self.pipeline(py)?.set_seed_values(values).py(py)
    }

    /// The thread budget and where it comes from.
    fn budget(&self, py: Python<'_>) -> PyResult<(usize, String)> {
        let b = self.pipeline(py)?.plan().options().budget();
        Ok((b.threads, b.source))
    }

    /// The plan with its image chains' pixels left to a device (see
    /// `stoker::planner::device_images`), and the device halves' specs as JSON; an
    /// `InvalidArgumentError` saying why when no chain can be.
    /// `auto_share`: the CPU share is the process's live one (`set_device_cpu_share`).
    fn device_images(
        &self,
        py: Python<'_>,
        cpu_share: f64,
        auto_share: bool,
    ) -> PyResult<(PyPlan, Vec<String>)> {
        match stoker::planner::device_images::split(&self.plan, cpu_share, auto_share).py(py)? {
            Ok((plan, devices)) => {
                let specs = devices
                    .iter()
                    .map(|d| d.spec().map(|v| v.to_string()))
                    .collect::<stoker_core::Result<Vec<_>>>()
                    .py(py)?;
                Ok((PyPlan::wrap(plan), specs))
            }
            Err(reason) => Err(crate::errors::invalid_argument(format!(
                "decode_on: no image chain the device can take ({reason}); it takes \
                 decode_image (uint8, channels=1 or 3) -> random_resized_crop -> flips, \
                 convert_image_dtype, brightness/contrast color_jitter, normalize -> layout"
            ))),
        }
    }

    /// What the user should hear once about the plan (a rank's share that leaves work every
    /// rank repeats).
    fn plan_warnings(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        Ok(self.pipeline(py)?.warnings().to_vec())
    }

    /// The steps given no seed (their seeds are drawn), as `explain()` names them.
    fn unseeded_steps(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        Ok(self.pipeline(py)?.unseeded_steps())
    }

    /// A state at the start of iteration `epoch` (the next one when `None`), before anything
    /// ran: restoring it starts that iteration with this pipeline's seeds.
    #[pyo3(signature = (epoch=None))]
    fn start_state<'py>(
        &self,
        py: Python<'py>,
        epoch: Option<u64>,
    ) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        let state = self.pipeline(py)?.start_state(epoch);
        Ok(pyo3::types::PyBytes::new(py, &state))
    }

    /// Its last step's identity, unique in this process (Python keeps notes on steps by it).
    fn id(&self) -> u64 {
        self.plan.id()
    }

    /// Whether any of its steps skips bad records (`with_options(on_bad_record="skip")`).
    fn skips_bad_records(&self) -> bool {
        fn skips(plan: &Plan) -> bool {
            let step = plan.step();
            step.options()
                .is_some_and(|o| o.on_bad_record == stoker_core::ErrorPolicy::Skip)
                || step.inputs().into_iter().any(skips)
        }
        skips(&self.plan)
    }

    /// The kind of its last step (as `step_kinds()` names it).
    fn kind(&self) -> &'static str {
        self.plan.step().kind()
    }

    /// The plans its last step reads (none for a source).
    fn inputs(&self) -> Vec<PyPlan> {
        self.plan
            .step()
            .inputs()
            .into_iter()
            .map(|p| PyPlan::wrap(p.clone()))
            .collect()
    }

    /// How many elements one pass hands out: tf.data's numbers (-1 infinite, -2 unknown).
    fn cardinality(&self) -> i64 {
        self.plan.step().cardinality().as_i64()
    }

    /// Starts an iteration, at `state` (bytes from `Iterator.state()`) when given, else as
    /// iteration `epoch` when given (else the next one). A state at the start of an
    /// iteration (saved before its first element, or after the end of the one before) starts
    /// iteration `epoch` instead when it is given.
    #[pyo3(signature = (state=None, epoch=None))]
    fn iterate(
        &self,
        py: Python<'_>,
        state: Option<Vec<u8>>,
        epoch: Option<u64>,
    ) -> PyResult<PyIter> {
        let pipeline = self.pipeline(py)?;
        let Some(state) = state else {
            let run = py
                .detach(|| match epoch {
                    Some(e) => pipeline.start_iteration(e),
                    None => pipeline.start_at(None),
                })
                .py(py)?;
            return Ok(PyIter::new(run, pipeline));
        };
        // A restore may run a stage's input again through the elements it had taken, which
        // can take a while: it runs on a thread of its own while this one waits in short
        // slices, so that Ctrl-C ends the wait (the restore is then dropped when it ends).
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let rx = std::sync::Mutex::new(rx);
        let p = Arc::clone(&pipeline);
        std::thread::Builder::new()
            .name("stoker-restore".into())
            .spawn(move || {
                let _ = tx.send(p.start_from(&state, epoch));
            })
            .map_err(|e| crate::errors::resource("starting the restore", e))?;
        loop {
            let wait = || match rx.lock() {
                Ok(rx) => rx.recv_timeout(std::time::Duration::from_millis(50)),
                Err(_) => Err(std::sync::mpsc::RecvTimeoutError::Disconnected),
            };
            match py.detach(wait) {
                Ok(run) => return Ok(PyIter::new(run.py(py)?, pipeline)),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => py.check_signals()?,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(crate::errors::internal(
                        "the restore ended without a result",
                    ))
                }
            }
        }
    }
}
