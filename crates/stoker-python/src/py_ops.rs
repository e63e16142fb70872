//! Python functions as pipeline steps: `map`, `filter` and `interleave` callables.
//!
//! They run on the engine's worker threads and take the GIL only while the function runs;
//! their time is counted apart in the stage's stats (`python_s`).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use pyo3::exceptions::{PyException, PyStopIteration};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use stoker::build::BuildCtx;
use stoker::datasets::from_generator::Generator;
use stoker::datasets::group_by_window::Grouper;
use stoker::datasets::scan::{ScanRun, Scanner};
use stoker::plan::Plan;
use stoker::sources::Opener;
use stoker_core::element::{Element, Names, Schema};
use stoker_core::exec::{BoxIter, ElementIter, State};
use stoker_core::op::{Op, OpCtx, Predicate};
use stoker_core::{Error, ErrorPolicy, Result, StageStats, StatsRegistry};

use crate::convert::{py_to_tensor, tensor_to_py};
use crate::errors::{from_pyerr, is_building_error};
use crate::py_plan::PyPlan;

/// Python calls in progress on engine threads: the thread's Python id and the stage they run
/// for. Entries are added and removed with the GIL held, right around the call, so that whoever
/// holds the GIL and finds an entry knows that thread is inside the call.
static CALLS: Mutex<Vec<(std::ffi::c_ulong, usize)>> = Mutex::new(Vec::new());

/// Set (with the GIL held) when the interpreter exits: engine threads start no Python call
/// after it (see [`quiesce`]).
static EXITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Engine threads attached to the interpreter now (counted with the GIL held): one of them
/// may give the GIL up inside a call and need it back (see [`quiesce`]).
static ATTACHED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// `Python::attach` for the engine's threads: counted in [`ATTACHED`] from when the thread
/// holds the GIL until it lets it go (also when it unwinds).
fn engine_attach<T>(f: impl FnOnce(Python<'_>) -> T) -> T {
    struct Attached;
    impl Drop for Attached {
        fn drop(&mut self) {
            ATTACHED.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    Python::attach(|py| {
        ATTACHED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _attached = Attached;
        f(py)
    })
}

/// Calls `f` on this thread as a Python call made for `stage` (see [`interrupt_calls`]); once
/// the interpreter is exiting, raises `KeyboardInterrupt` instead of calling it.
fn tracked<T>(_py: Python<'_>, stage: &StageStats, f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    // The GIL is held: `quiesce` sets the flag holding it too, so no call starts after it.
    if EXITING.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(pyo3::exceptions::PyKeyboardInterrupt::new_err(
            "the interpreter is exiting",
        ));
    }
    // SAFETY: PyThread_get_thread_ident has no preconditions.
    let ident = unsafe { pyo3::ffi::PyThread_get_thread_ident() };
    let key = (ident, std::ptr::from_ref(stage) as usize);
    let calls = || CALLS.lock().unwrap_or_else(|e| e.into_inner());
    calls().push(key);
    let out = f();
    let mut list = calls();
    if let Some(i) = list.iter().rposition(|c| *c == key) {
        list.swap_remove(i);
    }
    out
}

/// Called at interpreter exit, before Python finalizes: engine threads start no Python call
/// from now on, and those in progress (of pipelines whose threads were left to finish on
/// their own) are interrupted and waited for, up to `timeout` seconds, until no engine thread
/// is attached to the interpreter. A thread still attached when Python finalizes (inside a
/// call that gave the GIL up, or after one, converting its result) would take the GIL back
/// during finalization, which CPython answers by ending the thread under its feet and then
/// aborting the process. Returns how many calls were still in progress at the end.
#[pyfunction]
pub fn quiesce(py: Python<'_>, timeout: f64) -> usize {
    EXITING.store(true, std::sync::atomic::Ordering::Relaxed);
    let deadline = Instant::now() + std::time::Duration::from_secs_f64(timeout.clamp(0.0, 60.0));
    loop {
        let calls: Vec<std::ffi::c_ulong> = {
            let list = CALLS.lock().unwrap_or_else(|e| e.into_inner());
            list.iter().map(|&(ident, _)| ident).collect()
        };
        let attached = ATTACHED.load(std::sync::atomic::Ordering::SeqCst);
        if (calls.is_empty() && attached == 0) || Instant::now() >= deadline {
            return calls.len();
        }
        for ident in calls {
            // SAFETY: the GIL is held (`py`); the exception object is a static type.
            unsafe {
                pyo3::ffi::PyThreadState_SetAsyncExc(
                    ident as std::ffi::c_long,
                    pyo3::ffi::PyExc_KeyboardInterrupt,
                );
            }
        }
        py.detach(|| std::thread::sleep(std::time::Duration::from_millis(10)));
    }
}

/// Raises `KeyboardInterrupt` inside the Python calls in progress for the stages of
/// `pipeline` (at their next bytecode: a loop stops, a call blocked in C does not), so that
/// their threads can end when the consumer has given up on the pipeline. Returns how many.
pub fn interrupt_calls(_py: Python<'_>, pipeline: &StatsRegistry) -> usize {
    let calls = CALLS.lock().unwrap_or_else(|e| e.into_inner());
    let mut n = 0;
    for &(ident, stage) in calls.iter() {
        if pipeline.holds(stage as *const StageStats) {
            // SAFETY: the GIL is held (`_py`); the exception object is a static type.
            unsafe {
                pyo3::ffi::PyThreadState_SetAsyncExc(
                    ident as std::ffi::c_long,
                    pyo3::ffi::PyExc_KeyboardInterrupt,
                );
            }
            n += 1;
        }
    }
    n
}

/// The element as a dict `{name: array}`.
pub fn element_to_dict<'py>(py: Python<'py>, e: &Element) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (n, t) in e.names.iter().zip(&e.tensors) {
        d.set_item(n.as_ref(), tensor_to_py(py, t)?)?;
    }
    Ok(d)
}

/// An element from a sequence of `(name, array)` pairs.
fn pairs_to_element(obj: &Bound<'_, PyAny>, step: &str) -> PyResult<Element> {
    let mut names = Vec::new();
    let mut tensors = Vec::new();
    for item in obj.try_iter()? {
        let item = item?;
        let (name, value): (String, Bound<'_, PyAny>) = item.extract()?;
        tensors.push(py_to_tensor(&value, &format!("{step}: output '{name}'"))?);
        names.push(Arc::<str>::from(name));
    }
    Ok(Element::new(Names::from(names), tensors))
}

fn call_name(py: Python<'_>, f: &Py<PyAny>) -> String {
    f.bind(py)
        .getattr("__name__")
        .and_then(|n| n.extract::<String>())
        .unwrap_or_else(|_| "<python function>".to_string())
}

/// `map(fn)`: the adapter takes `{name: array}` and returns `[(name, array), ...]`.
#[derive(Debug)]
pub struct PyFuncOp {
    func: Py<PyAny>,
    name: String,
}

impl PyFuncOp {
    pub fn new(py: Python<'_>, func: Py<PyAny>) -> PyFuncOp {
        let name = call_name(py, &func);
        PyFuncOp { func, name }
    }
}

/// The time a Python call takes: from its start, on the clock and on the calling thread's CPU
/// (the part the function did not spend waiting with the GIL released).
struct PyTime {
    wall: Instant,
    cpu: Option<std::time::Duration>,
}

impl PyTime {
    fn start() -> PyTime {
        PyTime {
            wall: Instant::now(),
            cpu: thread_cpu(),
        }
    }

    fn wall(&self) -> std::time::Duration {
        self.wall.elapsed()
    }

    fn cpu(&self) -> Option<std::time::Duration> {
        Some(thread_cpu()?.saturating_sub(self.cpu?))
    }
}

/// The calling thread's CPU time; `None` where the platform does not tell.
fn thread_cpu() -> Option<std::time::Duration> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        (rc == 0).then(|| {
            std::time::Duration::new(
                u64::try_from(ts.tv_sec).unwrap_or(0),
                u32::try_from(ts.tv_nsec).unwrap_or(0),
            )
        })
    }
    #[cfg(not(unix))]
    {
        None
    }
}

impl Op for PyFuncOp {
    fn name(&self) -> &str {
        &self.name
    }

    fn output_schema(&self, _input: &Schema) -> Result<Schema> {
        // Known only once the function has run.
        Ok(Schema::dynamic())
    }

    fn deterministic(&self) -> bool {
        false
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        engine_attach(|py| {
            let t = PyTime::start();
            let r = element_to_dict(py, &input)
                .and_then(|d| tracked(py, ctx.stats, || self.func.bind(py).call1((d,))))
                .and_then(|out| pairs_to_element(&out, &self.name));
            ctx.stats.add_python(t.wall(), t.cpu());
            match r {
                Ok(e) => Ok(Some(e)),
                Err(e) => skipped(py, ctx, &self.name, e).map(|()| None),
            }
        })
    }

    fn spec(&self) -> Result<serde_json::Value> {
        Err(Error::Spec(format!(
            "map with the Python function '{}' cannot be saved in a spec; use native ops (stoker.ops)",
            self.name
        )))
    }
}

/// Under the skip policy (`ignore_errors()`), an element whose Python function raised an
/// `Exception` is dropped, as tf.data drops it, and counted with the error as the reason;
/// otherwise (or for `KeyboardInterrupt`, `SystemExit`) the error stops the pipeline.
fn skipped(py: Python<'_>, ctx: &OpCtx<'_>, func: &str, e: PyErr) -> Result<()> {
    let reason = skip_reason(py, ctx.policy, func, &format!("element {}", ctx.element), e)?;
    ctx.skip(reason);
    Ok(())
}

/// What [`skipped`] counts for `e`, raised by the Python function `func` on `what` (e.g.
/// "element 3"), or the error that stops the pipeline. That error is the function's own
/// exception, with a note naming `func` and `what` where Python keeps notes. A `NameError`
/// (a misspelt name: the code, not the data) is never skipped.
fn skip_reason(
    py: Python<'_>,
    policy: ErrorPolicy,
    func: &str,
    what: &str,
    e: PyErr,
) -> Result<String> {
    if policy == ErrorPolicy::Skip
        && e.is_instance_of::<PyException>(py)
        && !e.is_instance_of::<pyo3::exceptions::PyNameError>(py)
    {
        return Ok(format!("{what}: {func} raised {e}"));
    }
    let value = e.value(py);
    if value.hasattr("add_note").unwrap_or(false) {
        // A note that cannot be added leaves the error as it was raised.
        let _ = value.call_method1(
            "add_note",
            (format!("(stoker: raised by '{func}' on {what})"),),
        );
    }
    Err(from_pyerr(e))
}

/// [`skip_reason`] counted in `stats`, for a function that puts part of a pipeline together
/// (a dataset of `flat_map`'s, a key of `group_by_window`'s): stoker's errors of a wrong
/// argument there are the code's, would fail for every element (tf.data finds them when it
/// traces), and are never skipped.
fn skip_unless_building(
    py: Python<'_>,
    policy: ErrorPolicy,
    stats: &StageStats,
    func: &str,
    what: &str,
    e: PyErr,
) -> Result<()> {
    let policy = if is_building_error(py, &e) {
        ErrorPolicy::Raise
    } else {
        policy
    };
    stats.add_skip(skip_reason(py, policy, func, what, e)?);
    Ok(())
}

/// `filter(predicate)`.
#[derive(Debug)]
pub struct PyPredicate {
    func: Py<PyAny>,
    name: String,
}

impl PyPredicate {
    pub fn new(py: Python<'_>, func: Py<PyAny>) -> PyPredicate {
        let name = call_name(py, &func);
        PyPredicate { func, name }
    }
}

impl Predicate for PyPredicate {
    fn name(&self) -> &str {
        &self.name
    }

    fn test_or_skip(&self, element: &Element, ctx: &OpCtx<'_>) -> Result<Option<bool>> {
        engine_attach(|py| {
            let t = PyTime::start();
            let r = element_to_dict(py, element)
                .and_then(|d| tracked(py, ctx.stats, || self.func.bind(py).call1((d,))))
                .and_then(|v| v.is_truthy());
            ctx.stats.add_python(t.wall(), t.cpu());
            match r {
                Ok(holds) => Ok(Some(holds)),
                Err(e) => skipped(py, ctx, &self.name, e).map(|()| None),
            }
        })
    }

    fn spec(&self) -> Result<serde_json::Value> {
        Err(Error::Spec(format!(
            "filter with the Python function '{}' cannot be saved in a spec",
            self.name
        )))
    }
}

/// `interleave(fn)`: the adapter takes `{name: array}` and returns a `Plan`.
#[derive(Debug)]
pub struct PyOpener {
    func: Py<PyAny>,
    name: String,
}

impl PyOpener {
    pub fn new(py: Python<'_>, func: Py<PyAny>) -> PyOpener {
        let name = call_name(py, &func);
        PyOpener { func, name }
    }
}

impl Opener for PyOpener {
    fn output_schema(&self, _input: &Schema) -> Result<Schema> {
        Ok(Schema::dynamic())
    }

    fn open(
        &self,
        index: u64,
        element: &Element,
        ctx: &BuildCtx,
        stats: &Arc<StageStats>,
        at: Option<&stoker_core::exec::State>,
    ) -> Result<BoxIter> {
        let plan = engine_attach(|py| {
            let t = PyTime::start();
            let r = element_to_dict(py, element)
                .and_then(|d| tracked(py, stats, || self.func.bind(py).call1((d,))))
                .and_then(|p| Ok(p.cast::<PyPlan>().map_err(PyErr::from)?.get().plan.clone()));
            stats.add_python(t.wall(), t.cpu());
            match r {
                Ok(plan) => Ok(Some(plan)),
                Err(e) => {
                    let what = format!("input element {index}");
                    let policy = ctx.options.on_bad_record;
                    skip_unless_building(py, policy, stats, &self.name, &what, e)?;
                    Ok(None)
                }
            }
        })?;
        let Some(plan) = plan else {
            // Skipped as tf.data's `ignore_errors` skips it: the element opens no dataset.
            return Ok(Box::new(SkippedOpen));
        };
        // Each opened dataset gets its own stats, so that the pipeline's list stays short;
        // its losses are counted in the interleave's stage too.
        let child = BuildCtx {
            stats: StatsRegistry::under(stats),
            ..ctx.clone()
        };
        stoker::plan::iterate_at(&plan, &child, at)
    }

    fn spec(&self) -> Result<serde_json::Value> {
        Err(Error::Spec(format!(
            "interleave with the Python function '{}' cannot be saved; interleave stoker.TFRecordDataset instead",
            self.name
        )))
    }
}

/// The dataset of an input element whose function raised under the skip policy: empty, and
/// counting that element as one bad record in its state, as the interleave counts those of
/// the datasets that end.
struct SkippedOpen;

impl ElementIter for SkippedOpen {
    fn next(&mut self) -> Result<Option<Element>> {
        Ok(None)
    }

    fn state(&self) -> Result<State> {
        Ok(State::default().with_skipped(1))
    }
}

/// `(names, arrays)` of an element, for the Python side to pack into its structure.
pub fn element_to_py<'py>(
    py: Python<'py>,
    e: &Element,
    names_cache: &mut Option<(Names, Py<PyTuple>)>,
) -> PyResult<Bound<'py, PyTuple>> {
    let names = match names_cache {
        Some((n, t)) if Arc::ptr_eq(n, &e.names) => t.bind(py).clone(),
        _ => {
            let t = PyTuple::new(py, e.names.iter().map(|n| n.as_ref()))?;
            *names_cache = Some((e.names.clone(), t.clone().unbind()));
            t
        }
    };
    let arrays = PyList::empty(py);
    for t in &e.tensors {
        arrays.append(tensor_to_py(py, t)?)?;
    }
    PyTuple::new(py, [names.into_any(), arrays.into_any()])
}

/// `from_generator`: `make()` starts the generator, as an iterator of `[(name, array), ...]`
/// lists (the Python side converts and checks each element against the signature).
#[derive(Debug)]
pub struct PyGenerator {
    make: Py<PyAny>,
    name: String,
}

impl PyGenerator {
    pub fn new(make: Py<PyAny>, name: String) -> PyGenerator {
        PyGenerator { make, name }
    }
}

impl Generator for PyGenerator {
    fn start(&self, stats: &Arc<StageStats>) -> Result<BoxIter> {
        let it = engine_attach(|py| {
            let t = PyTime::start();
            let r = tracked(py, stats, || self.make.bind(py).call0()).map(Bound::unbind);
            stats.add_python(t.wall(), t.cpu());
            r.map_err(from_pyerr)
        })?;
        Ok(Box::new(PyGeneratorIter {
            it,
            stats: Arc::clone(stats),
            name: self.name.clone(),
        }))
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}

struct PyGeneratorIter {
    it: Py<PyAny>,
    stats: Arc<StageStats>,
    name: String,
}

impl ElementIter for PyGeneratorIter {
    fn next(&mut self) -> Result<Option<Element>> {
        engine_attach(|py| {
            let t = PyTime::start();
            let r = tracked(py, &self.stats, || {
                match self.it.bind(py).call_method0("__next__") {
                    Ok(v) => pairs_to_element(&v, &self.name).map(Some),
                    Err(e) if e.is_instance_of::<PyStopIteration>(py) => Ok(None),
                    Err(e) => Err(e),
                }
            });
            self.stats.add_python(t.wall(), t.cpu());
            r.map_err(from_pyerr)
        })
    }

    /// The count of elements is kept by `from_generator` itself.
    fn state(&self) -> Result<State> {
        Ok(State::leaf(Vec::new()))
    }
}

/// `scan`: `init()` gives the initial state (a Python object); `step(state, {name: array})`
/// gives `(next state, [(name, array), ...])`.
#[derive(Debug)]
pub struct PyScanner {
    init: Py<PyAny>,
    step: Py<PyAny>,
    name: String,
}

impl PyScanner {
    pub fn new(py: Python<'_>, init: Py<PyAny>, step: Py<PyAny>) -> PyScanner {
        let name = call_name(py, &step);
        PyScanner { init, step, name }
    }
}

impl Scanner for PyScanner {
    fn start(&self, stats: &Arc<StageStats>) -> Result<Box<dyn ScanRun>> {
        let state = engine_attach(|py| {
            tracked(py, stats, || self.init.bind(py).call0())
                .map(Bound::unbind)
                .map_err(from_pyerr)
        })?;
        Ok(Box::new(PyScanRun {
            state,
            step: engine_attach(|py| self.step.clone_ref(py)),
            stats: Arc::clone(stats),
            name: self.name.clone(),
        }))
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}

struct PyScanRun {
    state: Py<PyAny>,
    step: Py<PyAny>,
    stats: Arc<StageStats>,
    name: String,
}

impl ScanRun for PyScanRun {
    fn step(&mut self, element: Element) -> Result<Element> {
        engine_attach(|py| {
            let t = PyTime::start();
            let r = element_to_dict(py, &element)
                .and_then(|d| {
                    tracked(py, &self.stats, || {
                        self.step.bind(py).call1((self.state.bind(py), d))
                    })
                })
                .and_then(|out| {
                    let (state, pairs): (Bound<'_, PyAny>, Bound<'_, PyAny>) = out.extract()?;
                    let e = pairs_to_element(&pairs, &self.name)?;
                    self.state = state.unbind();
                    Ok(e)
                });
            self.stats.add_python(t.wall(), t.cpu());
            r.map_err(from_pyerr)
        })
    }
}

/// `group_by_window`: `key({name: array})` → int, `size(key)` → int, `reduce(key, window
/// plan)` → a `Plan`.
#[derive(Debug)]
pub struct PyGrouper {
    key: Py<PyAny>,
    key_name: String,
    size: Py<PyAny>,
    reduce: Py<PyAny>,
    name: String,
}

impl PyGrouper {
    pub fn new(py: Python<'_>, key: Py<PyAny>, size: Py<PyAny>, reduce: Py<PyAny>) -> PyGrouper {
        let name = call_name(py, &reduce);
        let key_name = call_name(py, &key);
        PyGrouper {
            key,
            key_name,
            size,
            reduce,
            name,
        }
    }

    fn call<T>(&self, stats: &StageStats, f: impl FnOnce(Python<'_>) -> PyResult<T>) -> Result<T> {
        engine_attach(|py| {
            let t = PyTime::start();
            let r = tracked(py, stats, || f(py));
            stats.add_python(t.wall(), t.cpu());
            r.map_err(from_pyerr)
        })
    }
}

impl Grouper for PyGrouper {
    fn key(
        &self,
        element: &Element,
        index: u64,
        policy: ErrorPolicy,
        stats: &StageStats,
    ) -> Result<Option<i64>> {
        engine_attach(|py| {
            let t = PyTime::start();
            let r = tracked(py, stats, || {
                let d = element_to_dict(py, element)?;
                self.key.bind(py).call1((d,))?.extract::<i64>()
            });
            stats.add_python(t.wall(), t.cpu());
            match r {
                Ok(key) => Ok(Some(key)),
                Err(e) => {
                    let what = format!("element {index}");
                    skip_unless_building(py, policy, stats, &self.key_name, &what, e)?;
                    Ok(None)
                }
            }
        })
    }

    fn window_size(&self, key: i64, stats: &StageStats) -> Result<usize> {
        self.call(stats, |py| {
            self.size.bind(py).call1((key,))?.extract::<usize>()
        })
    }

    fn reduce(&self, key: i64, window: Plan, stats: &StageStats) -> Result<Plan> {
        self.call(stats, |py| {
            let window = Py::new(py, PyPlan::wrap(window))?;
            let out = self.reduce.bind(py).call1((key, window))?;
            Ok(out
                .cast::<PyPlan>()
                .map_err(PyErr::from)?
                .get()
                .plan
                .clone())
        })
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}
