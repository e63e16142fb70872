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
    // "other".
    assert!((g.launch - 0.09).abs() < 1e-9, "{g:?}");
    assert!((g.other - 0.11).abs() < 1e-9, "{g:?}");
    assert_eq!(a.h2d.pinned_bytes, 1e6);
    assert!((s.h2d_exposed_ms - 0.1).abs() < 1e-9);
    assert_eq!(a.h2d.gbps.map(|g| (g * 10.0).round()), Some(100.0)); // 1 MB in 100 µs
}
