//! Device planes of xprof's model, in XSpace and in the trace viewer's JSON. The real traces
//! here are CPU only (tests/traces/README.md), so these small synthetic files cover the device
//! side: GPU streams `Stream #N(...)`, copies with `memcpy_details`, and derived lines
//! (`XLA Ops`, `Steps`, …) that repeat the streams and must not be counted twice.
#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

mod common;

use stoker_analyze::analysis::Analysis;
use stoker_analyze::analyze_path;

/// Protobuf wire encoding, just enough to write an XSpace.
fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}
fn int_field(out: &mut Vec<u8>, tag: u32, v: i64) {
    varint(out, u64::from(tag) << 3);
    varint(out, v as u64);
}
fn len_field(out: &mut Vec<u8>, tag: u32, body: &[u8]) {
    varint(out, (u64::from(tag) << 3) | 2);
    varint(out, body.len() as u64);
    out.extend_from_slice(body);
}

/// An event: metadata id, offset and duration in µs, stats (metadata id, int or string).
struct Ev(i64, i64, i64, Vec<(i64, Result<i64, &'static str>)>);

fn line(name: &str, events: &[Ev]) -> Vec<u8> {
    let mut l = Vec::new();
    len_field(&mut l, 2, name.as_bytes());
    int_field(&mut l, 3, 1_000); // timestamp_ns: 1 µs
    for Ev(meta, offset_us, dur_us, stats) in events {
        let mut e = Vec::new();
        int_field(&mut e, 1, *meta);
        int_field(&mut e, 2, offset_us * 1_000_000);
        int_field(&mut e, 3, dur_us * 1_000_000);
        for (id, v) in stats {
            let mut s = Vec::new();
            int_field(&mut s, 1, *id);
            match v {
                Ok(n) => int_field(&mut s, 4, *n),
                Err(text) => len_field(&mut s, 5, text.as_bytes()),
            }
            len_field(&mut e, 4, &s);
        }
        len_field(&mut l, 4, &e);
    }
    l
}

fn plane(name: &str, lines: &[Vec<u8>], events: &[(i64, &str)], stats: &[(i64, &str)]) -> Vec<u8> {
    let mut p = Vec::new();
    len_field(&mut p, 2, name.as_bytes());
    for l in lines {
        len_field(&mut p, 3, l);
    }
    for (tag, table) in [(4, events), (5, stats)] {
        for (id, n) in table {
            let mut m = Vec::new();
            int_field(&mut m, 1, *id);
            len_field(&mut m, 2, n.as_bytes());
            let mut entry = Vec::new();
            int_field(&mut entry, 1, *id);
            len_field(&mut entry, 2, &m);
            len_field(&mut p, tag, &entry);
        }
    }
    p
}

fn analyze_bytes(name: &str, bytes: &[u8]) -> Analysis {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    analyze_path(&p).unwrap()
}

/// Three steps of 100 µs; each starts with a 30 µs copy (pageable, 4 KB), then a 50 µs kernel;
/// the host fetches the batch in the first 20 µs.
fn gpu_xspace() -> Vec<u8> {
    let details = "kind_src:pageable kind_dst:device size:4096 dest:0 async:0";
    let (mut kernels, mut copies, mut derived, mut host) = (vec![], vec![], vec![], vec![]);
    for step in 0..3 {
        let t = step * 100;
        copies.push(Ev(2, t, 30, vec![(1, Err(details))]));
        kernels.push(Ev(1, t + 30, 50, vec![]));
        derived.push(Ev(1, t + 30, 50, vec![]));
        host.push(Ev(3, t, 100, vec![(2, Ok(step))]));
        host.push(Ev(4, t, 20, vec![]));
    }
    let gpu = plane(
        "/device:GPU:0",
        &[
            line("Stream #7(Compute)", &kernels),
            line("Stream #8(MemcpyH2D)", &copies),
            line("XLA Ops", &derived),
        ],
        &[(1, "fusion_1"), (2, "MemcpyH2D")],
        &[(1, "memcpy_details")],
    );
    let cpu = plane(
        "/host:CPU",
        &[line("python", &host)],
        &[(3, "train"), (4, "IteratorGetNextOp::DoCompute")],
        &[(2, "step_num")],
    );
    let mut space = Vec::new();
    len_field(&mut space, 1, &gpu);
    len_field(&mut space, 1, &cpu);
    space
}

fn check_gpu(a: &Analysis) {
    assert_eq!(a.devices, [0]);
    assert_eq!(
        a.kernels, 3,
        "the XLA Ops line repeats the stream's kernels"
    );
    assert_eq!(a.steps.len(), 3);
    assert_eq!(a.steps[1].name, "train#1");
    // Steps 2 and 3 (the first is warm-up): 100 µs each, kernels 50.
    assert!((a.step_ms - 0.1).abs() < 1e-9, "{}", a.step_ms);
    assert!((a.busy_percent - 50.0).abs() < 1e-6, "{}", a.busy_percent);
    assert!((a.input_percent - 20.0).abs() < 1e-6, "{}", a.input_percent);
    assert!((a.h2d.bytes_per_step - 4096.0).abs() < 1e-9);
    assert!(a.h2d.pageable_bytes == 3.0 * 4096.0 && a.h2d.pinned_bytes == 0.0);
    // Idle: 20 µs input, then 10 µs of copy, then 20 µs after the kernel (nothing on the host
    // but the step marker): the training loop's Python.
    let g = &a.gaps_ms_per_step;
    assert!((g.input - 0.02).abs() < 1e-9, "{g:?}");
    assert!((g.h2d - 0.01).abs() < 1e-9, "{g:?}");
    assert!((g.python - 0.02).abs() < 1e-9, "{g:?}");
}

#[test]
fn gpu_streams_copies_and_steps_in_xspace() {
    let a = analyze_bytes("gpu.xplane.pb", &gpu_xspace());
    assert_eq!(a.dialect, "xspace");
    check_gpu(&a);
}

#[test]
fn gpu_streams_copies_and_steps_in_trace_viewer_json() {
    // The same run as the trace viewer exports it: planes as processes, lines as threads.
    let mut ev = vec![
        r#"{"ph":"M","pid":1,"name":"process_name","args":{"name":"/device:GPU:0"}}"#.to_string(),
        r#"{"ph":"M","pid":1,"tid":7,"name":"thread_name","args":{"name":"Stream #7(Compute)"}}"#
            .into(),
        r#"{"ph":"M","pid":1,"tid":8,"name":"thread_name","args":{"name":"Stream #8(MemcpyH2D)"}}"#
            .into(),
        r#"{"ph":"M","pid":1,"tid":9,"name":"thread_name","args":{"name":"XLA Ops"}}"#.into(),
        r#"{"ph":"M","pid":2,"name":"process_name","args":{"name":"/host:CPU"}}"#.into(),
    ];
    for step in 0..3 {
        let t = 1 + step * 100;
        ev.push(format!(
            r#"{{"ph":"X","pid":1,"tid":8,"ts":{t},"dur":30,"name":"MemcpyH2D","args":{{"memcpy_details":"kind_src:pageable kind_dst:device size:4096 dest:0 async:0"}}}}"#
        ));
        for tid in [7, 9] {
            ev.push(format!(
                r#"{{"ph":"X","pid":1,"tid":{tid},"ts":{},"dur":50,"name":"fusion_1"}}"#,
                t + 30
            ));
        }
        ev.push(format!(
            r#"{{"ph":"X","pid":2,"tid":1,"ts":{t},"dur":100,"name":"train","args":{{"step_num":"{step}"}}}}"#
        ));
        ev.push(format!(
            r#"{{"ph":"X","pid":2,"tid":1,"ts":{t},"dur":20,"name":"IteratorGetNextOp::DoCompute"}}"#
        ));
    }
    // An event without a time is left out and counted, not lost silently.
    ev.push(r#"{"ph":"X","pid":2,"tid":1,"dur":5,"name":"no time"}"#.into());
    let json = format!(
        r#"{{"displayTimeUnit":"ns","traceEvents":[{},{{}}]}}"#,
        ev.join(",")
    );
    let a = analyze_bytes("gpu.trace.json", json.as_bytes());
    assert_eq!(a.dialect, "tensorflow/jax trace viewer");
    assert_eq!(a.skipped_events, 1);
    assert!(a.to_text().contains("1 events left out"));
    check_gpu(&a);
}

#[test]
fn damaged_xspace_is_a_located_error_never_a_panic() {
    let real = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/traces/tensorflow/xspace/tf_custom_loop.xplane.pb"),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.xplane.pb");
    // A plane claiming 2^40 bytes: refused before any allocation.
    let mut huge = Vec::new();
    varint(&mut huge, (1 << 3) | 2);
    varint(&mut huge, 1 << 40);
    huge.extend_from_slice(&real[..100]);
    std::fs::write(&p, &huge).unwrap();
    let e = analyze_path(&p).unwrap_err().to_string();
    assert!(
        e.contains("bad.xplane.pb") && e.contains("at byte 0") && e.contains("runs past the end"),
        "{e}"
    );
    // Cut and corrupted copies: a result or an error, never a panic.
    let mut next = common::xorshift(0x9e37_79b9_7f4a_7c15u64);
    let mut errors = 0;
    for i in 0..300 {
        let mut b = real.clone();
        if i % 2 == 0 {
            b.truncate((next() as usize) % b.len());
        } else {
            for _ in 0..8 {
                let at = (next() as usize) % b.len();
                b[at] = (next() & 0xff) as u8;
            }
        }
        std::fs::write(&p, &b).unwrap();
        if let Err(e) = analyze_path(&p) {
            assert!(
                e.to_string()
                    .contains("bad.xplane.pb: not a readable XSpace"),
                "{e}"
            );
            errors += 1;
        }
    }
    assert!(errors > 100, "damage must be noticed ({errors} of 300)");
    // Names that are not UTF-8 are read, replaced.
    let mut space = Vec::new();
    let bad_name = plane(
        "/host:CPU",
        &[line("python", &[Ev(1, 0, 5, vec![])])],
        &[(1, "x")],
        &[],
    );
    let bad_name: Vec<u8> = {
        let mut b = bad_name.clone();
        let at = b.windows(1).rposition(|w| w == b"x").unwrap();
        b[at] = 0xff;
        b
    };
    len_field(&mut space, 1, &bad_name);
    std::fs::write(&p, &space).unwrap();
    assert_eq!(analyze_path(&p).unwrap().events, 1);
}
