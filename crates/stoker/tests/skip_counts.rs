//! Under the skip policy a saved state holds how many bad records were skipped before it:
//! exact however far the threads ran ahead, and carried on by a run restored from it, so
//! that a run stopped anywhere and resumed counts every bad record once.
#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

mod common;

use common::parse_s;

use stoker::datasets::{options::WithOptions, repeat::Repeat};
use stoker::{Pipeline, Plan};
use stoker_core::exec::ElementIter;
use stoker_core::{ErrorPolicy, PipelineOptions};
use stoker_formats::example::{Example, Feature};
use stoker_formats::{Compression, RecordWriter};

/// Records `ids` of file `name`: an Example `{s: id}`, but bytes no Example parses where
/// `id % 5 == 3`, and, for the id `damaged`, a record whose data fails its CRC. Returns the
/// path and the bad records in it.
fn file(
    dir: &std::path::Path,
    name: &str,
    ids: std::ops::Range<i64>,
    damaged: i64,
) -> (String, u64) {
    let path = dir.join(name);
    let mut w = RecordWriter::create(&path, Compression::None).unwrap();
    let (mut offsets, mut at, mut bad) = (Vec::new(), 0u64, 0);
    for i in ids.clone() {
        let data = if i % 5 == 3 {
            bad += 1;
            vec![0xff; 7]
        } else {
            Example::with_features([("s".to_string(), Feature::int64s(vec![i]))]).serialize()
        };
        offsets.push(at);
        at += 16 + data.len() as u64;
        w.write(&data).unwrap();
    }
    w.finish().unwrap();
    if ids.contains(&damaged) {
        let mut bytes = std::fs::read(&path).unwrap();
        let k = (damaged - ids.start) as usize;
        bytes[offsets[k] as usize + 13] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        if damaged % 5 != 3 {
            bad += 1;
        }
    }
    (path.to_string_lossy().into_owned(), bad)
}

fn skipping(plan: Plan) -> Plan {
    Plan::new(WithOptions {
        input: plan,
        options: PipelineOptions {
            on_bad_record: ErrorPolicy::Skip,
            ..Default::default()
        },
    })
    .unwrap()
}

fn total(p: &Pipeline, saved: &[u8]) -> u64 {
    let (below, own) = p.skipped_in(saved).unwrap();
    below + own
}

/// Runs `make()`'s pipeline to its end from every cut: the count at the cut never falls, is
/// never more than `bad`, and, carried into a new pipeline restored there, ends at `bad`.
fn counts_once_from_every_cut(make: impl Fn() -> Plan, bad: u64) {
    let whole = Pipeline::new(&make()).unwrap();
    let mut run = whole.start_at(None).unwrap();
    let mut n = 0;
    while run.driver.next().unwrap().is_some() {
        n += 1;
    }
    let end = whole.state_of(&run).unwrap();
    assert_eq!(total(&whole, &end), bad, "an uninterrupted run");
    let mut last = 0;
    for cut in 0..=n {
        let p = Pipeline::new(&make()).unwrap();
        let mut run = p.start_at(None).unwrap();
        for _ in 0..cut {
            run.driver.next().unwrap().unwrap();
        }
        let saved = p.state_of(&run).unwrap();
        let here = total(&p, &saved);
        assert!(
            last <= here && here <= bad,
            "cut {cut}: {here} after {last}, of {bad}"
        );
        last = here;
        drop(run);
        let q = Pipeline::new(&make()).unwrap();
        let mut resumed = q.start_at(Some(&saved)).unwrap();
        while resumed.driver.next().unwrap().is_some() {}
        let end = q.state_of(&resumed).unwrap();
        assert_eq!(total(&q, &end), bad, "resumed at cut {cut}");
    }
}

#[test]
fn parallel_reads_maps_a_shuffle_and_a_repeat_count_each_bad_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    let mut bad = 0;
    for (k, ids) in [0..12, 12..24, 24..36].into_iter().enumerate() {
        let (p, b) = file(dir.path(), &format!("{k}.tfrecord"), ids, 16);
        paths.push(p);
        bad += b;
    }
    // Per pass: 7 that do not parse and one that fails its CRC.
    assert_eq!(bad, 8);
    let make = || {
        let parsed = Plan::tfrecord(paths.clone(), Compression::None, true, 2)
            .unwrap()
            .map(vec![parse_s()], Some(2), Some(true))
            .unwrap()
            .shuffle(6, Some(1), true)
            .unwrap()
            .batch(4, false)
            .unwrap();
        let twice = Plan::new(Repeat {
            input: parsed,
            count: Some(2),
        })
        .unwrap();
        skipping(twice.prefetch(3).unwrap())
    };
    counts_once_from_every_cut(make, 2 * bad);
}

#[test]
fn a_sequential_map_and_a_cache_count_the_pass_that_read_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bad) = file(dir.path(), "x.tfrecord", 0..20, 6);
    let make = || {
        let cached = Plan::tfrecord(vec![path.clone()], Compression::None, true, 1)
            .unwrap()
            .map(vec![parse_s()], None, Some(true))
            .unwrap()
            .cache(None)
            .unwrap();
        let twice = Plan::new(Repeat {
            input: cached,
            count: Some(2),
        })
        .unwrap();
        skipping(twice.batch(3, false).unwrap())
    };
    // The second pass comes from the cache: no bad record is read again.
    counts_once_from_every_cut(make, bad);
}

#[test]
fn bad_records_after_the_last_element_count_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    // The last record fails its CRC, the one before it does not parse.
    let (path, bad) = file(dir.path(), "x.tfrecord", 0..15, 14);
    assert_eq!(bad, 4);
    for parallel in [None, Some(2)] {
        let make = || {
            let parsed = Plan::tfrecord(vec![path.clone()], Compression::None, true, 1)
                .unwrap()
                .map(vec![parse_s()], parallel, Some(true))
                .unwrap();
            skipping(parsed.batch(4, false).unwrap())
        };
        counts_once_from_every_cut(make, bad);
    }
}

#[test]
fn a_disk_cache_counts_the_pass_that_wrote_it() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bad) = file(dir.path(), "x.tfrecord", 0..20, 6);
    let cache = dir.path().join("c.cache").to_string_lossy().into_owned();
    let make = || {
        // Each run writes the cache afresh (a run reading a whole cache file skips nothing).
        let _ = std::fs::remove_file(&cache);
        let cached = Plan::tfrecord(vec![path.clone()], Compression::None, true, 1)
            .unwrap()
            .map(vec![parse_s()], Some(2), Some(true))
            .unwrap()
            .cache(Some(cache.clone()))
            .unwrap();
        skipping(cached.batch(3, false).unwrap())
    };
    counts_once_from_every_cut(make, bad);
}

#[test]
fn a_memory_cache_filled_meanwhile_counts_on_as_the_pass_that_filled_it() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bad) = file(dir.path(), "x.tfrecord", 0..20, 6);
    let plan = skipping(
        Plan::tfrecord(vec![path], Compression::None, true, 1)
            .unwrap()
            .map(vec![parse_s()], None, Some(true))
            .unwrap()
            .cache(None)
            .unwrap(),
    );
    for cut in [0, 1, 5, 9, 15] {
        let p = Pipeline::new(&plan).unwrap();
        let mut first = p.start_at(None).unwrap();
        for _ in 0..cut {
            first.driver.next().unwrap().unwrap();
        }
        let saved = p.state_of(&first).unwrap();
        // The first run fills the cache; the restored one then replays it from the cut.
        while first.driver.next().unwrap().is_some() {}
        let mut resumed = p.start_at(Some(&saved)).unwrap();
        while resumed.driver.next().unwrap().is_some() {}
        let end = p.state_of(&resumed).unwrap();
        assert_eq!(total(&p, &end), bad, "cut {cut}");
    }
}
