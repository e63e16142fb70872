//! Malformed, truncated and hostile traces give a clear error naming the file, never a crash;
//! small synthetic traces pin down the edge cases of the dialects.
#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

mod common;

use std::io::Write;

use stoker_analyze::{analyze_path, AnalyzeError};

fn write(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn parse_error(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "bad.json", bytes);
    match analyze_path(&p) {
        Err(e @ AnalyzeError::Parse { .. }) => {
            let s = e.to_string();
            assert!(s.contains("bad.json"), "{s}");
            s
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[test]
fn malformed_input_is_a_located_error() {
    assert!(parse_error(b"{\"traceEvents\": [{\"ph\": \"X\", \"ts\": 1,").contains("line 1"));
    assert!(parse_error(b"{\"other\": 1}").contains("no \"traceEvents\""));
    assert!(parse_error(b"").contains("line"));
    // Deep nesting stops at the parser's depth limit instead of overflowing the stack.
    let deep = format!(
        "{{\"traceEvents\": [{{\"args\": {}}}]}}",
        "[".repeat(100_000)
    );
    parse_error(deep.as_bytes());
    // Invalid UTF-8 inside a string.
    parse_error(b"{\"traceEvents\": [{\"name\": \"\xff\xfe\"}]}");
    // A number too large for any float.
    parse_error(b"{\"traceEvents\": [{\"ph\": \"X\", \"ts\": 1e999, \"dur\": 1}]}");
}

#[test]
fn truncated_gzip_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(br#"{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 2}]}"#)
        .unwrap();
    let bytes = gz.finish().unwrap();
    let p = write(&dir, "t.json.gz", &bytes[..bytes.len() / 2]);
    let e = analyze_path(&p).unwrap_err().to_string();
    assert!(e.contains("t.json.gz"), "{e}");
    let ok = write(&dir, "ok.json.gz", &bytes);
    assert_eq!(analyze_path(&ok).unwrap().events, 1);
}

#[test]
fn damaged_copies_of_a_real_trace_never_panic() {
    // A small fuzz: cut and corrupt a real trace in many places; each run must end in a result
    // or an error, never a panic.
    let real = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/traces/tensorflow/tf1_timeline/gpu_timeline_02_step_1.json"),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut next = common::xorshift(0x2545_f491_4f6c_dd1du64);
    for i in 0..300 {
        let mut b = real.clone();
        match i % 3 {
            0 => b.truncate((next() as usize) % b.len()),
            1 => {
                for _ in 0..8 {
                    let at = (next() as usize) % b.len();
                    b[at] = (next() & 0xff) as u8;
                }
            }
            _ => {
                let at = (next() as usize) % b.len();
                b.splice(at..at, b"[{\"ph\":\"B\",\"ts\":-1e308}".iter().copied());
            }
        }
        let p = write(&dir, "f.json", &b);
        let _ = analyze_path(&p);
    }
}

#[test]
fn bare_array_string_ids_begin_end_pairs_and_causes() {
    // One step of 1000 µs: loading the batch 0-300, a copy 300-400, kernels 400-700 and
    // 800-900 (stream "7" as a string), a gap 700-800 with a launch 700-790, idle after 900.
    let trace = br#"[
      {"ph": "M", "name": "process_name", "pid": "GPU 0", "args": {"name": "GPU 0"}},
      {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": "host", "tid": 1, "ts": 0, "dur": 1000},
      {"ph": "B", "cat": "user_annotation", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "pid": "host", "tid": 1, "ts": 0},
      {"ph": "E", "pid": "host", "tid": 1, "ts": 300},
      {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": "GPU 0", "tid": "stream 9", "ts": 300, "dur": 100, "args": {"bytes": 1000000, "device": 0, "stream": 9}},
      {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": "GPU 0", "tid": "stream 7", "ts": "400", "dur": 300, "args": {"device": 0, "stream": "7"}},
      {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": "host", "tid": 1, "ts": 700, "dur": 90},
      {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": "GPU 0", "tid": "stream 7", "ts": 800, "dur": 100, "args": {"device": 0, "stream": 7}}
    ]"#;
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "t.json", trace);
    let a = analyze_path(&p).unwrap();
    assert_eq!(a.steps.len(), 1);
    let s = &a.steps[0];
    assert!((s.step_ms - 1.0).abs() < 1e-9);
    assert!((s.busy_ms - 0.4).abs() < 1e-9, "{}", s.busy_ms);
    assert!((s.input_ms - 0.3).abs() < 1e-9);
    assert!((a.input_percent - 30.0).abs() < 1e-6);
    assert_eq!(a.verdict, "highly input-bound");
    let g = &s.gaps;
    assert!((g.input - 0.3).abs() < 1e-9, "{g:?}");
    assert!((g.h2d - 0.1).abs() < 1e-9, "{g:?}");
    // The launch covers 90 of the 100 µs gap; the rest and the tail after the last kernel are
    // inside the step with no traced op: the training loop's Python.
    assert!((g.launch - 0.09).abs() < 1e-9, "{g:?}");
    assert!((g.python - 0.11).abs() < 1e-9, "{g:?}");
    assert!((g.total() - (s.step_ms - s.busy_ms)).abs() < 1e-9, "{g:?}");
    assert_eq!(a.h2d.pinned_bytes, 1e6);
    assert!((s.h2d_exposed_ms - 0.1).abs() < 1e-9);
    assert_eq!(a.h2d.gbps.map(|g| (g * 10.0).round()), Some(100.0)); // 1 MB in 100 µs
}

#[test]
fn idle_causes_collectives_copies_python_and_untraced() {
    // A step of 1000 µs on the host, then 200 µs after it with nothing recorded on the host.
    // Compute stream 7: kernels 0-100 and 900-1000 and 1150-1200. Meanwhile: an NCCL all-reduce
    // on stream 20 at 100-300 (exposed communication), a device-to-host copy 300-400, a
    // blocking sync 400-450, a launch 450-500, an operator 500-700 (with a launch inside it,
    // 650-700), the Python tracer's `train_step` 700-850; 850-900 nothing but the step; after the
    // step (1000-1150) nothing: untraced.
    let trace = br#"{"traceEvents": [
      {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
      {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": 7, "ts": 0, "dur": 100, "args": {"device": 0, "stream": 7}},
      {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 20, "ts": 100, "dur": 200, "args": {"device": 0, "stream": 20}},
      {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0, "tid": 9, "ts": 300, "dur": 100, "args": {"device": 0, "stream": 9}},
      {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1, "ts": 300, "dur": 150},
      {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 450, "dur": 50},
      {"ph": "X", "cat": "cpu_op", "name": "aten::index_put_", "pid": 1, "tid": 1, "ts": 500, "dur": 200},
      {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 650, "dur": 50},
      {"ph": "X", "cat": "python_function", "name": "train.py(12): train_step", "pid": 1, "tid": 1, "ts": 700, "dur": 150},
      {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": 7, "ts": 900, "dur": 100, "args": {"device": 0, "stream": 7}},
      {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": 7, "ts": 1150, "dur": 50, "args": {"device": 0, "stream": 7}}
    ]}"#;
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "t.json", trace);
    let a = analyze_path(&p).unwrap();
    let g = &a.steps[0].gaps;
    let near = |x: f64, want: f64| (x - want).abs() < 1e-9;
    assert!(near(g.communication, 0.2), "{g:?}");
    assert!(near(g.copies, 0.1), "{g:?}");
    assert!(near(g.sync, 0.05), "{g:?}");
    assert!(near(g.launch, 0.1), "{g:?}");
    assert!(near(g.host_ops, 0.15), "{g:?}");
    assert!(near(g.python, 0.2), "{g:?}");
    assert!(near(g.untraced, 0.0), "{g:?}");
    assert!(near(g.total(), a.steps[0].idle_ms), "{g:?}");
    // The collective's kernel is communication, not compute.
    assert!(near(a.steps[0].busy_ms, 0.2), "{}", a.steps[0].busy_ms);
    // Each cause with its evidence: the collective named with its device and stream, the
    // Python function by name.
    let cause = |k: &str| a.idle_by_cause.iter().find(|c| c.cause == k).unwrap();
    let comm = cause("communication");
    assert_eq!(
        comm.top[0].what,
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL (device 0, stream 20)"
    );
    assert!(near(comm.top[0].ms, 0.2));
    assert_eq!(cause("python").top[0].what, "train.py(12): train_step");
    assert!(near(cause("python").top[0].ms, 0.15));
    assert_eq!(cause("host_ops").top[0].what, "aten::index_put_");
    let shares: f64 = a.idle_by_cause.iter().map(|c| c.share_of_idle).sum();
    assert!((shares - 1.0).abs() < 1e-9);
    let text = a.to_text();
    assert!(text.contains("communication (collectives)"), "{text}");

    // Without step markers, the stretch with nothing on the host is untraced; the window runs
    // from the first activity to the last.
    let unstepped = String::from_utf8_lossy(trace).replace("ProfilerStep#1", "forward");
    let p = write(&dir, "u.json", unstepped.as_bytes());
    let a = analyze_path(&p).unwrap();
    let g = &a.gaps_ms_per_step;
    assert!(near(a.step_ms, 1.2), "{}", a.step_ms);
    // 850-900 and 1000-1150: nothing on the host ("forward" is a user annotation, not an op).
    assert!(near(g.untraced, 0.2), "{g:?}");
    assert!(near(g.python, 0.15), "{g:?}");
}

#[test]
fn absurd_values_are_left_out_with_a_warning() {
    // Three steps of 1000 µs with a 300 µs kernel each, and one event with a value no
    // profiler writes: the analysis is that of the trace without it, and says so.
    let mut events = vec![
        r#"{"ph": "M", "name": "process_name", "pid": "GPU 0", "args": {"name": "GPU 0"}}"#
            .to_string(),
    ];
    for k in 0..3 {
        let t = k * 1000;
        events.push(format!(
            r#"{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{k}", "pid": "host", "tid": 1, "ts": {t}, "dur": 1000}}"#
        ));
        events.push(format!(
            r#"{{"ph": "X", "cat": "kernel", "name": "sgemm", "pid": "GPU 0", "tid": "stream 7", "ts": {}, "dur": 300, "args": {{"device": 0, "stream": 7}}}}"#,
            t + 400
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = |extra: &str| {
        let mut all = events.clone();
        if !extra.is_empty() {
            all.push(extra.to_string());
        }
        format!("[{}]", all.join(",\n"))
    };
    let clean = analyze_path(&write(&dir, "clean.json", trace("").as_bytes())).unwrap();
    assert!(clean.warnings.is_empty());
    let kernel = r#"{"ph": "X", "cat": "kernel", "name": "evil", "pid": "GPU 0", "tid": "stream 7", "ts": TS, "dur": DUR, "args": {"device": 0, "stream": 7}}"#;
    let copy = r#"{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": "GPU 0", "tid": "stream 9", "ts": 1100, "dur": 10, "args": {"device": 0, "stream": 9, "bytes": BYTES}}"#;
    let memory = r#"{"ph": "i", "name": "[memory]", "pid": "host", "tid": 1, "ts": 1100, "args": {"Device Type": 1, "Device Id": 0, "Bytes": 10, "Total Allocated": 1e300, "Total Reserved": 10}}"#;
    for (extra, why) in [
        (
            kernel.replace("TS", "1500").replace("DUR", "1e308"),
            "a duration over a day",
        ),
        (
            kernel.replace("TS", "1e308").replace("DUR", "10"),
            "a time beyond any clock's",
        ),
        (
            kernel.replace("TS", "-1e300").replace("DUR", "10"),
            "a time beyond any clock's",
        ),
        (copy.replace("BYTES", "1e308"), "over a petabyte"),
        (copy.replace("BYTES", "-5"), "negative"),
        (memory.to_string(), "allocator events left out"),
        (
            memory.replace("1e300", "10").replace("1100", "1e300"),
            "allocator events left out (a time",
        ),
    ] {
        let a = analyze_path(&write(&dir, "t.json", trace(&extra).as_bytes())).unwrap();
        assert_eq!(a.warnings.len(), 1, "{extra}: {:?}", a.warnings);
        assert!(
            a.warnings[0].contains(why) && a.warnings[0].contains(": 1 (the first: "),
            "{:?}",
            a.warnings
        );
        assert!(a.to_text().contains(&format!("warning: {}", a.warnings[0])));
        // The result is the clean trace's: the same steps, step time and idle share, and no
        // number from the absurd value anywhere in the report.
        assert_eq!(a.steps.len(), clean.steps.len(), "{extra}");
        assert!(
            (a.step_ms - clean.step_ms).abs() < 1e-9,
            "{extra}: {}",
            a.step_ms
        );
        assert!(
            (a.idle_percent - clean.idle_percent).abs() < 1e-9,
            "{extra}"
        );
        assert!(a.top_kernels.iter().all(|k| k.total_ms < 10.0), "{extra}");
        fn largest(v: &serde_json::Value) -> f64 {
            match v {
                serde_json::Value::Number(n) => n.as_f64().map_or(f64::INFINITY, f64::abs),
                serde_json::Value::Array(a) => a.iter().map(largest).fold(0.0, f64::max),
                serde_json::Value::Object(o) => o.values().map(largest).fold(0.0, f64::max),
                _ => 0.0,
            }
        }
        let json = serde_json::to_value(&a).unwrap();
        assert!(largest(&json) < 1e6, "{extra}: {json}");
    }
}
