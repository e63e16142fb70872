//! Helpers shared by the integration tests.
#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test
#![allow(dead_code)]

use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use stoker::{Pipeline, Plan};
use stoker_core::{Element, Result};
use stoker_formats::example::{Example, Feature};
use stoker_formats::{Compression, RecordWriter};

pub fn values(e: &Element) -> Vec<i64> {
    e.tensors[0].typed::<i64>().expect("int64 field").to_vec()
}

/// Every element's first field, flattened.
pub fn collect(plan: &Plan) -> Result<Vec<i64>> {
    let p = Pipeline::new(plan)?;
    let mut it = p.iter()?;
    let mut out = Vec::new();
    while let Some(e) = it.next()? {
        out.extend(values(&e));
    }
    Ok(out)
}

pub fn collect_batches(plan: &Plan) -> Result<Vec<Vec<i64>>> {
    let p = Pipeline::new(plan)?;
    let mut it = p.iter()?;
    let mut out = Vec::new();
    while let Some(e) = it.next()? {
        out.push(values(&e));
    }
    Ok(out)
}

pub fn range(n: i64) -> Plan {
    Plan::new(stoker::datasets::range::Range {
        start: 0,
        stop: n,
        step: 1,
    })
    .unwrap()
}

/// Writes Examples `{d: bytes(id as 4 bytes), s: id}` for the given ids.
pub fn write_examples(path: &std::path::Path, ids: impl IntoIterator<Item = i64>, c: Compression) {
    let mut w = RecordWriter::create(path, c).unwrap();
    for i in ids {
        let ex = Example::with_features([
            (
                "d".to_string(),
                Feature::bytes(vec![Bytes::from((i as u32).to_le_bytes().to_vec())]),
            ),
            ("s".to_string(), Feature::int64s(vec![i])),
        ]);
        w.write(&ex.serialize()).unwrap();
    }
    w.finish().unwrap();
}

/// An op parsing field `s` (int64) of an Example.
pub fn parse_s() -> std::sync::Arc<dyn stoker_core::Op> {
    stoker_ops::OpSpec::from_json(&serde_json::json!({
        "op": "parse_example", "features": [{"name": "s", "kind": "fixed", "dtype": "int64"}]
    }))
    .unwrap()
    .build()
    .unwrap()
}

/// Runs `f` on a thread and fails (instead of hanging) if it takes longer than `secs`.
pub fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .expect("the pipeline hung")
}
