//! TFRecord framing, plain, GZIP or ZLIB (the first byte picks, and whether CRCs are checked):
//! every record read or a located error, and reading on after damage as the skip policy does.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stoker_formats::compression::Compression;
use stoker_formats::tfrecord_reader::RecordReader;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let compression = match mode % 3 {
        0 => Compression::None,
        1 => Compression::Gzip,
        _ => Compression::Zlib,
    };
    let verify_crc = mode & 4 != 0;
    let src = std::io::Cursor::new(rest.to_vec());
    let mut reader = RecordReader::new("fuzz.tfrecord", src, compression, verify_crc);
    // Each pass reads a record, ends, or recovers past damage; a file of n bytes has at most
    // n records, so this bound is never what stops a correct reader.
    for _ in 0..=rest.len() + 1 {
        match reader.next_record() {
            Ok(Some(_)) => {}
            Ok(None) => return,
            Err(e) => {
                let message = e.to_string();
                assert!(message.contains("fuzz.tfrecord"), "not located: {message}");
                match reader.recover() {
                    Ok(r) if !r.rest_lost => {}
                    _ => return,
                }
            }
        }
    }
    panic!("the reader neither ended nor failed");
});
