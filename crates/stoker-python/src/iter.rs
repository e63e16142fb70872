//! `stoker._stoker.Iterator`: hands elements to Python.
//!
//! The pipeline runs on a driver thread; `__next__` waits for it with the GIL released, in
//! short slices, so that Ctrl-C (or any signal handler) interrupts a blocked `next()`.
//! Closing waits for the pipeline's threads only so long (shorter after an interrupt, and not
//! at all past a second Ctrl-C). Then the pipeline's Python calls still running get a
//! `KeyboardInterrupt` (a looping function stops; one blocked in C, e.g. `time.sleep`, does
//! not), and a thread still stuck after a short grace (in a call that never returns, a read
//! from a pipe) is left to finish on its own, with a `RuntimeWarning`, so that the
//! `KeyboardInterrupt` reaches the user.

use std::time::{Duration, Instant};

use pyo3::exceptions::PyRuntimeWarning;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use std::sync::Arc;

use stoker::pipeline::{Pipeline, Run, Saved};
use stoker_core::element::Names;
use stoker_core::exec::prefetch::{Poll, Prefetch};
use stoker_core::exec::{ElementIter, State};
use stoker_core::StatsRegistry;

use crate::errors::to_pyerr;
use crate::py_ops::{element_to_py, interrupt_calls};

/// How long closing waits for the pipeline's threads to stop before leaving them.
const CLOSE_WAIT: Duration = Duration::from_secs(1);
/// The same after `next()` was interrupted by a signal: the user is waiting for it.
const CLOSE_WAIT_INTERRUPTED: Duration = Duration::from_millis(250);
/// How long the threads get to end once their Python calls were interrupted.
const INTERRUPT_GRACE: Duration = Duration::from_millis(250);
/// How often closing looks for signals while it waits.
const SLICE: Duration = Duration::from_millis(50);

#[pyclass(name = "Iterator", module = "stoker._stoker")]
pub struct PyIter {
    driver: Option<Prefetch>,
    /// The pipeline's stages, whose Python calls closing may interrupt.
    stages: Arc<StatsRegistry>,
    names: Option<(Names, Py<PyTuple>)>,
    interrupted: bool,
    /// The pipeline run, and what a saved state records of it.
    pipeline: Arc<Pipeline>,
    run: Saved,
    /// The state when the run ended (the driver is gone then).
    ended_at: Option<Result<State, String>>,
    /// Whether the run handed out its last element and said so: its state is then the start
    /// of the next iteration.
    finished: bool,
    /// The process that started the run: a `fork()`ed child has none of its threads.
    pid: u32,
}

impl PyIter {
    pub fn new(run: Run, pipeline: Arc<Pipeline>) -> PyIter {
        PyIter {
            driver: Some(run.driver),
            stages: Arc::clone(pipeline.registry()),
            names: None,
            interrupted: false,
            pipeline,
            run: run.saved,
            ended_at: None,
            finished: false,
            pid: std::process::id(),
        }
    }

    /// An error in a `fork()`ed child: the pipeline's threads stayed in the parent, and the
    /// locks they held at the fork may stay locked, so nothing of the run can be used here.
    fn check_process(&self, py: Python<'_>) -> PyResult<()> {
        let here = std::process::id();
        if here == self.pid {
            return Ok(());
        }
        Err(to_pyerr(
            py,
            stoker_core::Error::invalid(
                "iterator",
                format!(
                    "this iterator was started in process {} and this is a fork()ed child \
                     ({here}): the pipeline's threads are not in this process, so it cannot go \
                     on here; start a new iteration in the child (iter(ds), or \
                     ds.iterator(state=...) from a state the parent saved)",
                    self.pid
                ),
            ),
        ))
    }

    /// In a `fork()`ed child, lets go of the run without stopping or joining threads that do
    /// not exist here (joining them would wait forever).
    fn forget_if_forked(&mut self) -> bool {
        if std::process::id() == self.pid {
            return false;
        }
        if let Some(d) = self.driver.take() {
            std::mem::forget(d);
        }
        true
    }

    /// The driver's state after the last element handed out (after the end: at the end).
    fn current_state(&self) -> stoker_core::Result<State> {
        match (&self.driver, &self.ended_at) {
            (Some(d), _) => d.state(),
            (None, Some(Ok(s))) => Ok(s.clone()),
            (None, Some(Err(why))) => Err(stoker_core::Error::invalid("state", why.clone())),
            (None, None) => Err(stoker_core::Error::invalid(
                "state",
                "the iterator was closed before its end: its position is gone",
            )),
        }
    }

    /// Keeps the driver's state before it goes.
    fn keep_state(&mut self) {
        if let Some(d) = &self.driver {
            self.ended_at = Some(d.state().map_err(|e| e.to_string()));
        }
    }

    /// Stops the driver: waits up to `wait` for its threads, then interrupts the pipeline's
    /// Python calls and waits a little more, then leaves any thread still running and warns.
    /// A signal handler's error (a second Ctrl-C) ends the waiting at once.
    fn stop(
        py: Python<'_>,
        stages: &StatsRegistry,
        mut driver: Prefetch,
        wait: Duration,
    ) -> PyResult<()> {
        let start = Instant::now();
        let mut deadline = start + wait;
        let mut grace = false;
        let mut signal = Ok(());
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if py.detach(|| driver.stop_within(left.min(SLICE))) {
                return signal;
            }
            if signal.is_ok() {
                signal = py.check_signals();
            }
            if signal.is_ok() && Instant::now() < deadline && !grace {
                continue;
            }
            // The wait is over (or a signal ended it): the pipeline's Python calls are
            // interrupted, again on every round of the grace period, as a worker may have
            // started another call meanwhile.
            if !grace {
                deadline = Instant::now();
            }
            let calls = interrupt_calls(py, stages);
            if !grace && calls > 0 {
                grace = true;
                deadline = Instant::now() + INTERRUPT_GRACE;
            }
            if Instant::now() < deadline {
                continue;
            }
            driver.detach();
            let message = format!(
                "stoker: the pipeline's threads did not stop within {:.2} s (a stage is blocked, \
                 e.g. in a Python function or a read); they were left to finish on their own",
                start.elapsed().as_secs_f64()
            );
            let warned = PyErr::warn(
                py,
                &py.get_type::<PyRuntimeWarning>(),
                &std::ffi::CString::new(message).unwrap_or_default(),
                1,
            );
            return signal.and(warned);
        }
    }
}

#[pymethods]
impl PyIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// `(names, arrays)` of the next element; `None` at the end.
    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        self.check_process(py)?;
        loop {
            let Some(driver) = self.driver.as_mut() else {
                return Ok(None);
            };
            match py.detach(|| driver.poll(SLICE)) {
                Poll::Pending => {
                    if let Err(e) = py.check_signals() {
                        self.interrupted = true;
                        return Err(e);
                    }
                }
                Poll::Ready(Ok(Some(e))) => {
                    return element_to_py(py, &e, &mut self.names).map(Some)
                }
                Poll::Ready(Ok(None)) => {
                    self.finished = true;
                    self.keep_state();
                    self.close(py)?;
                    return Ok(None);
                }
                Poll::Ready(Err(e)) => {
                    let err = to_pyerr(py, e);
                    self.keep_state();
                    let _ = self.close(py);
                    return Err(err);
                }
            }
        }
    }

    /// Where the iteration stands, after the last element handed out, as a few bytes: a
    /// state [`Plan::iterate`](crate::plan::PyPlan) resumes from exactly. After the end of
    /// the iteration, the start of the next one.
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        self.check_process(py)?;
        if self.finished {
            return Ok(PyBytes::new(py, &self.pipeline.save_ended(&self.run)));
        }
        let state = self.current_state().map_err(|e| to_pyerr(py, e))?;
        Ok(PyBytes::new(
            py,
            &self.pipeline.save(&self.run, Some(&state)),
        ))
    }

    /// The bad records skipped in this iteration before the last element handed out (after
    /// the end: in all), including the count of the state it was restored from: by the steps
    /// below a shard, and by the others. The same however far the threads ran ahead.
    fn skipped(&self, py: Python<'_>) -> PyResult<(u64, u64)> {
        self.check_process(py)?;
        let state = self.current_state().map_err(|e| to_pyerr(py, e))?;
        Ok(state.skipped_split())
    }

    /// Stops the pipeline now and joins its threads (see the module docs for how long it
    /// waits). Waiting must not hold the GIL: a worker may need it to finish a Python call.
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.forget_if_forked() {
            return Ok(());
        }
        if self.ended_at.is_none() {
            self.keep_state();
        }
        let wait = if self.interrupted {
            CLOSE_WAIT_INTERRUPTED
        } else {
            CLOSE_WAIT
        };
        match self.driver.take() {
            Some(d) => PyIter::stop(py, &self.stages, d, wait),
            None => Ok(()),
        }
    }
}

impl Drop for PyIter {
    fn drop(&mut self) {
        if self.forget_if_forked() {
            return;
        }
        if let Some(d) = self.driver.take() {
            Python::attach(|py| {
                if let Err(e) = PyIter::stop(py, &self.stages, d, CLOSE_WAIT) {
                    e.write_unraisable(py, None);
                }
            });
        }
    }
}
