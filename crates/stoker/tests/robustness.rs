//! Bad input gives located errors or counted skips; early stops and panics never hang.
#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

mod common;

use common::*;
use stoker::datasets::{options::WithOptions, skip::Skip};
use stoker::{Pipeline, Plan};
use stoker_core::{Error, ErrorPolicy, PipelineOptions};
use stoker_formats::{Compression, RecordWriter};

/// Runs the pipeline to its end; an error it raises must name the stage it came from, and is
/// returned as the error itself.
fn run_all(plan: &Plan) -> stoker_core::Result<Vec<i64>> {
    collect(&plan.map(
        vec![stoker_ops::OpSpec::from_json(
                &serde_json::json!({"op": "select", "fields": ["s"]}),
            )
            .unwrap()
            .build()
            .unwrap()],
        None,
        Some(true),
    )?)
    .map_err(|e| {
        assert!(e.stage().is_some(), "no stage: {e:?}");
        e.into_kind()
    })
}

fn file_with(dir: &std::path::Path, name: &str, ids: std::ops::Range<i64>) -> String {
    let p = dir.join(name);
    write_examples(&p, ids, Compression::None);
    p.to_string_lossy().into_owned()
}

#[test]
fn bad_crc_names_file_record_and_offset_or_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = file_with(dir.path(), "x.tfrecord", 0..5);
    let mut bytes = std::fs::read(&path).unwrap();
    let per = bytes.len() / 5; // every record has the same size
    bytes[2 * per + 14] ^= 0x40; // inside record 2's data
    std::fs::write(&path, &bytes).unwrap();

    let plan = Plan::tfrecord(vec![path.clone()], Compression::None, true, 1)
        .unwrap()
        .map(vec![parse_s()], None, Some(true))
        .unwrap();
    match run_all(&plan) {
        Err(Error::CorruptRecord {
            file,
            record,
            offset,
            reason,
        }) => {
            assert_eq!(
                (file.as_str(), record, offset),
                (path.as_str(), 2, (2 * per) as u64)
            );
            assert!(reason.contains("data CRC"));
        }
        other => panic!("{other:?}"),
    }
    // Skip policy: the record is skipped and counted.
    let skip = Plan::new(WithOptions {
        input: plan.clone(),
        options: PipelineOptions {
            on_bad_record: ErrorPolicy::Skip,
            ..Default::default()
        },
    })
    .unwrap();
    let p = Pipeline::new(&skip).unwrap();
    let mut it = p.iter().unwrap();
    let mut got: Vec<i64> = Vec::new();
    while let Some(e) = it.next().unwrap() {
        got.extend(e.get("s").unwrap().typed::<i64>().unwrap().iter().copied());
    }
    assert_eq!(got, vec![0, 1, 3, 4]);
    assert_eq!(p.registry().skipped(), 1);
}

#[test]
fn truncated_file_and_bad_length() {
    let dir = tempfile::tempdir().unwrap();
    let path = file_with(dir.path(), "t.tfrecord", 0..4);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 7]).unwrap();
    let plan = Plan::tfrecord(vec![path.clone()], Compression::None, true, 1)
        .unwrap()
        .map(vec![parse_s()], None, Some(true))
        .unwrap();
    match run_all(&plan) {
        Err(Error::CorruptRecord { record, reason, .. }) => {
            assert_eq!(record, 3);
            assert!(reason.contains("truncated"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let per = bytes.len() / 4;
    let mut bad_len = bytes.clone();
    bad_len[per + 3] ^= 0x01; // record 1's length field
    std::fs::write(&path, &bad_len).unwrap();
    match run_all(&plan) {
        Err(Error::CorruptRecord {
            record,
            offset,
            reason,
            ..
        }) => {
            assert_eq!((record, offset), (1, per as u64));
            assert!(reason.contains("length CRC"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_protobuf_and_wrong_feature_type_are_located() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.tfrecord");
    let mut w = RecordWriter::create(&path, Compression::None).unwrap();
    let good = stoker_formats::example::Example::with_features([(
        "s".to_string(),
        stoker_formats::example::Feature::int64s(vec![7]),
    )])
    .serialize();
    let wrong = stoker_formats::example::Example::with_features([(
        "s".to_string(),
        stoker_formats::example::Feature::floats(vec![7.0]),
    )])
    .serialize();
    w.write(&good).unwrap();
    w.write(b"\x0a\xff\xff\xff\xff\x0f").unwrap(); // a length-delimited field longer than the record
    w.write(&wrong).unwrap();
    w.finish().unwrap();
    let path = path.to_string_lossy().into_owned();
    let second_offset = (12 + good.len() + 4) as u64;

    let plan = Plan::tfrecord(vec![path.clone()], Compression::None, true, 1)
        .unwrap()
        .map(vec![parse_s()], None, Some(true))
        .unwrap();
    // The error names the stage it came from: the map that parses, not the reader or the
    // stages after it.
    let err = collect(&plan).unwrap_err();
    let stage = err.stage().unwrap_or_default();
    assert!(stage.starts_with("map"), "{stage}");
    assert!(stage.contains("parse_example"), "{stage}");
    match run_all(&plan) {
        Err(Error::InvalidRecord(p)) => {
            assert_eq!(
                (p.file.as_deref(), p.record, p.offset),
                (Some(path.as_str()), Some(1), Some(second_offset))
            );
            assert!(
                p.reason.contains("not a valid tf.train.Example"),
                "{}",
                p.reason
            );
        }
        other => panic!("{other:?}"),
    }
    // After a shuffle and inside a batch, the location is still the record's.
    let batched = Plan::tfrecord(vec![path.clone()], Compression::None, true, 1)
        .unwrap()
        .shuffle(3, Some(0), true)
        .unwrap()
        .batch(3, false)
        .unwrap()
        .map(vec![parse_s()], Some(2), Some(true))
        .unwrap();
    match run_all(&batched) {
        Err(Error::InvalidRecord(p)) => {
            assert!(p.record == Some(1) || p.record == Some(2), "{:?}", p.record);
            assert!(
                p.reason.contains("Example") || p.reason.contains("float_list"),
                "{}",
                p.reason
            );
        }
        other => panic!("{other:?}"),
    }
    // The wrong type alone.
    let skip_bad = Plan::new(Skip {
        input: Plan::tfrecord(vec![path.clone()], Compression::None, true, 1).unwrap(),
        count: 2,
    })
    .unwrap()
    .map(vec![parse_s()], None, Some(true))
    .unwrap();
    let err = run_all(&skip_bad).unwrap_err().to_string();
    assert!(
        err.contains("record 2") && err.contains("float_list, expected a int64_list"),
        "{err}"
    );
    // Skip policy: both bad records are dropped and counted.
    let skip = Plan::new(WithOptions {
        input: plan,
        options: PipelineOptions {
            on_bad_record: ErrorPolicy::Skip,
            ..Default::default()
        },
    })
    .unwrap();
    let p = Pipeline::new(&skip).unwrap();
    let mut it = p.iter().unwrap();
    let mut n = 0;
    while it.next().unwrap().is_some() {
        n += 1;
    }
    assert_eq!((n, p.registry().skipped()), (1, 2));
}

#[test]
fn missing_file_is_an_io_error_with_the_path() {
    let err = Plan::tfrecord(
        vec!["/no/such/file.tfrecord".into()],
        Compression::None,
        true,
        1,
    )
    .err()
    .unwrap();
    assert!(
        matches!(&err, Error::Io { path, source } if path == "/no/such/file.tfrecord" && source.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
    let err = Plan::tfrecord(
        vec!["/no/such/*.tfrecord".into()],
        Compression::None,
        true,
        1,
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("no files match"), "{err}");
}

#[test]
fn early_stop_mid_epoch_does_not_hang() {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<String> = (0..4)
        .map(|f| {
            file_with(
                dir.path(),
                &format!("f{f}.tfrecord"),
                f * 1000..(f + 1) * 1000,
            )
        })
        .collect();
    within(30, move || {
        for _ in 0..20 {
            let plan = Plan::tfrecord(files.clone(), Compression::None, true, 4)
                .unwrap()
                .shuffle(100, Some(1), true)
                .unwrap()
                .batch(16, false)
                .unwrap()
                .map(vec![parse_s()], Some(2), Some(true))
                .unwrap()
                .prefetch(4)
                .unwrap();
            let p = Pipeline::new(&plan).unwrap();
            let mut driver = p.start().unwrap();
            use stoker_core::exec::ElementIter;
            driver.next().unwrap().unwrap();
            drop(driver); // stop with every stage busy and every buffer full
        }
    });
}

#[test]
fn a_workers_share_moves_under_the_skip_policy_and_counts_its_own_skips_apart() {
    use stoker::datasets::shard::Shard;
    use stoker_core::exec::ElementIter;
    let dir = tempfile::tempdir().unwrap();
    let path = file_with(dir.path(), "x.tfrecord", 0..9);
    let mut bytes = std::fs::read(&path).unwrap();
    let per = bytes.len() / 9;
    bytes[4 * per + 14] ^= 0x40; // inside record 4's data
    std::fs::write(&path, &bytes).unwrap();
    let parsed = Plan::tfrecord(vec![path], Compression::None, true, 1)
        .unwrap()
        .map(vec![parse_s()], None, Some(true))
        .unwrap()
        .batch(2, false)
        .unwrap();
    let skip = Plan::new(WithOptions {
        input: parsed,
        options: PipelineOptions {
            on_bad_record: ErrorPolicy::Skip,
            ..Default::default()
        },
    })
    .unwrap();
    let mut all = Vec::new();
    for w in 0..2 {
        let share = Plan::new(Shard::new(skip.clone(), 2, w, true).uneven()).unwrap();
        let p = Pipeline::new(&share).unwrap();
        let text = p.explain();
        assert!(text.contains("by worker moved below"), "{text}");
        let mut run = p.start_at(None).unwrap();
        while let Some(e) = run.driver.next().unwrap() {
            all.extend(e.get("s").unwrap().typed::<i64>().unwrap().iter().copied());
        }
        // The record reader, below the share, passes over the bad record in every share.
        let end = p.state_of(&run).unwrap();
        assert_eq!(p.skipped_in(&end).unwrap(), (1, 0));
    }
    all.sort();
    assert_eq!(all, vec![0, 1, 2, 3, 5, 6, 7, 8]);
    // Above a take it stays: the take counts the elements left once bad ones are dropped.
    let take = Plan::new(stoker::datasets::take::Take {
        input: skip.step().inputs()[0].clone(),
        count: 3,
    })
    .unwrap();
    let take = Plan::new(WithOptions {
        input: take,
        options: PipelineOptions {
            on_bad_record: ErrorPolicy::Skip,
            ..Default::default()
        },
    })
    .unwrap();
    let mut firsts = Vec::new();
    for w in 0..2 {
        let share = Plan::new(Shard::new(take.clone(), 2, w, true).uneven()).unwrap();
        let p = Pipeline::new(&share).unwrap();
        assert!(
            p.explain().contains("it stops above take(3)"),
            "{}",
            p.explain()
        );
        let mut it = p.iter().unwrap();
        while let Some(e) = it.next().unwrap() {
            firsts.extend(e.get("s").unwrap().typed::<i64>().unwrap().iter().copied());
        }
    }
    firsts.sort();
    assert_eq!(firsts, vec![0, 1, 2, 3, 5, 6]);
    // A rank's share stays above the steps that may skip.
    let rank = Plan::new(Shard::new(skip, 2, 0, true)).unwrap();
    let text = Pipeline::new(&rank).unwrap().explain();
    assert!(text.contains("by rank stays where it is"), "{text}");
}
