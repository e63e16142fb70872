//! Semantics of every operator, checked through whole pipelines.
#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

mod common;

use std::sync::Arc;

use common::*;
use stoker::datasets::{
    cache::Cache, enumerate::Enumerate, interleave::Interleave, repeat::Repeat, shard::Shard,
    skip::Skip, take::Take, zip::Zip,
};
use stoker::sources::TfRecordOpener;
use stoker::{Pipeline, Plan};
use stoker_formats::Compression;

#[test]
fn shuffle_is_seeded_and_reshuffles_each_epoch() {
    let plan = range(200).shuffle(50, Some(42), true).unwrap();
    let p = Pipeline::new(&plan).unwrap();
    let epoch = |p: &Pipeline| {
        let mut it = p.iter().unwrap();
        let mut v = Vec::new();
        while let Some(e) = it.next().unwrap() {
            v.extend(values(&e));
        }
        v
    };
    let (e1, e2) = (epoch(&p), epoch(&p));
    assert_ne!(e1, e2, "a new order each epoch");
    let mut sorted = e1.clone();
    sorted.sort();
    assert_eq!(sorted, (0..200).collect::<Vec<_>>());
    // The same seed in a new pipeline gives the same sequence of epochs.
    let again = Pipeline::new(&range(200).shuffle(50, Some(42), true).unwrap()).unwrap();
    assert_eq!(epoch(&again), e1);
    assert_eq!(epoch(&again), e2);
    // reshuffle_each_iteration=false: the same order every epoch.
    let fixed = Pipeline::new(&range(200).shuffle(50, Some(42), false).unwrap()).unwrap();
    assert_eq!(epoch(&fixed), epoch(&fixed));
    // Under repeat, each repetition is a new epoch too.
    let rep = Plan::new(Repeat {
        input: range(20).shuffle(20, Some(1), true).unwrap(),
        count: Some(2),
    })
    .unwrap();
    let v = collect(&rep).unwrap();
    assert_ne!(v[..20], v[20..]);
}

#[test]
fn repeat_take_skip_edges() {
    let rep = |n, c| {
        Plan::new(Repeat {
            input: range(n),
            count: c,
        })
        .unwrap()
    };
    assert_eq!(collect(&rep(3, Some(2))).unwrap(), vec![0, 1, 2, 0, 1, 2]);
    assert_eq!(collect(&rep(3, Some(0))).unwrap(), Vec::<i64>::new());
    assert_eq!(
        collect(&rep(0, None)).unwrap(),
        Vec::<i64>::new(),
        "repeating nothing forever ends"
    );
    let take = |p: Plan, n| Plan::new(Take { input: p, count: n }).unwrap();
    let skip = |p: Plan, n| Plan::new(Skip { input: p, count: n }).unwrap();
    assert_eq!(
        collect(&take(rep(3, None), 7)).unwrap(),
        vec![0, 1, 2, 0, 1, 2, 0]
    );
    assert_eq!(collect(&take(range(5), 0)).unwrap(), Vec::<i64>::new());
    assert_eq!(collect(&skip(range(5), 5)).unwrap(), Vec::<i64>::new());
    assert_eq!(collect(&skip(range(5), 2)).unwrap(), vec![2, 3, 4]);
    assert_eq!(collect(&take(skip(range(10), 3), 2)).unwrap(), vec![3, 4]);
}

#[test]
fn batch_drop_remainder_and_schema() {
    let b = range(10).batch(4, false).unwrap();
    assert_eq!(b.schema().fields[0].shape, vec![None]);
    assert_eq!(
        collect_batches(&b).unwrap(),
        vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]
    );
    let d = range(10).batch(4, true).unwrap();
    assert_eq!(d.schema().fields[0].shape, vec![Some(4)]);
    assert_eq!(
        collect_batches(&d).unwrap(),
        vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]
    );
    assert_eq!(
        collect_batches(&range(3).batch(4, true).unwrap()).unwrap(),
        Vec::<Vec<i64>>::new()
    );
    assert!(range(3).batch(0, true).is_err());
}

#[test]
fn shard_zip_enumerate() {
    let shard = |i| Plan::new(Shard::new(range(10), 3, i, false)).unwrap();
    assert_eq!(collect(&shard(0)).unwrap(), vec![0, 3, 6, 9]);
    assert_eq!(collect(&shard(2)).unwrap(), vec![2, 5, 8]);
    assert!(Plan::new(Shard::new(range(10), 3, 3, false)).is_err());

    let zip = Plan::new(Zip {
        inputs: vec![range(5), range(3)],
        prefixes: vec!["a/".into(), "b/".into()],
    })
    .unwrap();
    let names: Vec<&str> = zip
        .schema()
        .fields
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(names, ["a/value", "b/value"]);
    let p = Pipeline::new(&zip).unwrap();
    let mut it = p.iter().unwrap();
    let mut n = 0;
    while let Some(e) = it.next().unwrap() {
        assert_eq!(
            e.tensors[0].typed::<i64>().unwrap(),
            e.tensors[1].typed::<i64>().unwrap()
        );
        n += 1;
    }
    assert_eq!(n, 3, "zip ends with the shortest input");
    let same = Plan::new(Zip {
        inputs: vec![range(5), range(3)],
        prefixes: vec!["".into(), "".into()],
    });
    assert!(
        same.is_err(),
        "duplicate field names are a build-time error"
    );

    let en = Plan::new(Enumerate {
        input: range(3).shuffle(3, Some(0), false).unwrap(),
        start: 10,
        index_name: "i".into(),
        prefix: "".into(),
    })
    .unwrap();
    assert_eq!(collect(&en).unwrap(), vec![10, 11, 12]);
}

#[test]
fn interleave_over_files_keeps_tf_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for f in 0..3i64 {
        let p = dir.path().join(format!("f{f}.tfrecord"));
        write_examples(&p, (0..=f).map(|i| 10 * f + i), Compression::None);
        files.push(p.to_string_lossy().into_owned());
    }
    let s_of =
        |plan: &Plan| -> Vec<i64> {
            let parse = stoker_ops::OpSpec::from_json(&serde_json::json!({
            "op": "parse_example", "features": [{"name": "s", "kind": "fixed", "dtype": "int64"}]
        })).unwrap().build().unwrap();
            let mapped = plan.map(vec![parse], None, Some(true)).unwrap();
            let sel = stoker_ops::OpSpec::from_json(
                &serde_json::json!({"op": "select", "fields": ["s"]}),
            )
            .unwrap()
            .build()
            .unwrap();
            collect(&mapped.map(vec![sel], None, Some(true)).unwrap()).unwrap()
        };
    // Sequential reading: file after file.
    let seq = Plan::tfrecord(files.clone(), Compression::None, true, 1).unwrap();
    assert_eq!(s_of(&seq), vec![0, 10, 11, 20, 21, 22]);
    // Parallel reads interleave one record from each file in turn (tf.data's order), and the
    // result does not depend on thread timing.
    let par = Plan::tfrecord(files.clone(), Compression::None, true, 2).unwrap();
    let want = vec![0, 10, 11, 20, 21, 22];
    for _ in 0..5 {
        assert_eq!(s_of(&par), want);
    }
    let par3 = Plan::tfrecord(files.clone(), Compression::None, true, 3).unwrap();
    assert_eq!(s_of(&par3), vec![0, 10, 20, 11, 21, 22]);
    // interleave over a dataset of names with block_length 2.
    let names = Plan::list_files(files.clone(), false, None).unwrap();
    let inter = Plan::new(Interleave {
        input: names,
        opener: Arc::new(TfRecordOpener {
            compression: Compression::None,
            verify_crc: true,
            max_record_bytes: stoker_formats::tfrecord_reader::DEFAULT_MAX_RECORD_BYTES,
        }),
        cycle_length: Some(2),
        block_length: 2,
        num_parallel_calls: Some(2),
    })
    .unwrap();
    assert_eq!(s_of(&inter), vec![0, 10, 11, 20, 21, 22]);
}

#[test]
fn memory_cache_replays_without_rerunning_the_input() {
    let plan = Plan::new(Cache {
        input: range(5).shuffle(5, None, true).unwrap(),
        filename: None,
    })
    .unwrap();
    let p = Pipeline::new(&plan).unwrap();
    let run = || {
        let mut it = p.iter().unwrap();
        let mut v = Vec::new();
        while let Some(e) = it.next().unwrap() {
            v.extend(values(&e));
        }
        v
    };
    let first = run();
    assert_eq!(
        run(),
        first,
        "a reshuffling input is not run again: the cache replays"
    );
}

#[test]
fn disk_cache_is_written_once_complete_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache.bin").to_string_lossy().into_owned();
    let make = |seed| {
        Plan::new(Cache {
            input: range(50)
                .shuffle(50, Some(seed), true)
                .unwrap()
                .batch(7, false)
                .unwrap(),
            filename: Some(path.clone()),
        })
        .unwrap()
    };

    // An interrupted first pass leaves no cache behind.
    {
        let p = Pipeline::new(&make(1)).unwrap();
        let mut it = p.iter().unwrap();
        it.next().unwrap();
    }
    assert!(!std::path::Path::new(&path).exists());
    let first = collect_batches(&make(1)).unwrap();
    assert!(std::path::Path::new(&path).exists());
    // Another pipeline (another seed!) reads the file instead of running its input.
    assert_eq!(collect_batches(&make(2)).unwrap(), first);
    // A cache written by a different pipeline is refused with a clear message.
    let other = Plan::new(Cache {
        input: range(3)
            .batch(2, false)
            .unwrap()
            .map(vec![], None, Some(true))
            .unwrap(),
        filename: Some(path.clone()),
    })
    .unwrap();
    let ok_same_fields = collect_batches(&other);
    assert!(
        ok_same_fields.is_ok(),
        "same fields and dtypes: the file is used"
    );
    let strings = Plan::new(Cache {
        input: Plan::list_files(vec![path.clone()], false, None).unwrap(),
        filename: Some(path.clone()),
    })
    .unwrap();
    let err = Pipeline::new(&strings)
        .unwrap()
        .iter()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("delete the file"), "{err}");
}

#[test]
fn planner_moves_elementwise_maps_after_batch_with_the_same_result() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x.tfrecord");
    write_examples(&f, 0..10, Compression::None);
    let files = vec![f.to_string_lossy().into_owned()];
    let parse = || {
        stoker_ops::OpSpec::from_json(&serde_json::json!({
        "op": "parse_example", "features": [{"name": "s", "kind": "fixed", "dtype": "int64"}, {"name": "d", "kind": "fixed", "dtype": "string"}]
    })).unwrap().build().unwrap()
    };
    let decode = || {
        stoker_ops::OpSpec::from_json(
            &serde_json::json!({"op": "decode_raw", "field": "d", "dtype": "int32"}),
        )
        .unwrap()
        .build()
        .unwrap()
    };
    let per_element = Plan::tfrecord(files.clone(), Compression::None, true, 1)
        .unwrap()
        .map(vec![parse()], None, Some(true))
        .unwrap()
        .map(vec![decode()], None, Some(true))
        .unwrap()
        .batch(4, false)
        .unwrap();
    let p = Pipeline::new(&per_element).unwrap();
    let explained = p.explain();
    let first_line = explained.lines().next().unwrap();
    assert!(
        first_line.starts_with("map[parse_example, decode_raw]"),
        "{explained}"
    );
    let mut it = p.iter().unwrap();
    let mut seen = Vec::new();
    while let Some(e) = it.next().unwrap() {
        let d = e.get("d").unwrap();
        assert_eq!(d.shape()[1], 1);
        seen.extend(d.typed::<i32>().unwrap().iter().map(|&v| i64::from(v)));
        assert_eq!(
            e.get("s").unwrap().typed::<i64>().unwrap().len(),
            d.shape()[0]
        );
    }
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
}

#[test]
fn build_time_errors_name_the_step() {
    let decode = stoker_ops::OpSpec::from_json(
        &serde_json::json!({"op": "decode_raw", "field": "nope", "dtype": "uint8"}),
    )
    .unwrap()
    .build()
    .unwrap();
    let err = range(3)
        .map(vec![decode], None, Some(true))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("decode_raw") && err.contains("no field 'nope'") && err.contains("value"),
        "{err}"
    );
    let unpack =
        stoker_ops::OpSpec::from_json(&serde_json::json!({"op": "unpack_bits", "field": "value"}))
            .unwrap()
            .build()
            .unwrap();
    let err = range(3)
        .map(vec![unpack], None, Some(true))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("unpack_bits") && err.contains("expected uint8"),
        "{err}"
    );
}

#[test]
fn spec_round_trip_gives_the_same_elements() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x.tfrecord");
    write_examples(&f, 0..30, Compression::Gzip);
    let parse = stoker_ops::OpSpec::from_json(&serde_json::json!({
        "op": "parse_example", "features": [{"name": "s", "kind": "fixed", "dtype": "int64"}]
    }))
    .unwrap()
    .build()
    .unwrap();
    let plan = Plan::tfrecord(
        vec![f.to_string_lossy().into_owned()],
        Compression::Gzip,
        true,
        1,
    )
    .unwrap()
    .shuffle(10, Some(3), true)
    .unwrap()
    .batch(4, true)
    .unwrap()
    .map(vec![parse], Some(2), Some(true))
    .unwrap()
    .prefetch(2)
    .unwrap();
    let sel = |p: &Plan| {
        let s =
            stoker_ops::OpSpec::from_json(&serde_json::json!({"op": "select", "fields": ["s"]}))
                .unwrap()
                .build()
                .unwrap();
        collect(&p.map(vec![s], None, Some(true)).unwrap()).unwrap()
    };
    // The first epoch of the original (a second run of the same plan would be a new epoch).
    let want = sel(&plan);
    for ext in ["json", "toml"] {
        let spec = dir
            .path()
            .join(format!("p.{ext}"))
            .to_string_lossy()
            .into_owned();
        stoker::spec::save(&plan, &spec).unwrap();
        let loaded = stoker::spec::load(&spec).unwrap();
        assert_eq!(sel(&loaded), want, "{ext}");
    }
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"pipeline": [{"step": "batch", "batch_size": 2}]}"#,
    )
    .unwrap();
    let err = stoker::spec::load(&bad.to_string_lossy())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("step 0 (batch)") && err.contains("needs an input"),
        "{err}"
    );
}

#[test]
fn a_saved_state_resumes_the_stream_exactly_in_another_pipeline() {
    use stoker_core::exec::ElementIter;
    let make = || {
        let shuffled = range(50).shuffle(16, Some(3), true).unwrap();
        Plan::new(Repeat {
            input: shuffled,
            count: Some(2),
        })
        .unwrap()
        .batch(4, false)
        .unwrap()
    };
    let drain = |it: &mut dyn ElementIter| {
        let mut v = Vec::new();
        while let Some(e) = it.next().unwrap() {
            v.push(values(&e));
        }
        v
    };
    for cut in [0, 1, 12, 13, 25] {
        let p = Pipeline::new(&make()).unwrap();
        let mut run = p.start_at(None).unwrap();
        for _ in 0..cut {
            run.driver.next().unwrap().unwrap();
        }
        let saved = p.state_of(&run).unwrap();
        let rest = drain(&mut run.driver);
        let q = Pipeline::new(&make()).unwrap();
        let mut resumed = q.start_at(Some(&saved)).unwrap();
        assert_eq!(drain(&mut resumed.driver), rest, "cut at {cut}");
        // A state of another pipeline is refused.
        let other = Pipeline::new(&range(50).batch(4, false).unwrap()).unwrap();
        let err = other.start_at(Some(&saved)).err().unwrap().to_string();
        assert!(err.contains("another pipeline"), "{err}");
    }
}

/// Rank shares over `plan` for `world` ranks, as the planner places them.
fn rank_shares(plan: &Plan, world: u64) -> Vec<Vec<Vec<i64>>> {
    (0..world)
        .map(|r| {
            collect_batches(&Plan::new(Shard::new(plan.clone(), world, r, true)).unwrap()).unwrap()
        })
        .collect()
}

#[test]
fn a_ranks_share_moves_below_the_batch_and_into_a_global_shuffle() {
    use stoker::datasets::global_shuffle::GlobalShuffle;
    let shuffled = Plan::new(GlobalShuffle::new(range(20), Some(3), true)).unwrap();
    let whole = collect(&shuffled).unwrap();
    let batched = shuffled.batch(3, false).unwrap().prefetch(2).unwrap();
    let shares = rank_shares(&batched, 3);
    // 18 of 20 shared out, 6 each in batches of 3: positions r, r + 3, ... of the permutation.
    for (r, share) in shares.iter().enumerate() {
        assert_eq!(share.len(), 2);
        let flat: Vec<i64> = share.iter().flatten().copied().collect();
        let want: Vec<i64> = whole[..18].iter().skip(r).step_by(3).copied().collect();
        assert_eq!(flat, want);
    }
    let top = Plan::new(Shard::new(batched, 3, 1, true)).unwrap();
    assert_eq!(
        top.step().cardinality(),
        stoker::properties::Cardinality::Finite(2)
    );
    let p = Pipeline::new(&top).unwrap();
    let text = p.explain();
    assert!(
        text.contains("global_shuffle taking shard(3, 1) by rank"),
        "{text}"
    );
    assert!(
        !text.contains("\n    shard("),
        "no shard step is left: {text}"
    );
}

#[test]
fn a_users_shard_stays_above_a_batch_and_moves_below_a_take() {
    let top = Plan::new(Shard::new(range(20).batch(4, false).unwrap(), 2, 1, false)).unwrap();
    assert_eq!(
        collect_batches(&top).unwrap(),
        vec![vec![4, 5, 6, 7], vec![12, 13, 14, 15]]
    );
    assert!(Pipeline::new(&top)
        .unwrap()
        .explain()
        .contains("stops above batch(4)"));
    let take = Plan::new(Take {
        input: range(20),
        count: 7,
    })
    .unwrap();
    let shard = Plan::new(Shard::new(take, 3, 1, false)).unwrap();
    assert_eq!(collect(&shard).unwrap(), vec![1, 4]);
    let text = Pipeline::new(&shard).unwrap().explain();
    assert!(text.contains("shard(3, 1) of the first 7"), "{text}");
}

#[test]
fn a_workers_uneven_share_batches_its_own_elements_and_leaves_none_out() {
    use stoker::datasets::shard::rows_per_pass;
    let shares = |batched: &Plan| -> Vec<(Vec<Vec<i64>>, Option<u64>)> {
        (0..3)
            .map(|w| {
                let top = Plan::new(Shard::new(batched.clone(), 3, w, true).uneven()).unwrap();
                let p = Pipeline::new(&top).unwrap();
                let text = p.explain();
                let moved = text
                    .lines()
                    .any(|l| l.contains("by worker moved below") && l.contains("batch(4"));
                assert!(moved, "{text}");
                let batches = collect_batches(&top).unwrap();
                let card = top.step().cardinality();
                assert_eq!(
                    card,
                    stoker::properties::Cardinality::Finite(batches.len() as u64)
                );
                (batches, rows_per_pass(p.plan()))
            })
            .collect()
    };
    // 22 elements: 8, 7 and 7, each worker batching its own (no remainder left out).
    let got = shares(&range(22).batch(4, false).unwrap().prefetch(2).unwrap());
    assert_eq!(got[0].0, vec![vec![0, 3, 6, 9], vec![12, 15, 18, 21]]);
    assert_eq!(got[1].0, vec![vec![1, 4, 7, 10], vec![13, 16, 19]]);
    assert_eq!(got[2].0, vec![vec![2, 5, 8, 11], vec![14, 17, 20]]);
    let rows: Vec<Option<u64>> = got.iter().map(|g| g.1).collect();
    assert_eq!(rows, vec![Some(8), Some(7), Some(7)]);
    // With drop_remainder each worker drops its own short batch.
    let got = shares(&range(22).batch(4, true).unwrap());
    let rows: Vec<Option<u64>> = got.iter().map(|g| g.1).collect();
    assert_eq!(rows, vec![Some(8), Some(4), Some(4)]);
    assert_eq!(got[1].0, vec![vec![1, 4, 7, 10]]);
}

#[test]
fn rows_per_pass_counts_a_shards_batches_above_the_batch() {
    use stoker::datasets::shard::rows_per_pass;
    let rows = |w: u64| {
        let batched = range(22).batch(4, false).unwrap();
        let top = Plan::new(Shard::new(batched, 3, w, false)).unwrap();
        rows_per_pass(Pipeline::new(&top).unwrap().plan())
    };
    // Batches 0..6 (the last of 2 rows): shard 2 keeps batches 2 and 5.
    assert_eq!((rows(0), rows(1), rows(2)), (Some(8), Some(8), Some(6)));
    let planned = |plan: Plan| rows_per_pass(Pipeline::new(&plan).unwrap().plan());
    // Whole batches, repeated: any number of them. A short one moved by a shuffle: unknown.
    assert_eq!(
        planned(
            Plan::new(Repeat {
                input: range(48).batch(8, false).unwrap(),
                count: Some(2),
            })
            .unwrap()
        ),
        Some(96)
    );
    assert_eq!(
        planned(
            range(50)
                .batch(8, false)
                .unwrap()
                .shuffle(8, Some(1), true)
                .unwrap()
        ),
        None
    );
    let unbatched = Pipeline::new(&range(5)).unwrap();
    assert_eq!(rows_per_pass(unbatched.plan()), None);
}
