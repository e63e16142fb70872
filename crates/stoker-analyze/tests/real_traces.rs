//! The analyzer on real traces (`tests/traces/`, copied unchanged from public repositories;
//! see its README). Each expected figure was checked against the trace: event counts and
//! kernels by counting, steps by their ProfilerStep markers, the H2D volume from the batch
//! shape: 32 x 3 x 224 x 224 float32 images + 32 int64 labels = 19,267,840 bytes per step.
#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::path::PathBuf;

use stoker_analyze::analysis::Analysis;
use stoker_analyze::analyze_path;

fn trace(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/traces")
        .join(rel)
}

fn analyze(rel: &str) -> Analysis {
    analyze_path(&trace(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn find(dir: &str, prefix: &str) -> String {
    let d = trace(dir);
    let name = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .find(|n| n.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix}* in {}", d.display()));
    format!("{dir}/{name}")
}

#[test]
fn resnet50_with_no_dataloader_workers_is_input_bound() {
    let a = analyze(&find("pytorch/kineto_tb_samples", "resnet50_num_workers_0"));
    assert_eq!(a.dialect, "kineto");
    assert_eq!(a.steps.len(), 6);
    assert_eq!(a.steps.iter().filter(|s| s.warmup).count(), 1);
    assert_eq!(a.verdict, "highly input-bound");
    assert!(
        (35.0..45.0).contains(&a.input_percent),
        "{}",
        a.input_percent
    );
    // The device idles mostly while the next batch is loaded.
    let g = &a.gaps_ms_per_step;
    assert!(g.input > g.total() - g.input, "{g:?}");
    assert!(
        (a.h2d.bytes_per_step - 19_267_840.0).abs() < 1.0,
        "{}",
        a.h2d.bytes_per_step
    );
    assert!(a.h2d.pageable_bytes > 0.0 && a.h2d.pinned_bytes == 0.0);
    let first = &a.recommendations[0];
    assert!(first.action.contains("DataLoader workers"), "{first:?}");
    assert!(first.evidence.contains("% of each step"));
    // Kernels tied to their launches by correlation id (checked with a Python pass over the
    // JSON): the host runs far ahead of the device, so this is not launch-bound.
    let l = a.launches.as_ref().unwrap();
    assert_eq!(l.matched, 8_772);
    assert_eq!(l.median_queue_us, 9_756.0);
    assert!((l.waited_share - 0.1753).abs() < 1e-3, "{}", l.waited_share);
    assert!(!a
        .recommendations
        .iter()
        .any(|r| r.action.contains("kernel launches")));
    // The longest gaps are the waits for the next batch, and say so with the DataLoader's span.
    let gap = &a.largest_gaps[0];
    assert!(gap.ms > 50.0, "{gap:?}");
    assert_eq!(gap.cause, "waiting for input");
    assert_eq!(gap.host[0].kind, "data loading");
    assert!(
        gap.host[0].name.starts_with("enumerate(DataLoader)"),
        "{gap:?}"
    );
    // On the training loop's thread, as the trace names it (its `thread_name` event).
    assert_eq!(gap.host[0].thread.as_deref(), Some("thread 25738 (python)"));
    assert!(a
        .to_text()
        .contains("(data loading on thread 25738 (python), "));
    assert!(a.largest_gaps.windows(2).all(|w| w[0].ms >= w[1].ms));
}

#[test]
fn resnet50_with_four_workers_is_not_input_bound() {
    let a = analyze(&find("pytorch/kineto_tb_samples", "resnet50_num_workers_4"));
    assert_eq!(a.verdict, "not input-bound");
    assert!(a.input_percent < 2.0, "{}", a.input_percent);
    assert!(a.busy_percent > 70.0, "{}", a.busy_percent);
    assert!(
        !a.recommendations
            .iter()
            .any(|r| r.action.contains("DataLoader workers")),
        "{:?}",
        a.recommendations
    );
    // The same model and batch: the same copies, pageable.
    assert!((a.h2d.bytes_per_step - 19_267_840.0).abs() < 1.0);
    assert!(a
        .recommendations
        .iter()
        .any(|r| r.action.contains("pin_memory=True")));
    // Its gaps are short and not waits for input.
    assert!(a.largest_gaps[0].ms < 20.0, "{:?}", a.largest_gaps[0]);
    assert!(a
        .largest_gaps
        .iter()
        .all(|g| g.cause != "waiting for input"));
}

#[test]
fn every_shared_trace_is_read() {
    // (file prefix, dialect, events, kernels, steps)
    let expected = [
        ("pytorch/hta/cpu_only_rank-34", "kineto", 30, 0, 1),
        (
            "pytorch/hta/legacy_categories_inference_rank_1",
            "kineto",
            54,
            4,
            1,
        ),
        (
            "pytorch/hta/mi250_minitoy_train_ROCm6_2_kineto",
            "kineto",
            220,
            14,
            // ProfilerStep#1 and #2 on the host; #1's device copy is not a step.
            2,
        ),
        (
            "pytorch/hta/ns_resolution_rank-0",
            "kineto",
            68_692,
            4_350,
            5,
        ),
        ("pytorch/hta/triton_example", "kineto", 71, 1, 1),
        (
            "pytorch/kineto_tb_samples/resnet50_num_workers_0",
            "kineto",
            75_718,
            8_772,
            6,
        ),
        (
            "pytorch/kineto_tb_samples/resnet50_num_workers_4",
            "kineto",
            71_424,
            8_868,
            6,
        ),
        (
            "tensorflow/tf1_timeline/cpu_timeline_01",
            "tensorflow-timeline",
            19,
            0,
            1,
        ),
        (
            "tensorflow/tf1_timeline/gpu_timeline_02_step_1",
            "tensorflow-timeline",
            226,
            38,
            1,
        ),
        (
            "tensorflow/xprof/tf_trace_viewer_fixture",
            "chrome-json",
            37,
            0,
            1,
        ),
        ("tensorflow/xspace/tf_custom_loop", "xspace", 1_730, 0, 6),
        ("tensorflow/xspace/tf_keras_fit.", "xspace", 2_126, 0, 6),
        (
            "tensorflow/xspace/tf_keras_fit_batchtrace",
            "xspace",
            2_096,
            0,
            6,
        ),
        ("jax/jax_train.xplane", "xspace", 397, 0, 6),
        (
            "jax/jax_train.perfetto",
            "tensorflow/jax trace viewer",
            404,
            0,
            6,
        ),
    ];
    for (prefix, dialect, events, kernels, steps) in expected {
        let (dir, file) = prefix.rsplit_once('/').unwrap();
        let a = analyze(&find(dir, file));
        assert_eq!(
            (a.dialect.as_str(), a.events, a.kernels, a.steps.len()),
            (dialect, events, kernels, steps),
            "{prefix}"
        );
        assert!(
            a.busy_percent >= 0.0 && a.busy_percent <= 100.0 + 1e-9,
            "{prefix}"
        );
        assert!(a.input_percent >= 0.0, "{prefix}");
        // The idle time by cause adds up to the idle time, step by step.
        for s in &a.steps {
            assert!(
                (s.gaps.total() - s.idle_ms).abs() <= 1e-6 * s.step_ms.max(1.0),
                "{prefix} {}: {:?} vs {}",
                s.name,
                s.gaps,
                s.idle_ms
            );
        }
    }
}

#[test]
fn multi_gpu_idle_time_is_explained() {
    // The ranks of multi-GPU jobs (their traces say their rank): host idle / untraced under a
    // quarter of the idle time, and every cause with its evidence.
    for (prefix, max_untraced) in [
        ("pytorch/hta/ns_resolution_rank-0", 0.0),
        ("pytorch/hta/legacy_categories_inference_rank_1", 0.25),
    ] {
        let (dir, file) = prefix.rsplit_once('/').unwrap();
        let a = analyze(&find(dir, file));
        assert!(a.rank.is_some(), "{prefix}");
        let untraced: f64 = (a.idle_by_cause.iter())
            .filter(|c| c.cause == "untraced")
            .map(|c| c.share_of_idle)
            .sum();
        assert!(untraced <= max_untraced, "{prefix}: {untraced}");
        for c in &a.idle_by_cause {
            assert!(!c.top.is_empty() || c.note.is_some(), "{prefix}: {c:?}");
        }
    }
    // ns_resolution: device-to-device copies on the compute stream's neighbour, and kernels
    // launched long before they start (a GPU-bound job): the rest of the idle time is the
    // device's own (queued), not the host's operators or Python; its collectives are called
    // on the host (its trace holds no NCCL kernel).
    let a = analyze(&find("pytorch/hta", "ns_resolution_rank-0"));
    let cause = |k: &str| a.idle_by_cause.iter().find(|c| c.cause == k);
    let share = |k: &str| cause(k).map_or(0.0, |c| c.share_of_idle);
    let copies = cause("copies").unwrap();
    assert!(copies.top[0].what.starts_with("Memcpy DtoD") && copies.share_of_idle > 0.3);
    let queued = cause("queued").unwrap();
    assert!(queued.share_of_idle > 0.5, "{queued:?}");
    // Each queued gap is credited to the kernel that ended it, once.
    let credited: f64 = queued.top.iter().map(|o| o.ms).sum();
    assert!(credited <= queued.ms_per_step * 1.001, "{queued:?}");
    assert!((cause("communication").unwrap().top.iter()).any(|o| o.what == "c10d::allreduce_"));
    assert!(share("python") + share("host_ops") + share("launch") < 0.05);
    // The legacy trace has no step markers: the window is its activity (1.6 ms), not the
    // profiler's 1 s window, and the device waited for the one long launch.
    let a = analyze(&find("pytorch/hta", "legacy_categories_inference_rank_1"));
    assert!((a.step_ms - 1.64).abs() < 0.01, "{}", a.step_ms);
    assert_eq!(a.idle_by_cause[0].cause, "launch");
    assert!(a.idle_by_cause[0].share_of_idle > 0.8);
}

#[test]
fn tf1_gpu_timeline_busy_idle_and_copies() {
    let a = analyze("tensorflow/tf1_timeline/gpu_timeline_02_step_1.json");
    // One sess.run of a small MLP: the GPU is busy about 60 % of the 1.17 ms.
    assert!((a.step_ms - 1.17).abs() < 0.01, "{}", a.step_ms);
    assert!((50.0..70.0).contains(&a.busy_percent), "{}", a.busy_percent);
    assert!(a.h2d.ms_per_step > 0.0, "MEMCPYHtoD on /gpu:0/memcpy");
    assert!(a.gaps_ms_per_step.h2d > 0.0);
}

#[test]
fn ns_display_unit_keeps_microsecond_timestamps() {
    // `displayTimeUnit: "ns"` while ts/dur stay in µs: steps of ~90 ms, not 90 µs.
    let a = analyze(&find("pytorch/hta", "ns_resolution_rank-0"));
    assert!((80.0..100.0).contains(&a.step_ms), "{}", a.step_ms);
    assert!(a.busy_percent > 90.0);
}

// The XSpace figures below were also computed with TensorFlow's own protobuf classes
// (xplane_pb2): step spans from the events with a `step_num` stat, input from the union of
// events named `*IteratorGetNext*` inside the steps after the first.

#[test]
fn tensorflow_xspace_step_markers_and_input_share() {
    let a = analyze("tensorflow/xspace/tf_custom_loop.xplane.pb");
    assert_eq!(a.steps_from, "step markers (step_num)");
    let names: Vec<&str> = a.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["train#0", "train#1", "train#2", "train#3", "train#4", "train#5"]
    );
    assert!(a.steps[0].warmup);
    assert!((a.step_ms - 0.6937).abs() < 0.001, "{}", a.step_ms);
    assert!(
        (a.input_percent - 10.61).abs() < 0.05,
        "{}",
        a.input_percent
    );
    assert_eq!(a.verdict, "moderately input-bound");

    // Keras 3's batch markers (`Profiled batch`, step_num without `_r`).
    let k = analyze("tensorflow/xspace/tf_keras_fit_batchtrace.xplane.pb");
    assert_eq!(k.steps[1].name, "Profiled batch#1");
    assert!((k.step_ms - 1.0734).abs() < 0.001, "{}", k.step_ms);
    assert!((k.input_percent - 4.58).abs() < 0.05, "{}", k.input_percent);
}

#[test]
fn keras_fit_without_markers_infers_a_step_per_batch() {
    // 6 batches of 8 from tf.data; Keras 3 writes no step markers by itself.
    let a = analyze("tensorflow/xspace/tf_keras_fit.xplane.pb");
    assert!(a.steps_from.contains("inferred"), "{}", a.steps_from);
    assert_eq!(a.steps.len(), 6);
    assert!(a.steps.windows(2).all(|w| w[0].step_ms > 0.0));
    assert!(a.input_percent > 0.0 && a.input_percent < 5.0);
}

#[test]
fn jax_xspace_and_its_json_export_agree() {
    let pb = analyze("jax/jax_train.xplane.pb");
    let json = analyze("jax/jax_train.perfetto_trace.json.gz");
    assert_eq!(pb.steps.len(), 6);
    for (x, y) in pb.steps.iter().zip(&json.steps) {
        assert_eq!(x.name, y.name);
        assert!(
            (x.step_ms - y.step_ms).abs() < 1e-3,
            "{} {}",
            x.step_ms,
            y.step_ms
        );
    }
    assert!((pb.step_ms - 0.0986).abs() < 0.001, "{}", pb.step_ms);
    // A CPU-only run: no device, said so.
    assert!(pb.devices.is_empty());
    assert!(pb.to_text().contains("no accelerator activity"));
}

#[test]
fn ranks_from_distributed_info() {
    let ranked: Vec<Analysis> = [
        "cpu_only_rank-34",
        "legacy_categories_inference_rank_1",
        "ns_resolution_rank-0",
    ]
    .iter()
    .map(|p| analyze(&find("pytorch/hta", p)))
    .collect();
    let ranks: Vec<Option<i64>> = ranked.iter().map(|a| a.rank).collect();
    assert_eq!(ranks, [Some(34), Some(1), Some(0)]);
    let text = stoker_analyze::analysis::compare_ranks(&ranked).unwrap();
    let slowest = ranked
        .iter()
        .max_by(|x, y| x.step_ms.total_cmp(&y.step_ms))
        .unwrap();
    assert!(
        text.contains(&format!("slowest: rank {} at", slowest.rank.unwrap())),
        "{text}"
    );
    assert!(stoker_analyze::analysis::compare_ranks(&ranked[..1]).is_none());
}

/// A recent Kineto trace (PyTorch 2.11, H200) repeats each `ProfilerStep#N` annotation on the
/// device timeline (`gpu_user_annotation`, the span of the step's kernels): a step is counted
/// once, from its host-side annotation, so the step time is the host's (~18 ms here, checked
/// against the `user_annotation` spans in the JSON), not half of it.
#[test]
fn device_copies_of_step_annotations_are_not_steps() {
    let a = analyze("pytorch/memory/torch_memory_cuda_w0.pt.trace.json.gz");
    assert_eq!(a.steps.len(), 6);
    assert_eq!(a.steps.iter().filter(|s| s.warmup).count(), 1);
    assert!((13.0..20.0).contains(&a.step_ms), "{}", a.step_ms);
    assert_eq!(a.verdict, "highly input-bound");
}

/// A TensorFlow 1.x timeline of eight `session.run` calls, each fed by Python that sleeps 30 ms
/// making the batch (`tests/traces/make/make_tf1_timeline.py`): a step per run, the host time
/// between runs counted as input, judged input-bound, with the feed_dict advice.
#[test]
fn tf1_session_runs_fed_from_python_are_input_bound() {
    let a = analyze("tensorflow/tf1_timeline/tf1_feed_dict_runs.json");
    assert_eq!(a.dialect, "tensorflow-timeline");
    assert!(a.steps_from.starts_with("session.run"), "{}", a.steps_from);
    assert_eq!(a.steps.len(), 8);
    assert_eq!(a.verdict, "highly input-bound");
    assert!(a.input_percent > 80.0, "{}", a.input_percent);
    // Each run but the last is followed by the next feed's 30 ms.
    for s in &a.steps[1..7] {
        assert!(s.input_ms >= 29.0 && s.input_ms <= s.step_ms, "{s:?}");
    }
    assert!(a.recommendations[0].action.contains("off feed_dict"));
    // A single run is one step, as before.
    let one = analyze("tensorflow/tf1_timeline/cpu_timeline_01.json");
    assert_eq!(one.steps.len(), 1);
}

/// xprof's derived `Steps` line on the device plane (see tests/traces/make/xprof_steps_line.py):
/// in xprof's trace viewer JSON (the streaming viewer's processes named after the host,
/// `<host> /device:GPU:0`) and in
/// an XSpace whose host markers carry no `step_num`, the steps are that line's events, as xprof
/// reads them, and match the steps of the original XSpace.
#[test]
fn device_steps_line_gives_the_steps() {
    let original = analyze("jax/jax_gpu_train.xplane.pb");
    for rel in [
        "jax/jax_gpu_train.xprof_trace_viewer.json.gz",
        "jax/jax_gpu_train.xprof_trace_viewer_streaming.json.gz",
        "jax/jax_gpu_train_steps_line.xplane.pb",
    ] {
        let a = analyze(rel);
        assert!(
            a.steps_from.contains("Steps line"),
            "{rel}: {}",
            a.steps_from
        );
        assert_eq!(a.kernels, 78, "{rel}");
        assert_eq!(a.devices, vec![0], "{rel}");
        let names: Vec<&str> = a.steps.iter().map(|s| s.name.as_str()).collect();
        let want: Vec<String> = (0..6).map(|i| format!("train {i}")).collect();
        assert_eq!(names, want, "{rel}");
        // The line's events in xprof's trace viewer: 15.776 µs, then 15.04 µs.
        assert!(
            (a.steps[0].step_ms - 0.015776).abs() < 1e-6,
            "{rel}: {}",
            a.steps[0].step_ms
        );
        assert!(
            (a.steps[1].step_ms - 0.01504).abs() < 1e-6,
            "{rel}: {}",
            a.steps[1].step_ms
        );
        assert!((a.step_ms - original.step_ms).abs() < 1e-6, "{rel}");
        assert!(
            (a.busy_percent - original.busy_percent).abs() < 0.01,
            "{rel}"
        );
    }
}
