//! The Python `Plan` object: a plan node and the pipeline made of it on first use. Its
//! methods are in [`crate::plan`]; the Python functions that make datasets
//! (`crate::py_ops`) build and read it here.

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use stoker::plan::{DatasetOp, Plan};
use stoker::Pipeline;

use crate::errors::IntoPyResult;

#[pyclass(frozen, name = "Plan", module = "stoker._stoker")]
pub struct PyPlan {
    pub plan: Plan,
    /// Made on first use and kept, so that stats add up over every iteration.
    pipeline: Mutex<Option<Arc<Pipeline>>>,
}

impl PyPlan {
    /// Runs the pipeline alone on fresh counters, with the GIL released.
    pub(crate) fn bench(
        &self,
        py: Python<'_>,
        seconds: Option<f64>,
        elements: Option<u64>,
        warmup: u64,
    ) -> PyResult<stoker::bench_run::BenchResult> {
        let limits = stoker::bench_run::BenchLimits {
            warmup,
            seconds,
            elements,
        };
        let plan = self.plan.clone();
        py.detach(|| stoker::bench_run::bench(&plan, limits)).py(py)
    }

    pub(crate) fn wrap(plan: Plan) -> PyPlan {
        PyPlan {
            plan,
            pipeline: Mutex::new(None),
        }
    }

    pub(crate) fn then<T: DatasetOp>(&self, py: Python<'_>, step: T) -> PyResult<PyPlan> {
        Ok(PyPlan::wrap(Plan::new(step).py(py)?))
    }

    pub fn pipeline(&self, py: Python<'_>) -> PyResult<Arc<Pipeline>> {
        let mut guard = self
            .pipeline
            .lock()
            .map_err(|_| crate::errors::internal("pipeline lock poisoned"))?;
        if let Some(p) = guard.as_ref() {
            return Ok(Arc::clone(p));
        }
        let p = Arc::new(Pipeline::new(&self.plan).py(py)?);
        *guard = Some(Arc::clone(&p));
        Ok(p)
    }
}
