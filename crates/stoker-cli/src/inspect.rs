//! `stoker inspect FILE...`: record counts, CRC check, the first Example's features.

use std::io::Read;

use serde_json::{json, Value};
use stoker_formats::example::{Example, Kind};
use stoker_formats::{Compression, RecordReader};

#[derive(clap::Args)]
pub struct Args {
    /// TFRecord files.
    #[arg(required = true)]
    files: Vec<String>,
    /// none, gzip, zlib, or auto (detect from the file's first bytes).
    #[arg(long, default_value = "auto")]
    compression: String,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn detect(path: &str) -> anyhow::Result<Compression> {
    let mut head = [0u8; 12];
    let mut f = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("{path}: {e}"))?;
    let n = f.read(&mut head)?;
    if n >= 2 && head[0] == 0x1f && head[1] == 0x8b {
        return Ok(Compression::Gzip);
    }
    if n == 12 {
        let len = &head[..8];
        let crc = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        if stoker_formats::masked_crc32c(len) == crc {
            return Ok(Compression::None);
        }
    }
    if n >= 2 && head[0] == 0x78 && (u16::from(head[0]) << 8 | u16::from(head[1])) % 31 == 0 {
        return Ok(Compression::Zlib);
    }
    Ok(Compression::None)
}

fn describe(kind: &Kind) -> Value {
    match kind {
        Kind::BytesList(l) => {
            let lens: Vec<usize> = l.value.iter().take(4).map(|b| b.len()).collect();
            json!({"type": "bytes_list", "values": l.value.len(), "first_lengths": lens})
        }
        Kind::FloatList(l) => {
            json!({"type": "float_list", "values": l.value.len(), "first": l.value.iter().take(4).collect::<Vec<_>>()})
        }
        Kind::Int64List(l) => {
            json!({"type": "int64_list", "values": l.value.len(), "first": l.value.iter().take(4).collect::<Vec<_>>()})
        }
    }
}

fn inspect_file(path: &str, compression: &str) -> anyhow::Result<Value> {
    let compression = match compression {
        "auto" => detect(path)?,
        c => Compression::parse(c)?,
    };
    let mut reader = RecordReader::open(path, compression, true)?;
    let (mut records, mut bytes) = (0u64, 0u64);
    let mut first: Option<Value> = None;
    let mut error = None;
    loop {
        match reader.next_record() {
            Ok(Some((data, _))) => {
                if first.is_none() {
                    first = Some(match Example::parse(data.clone()) {
                        Ok(ex) => {
                            let features: serde_json::Map<String, Value> = ex
                                .features
                                .map(|f| {
                                    f.feature
                                        .iter()
                                        .map(|(k, v)| {
                                            (
                                                k.clone(),
                                                v.kind
                                                    .as_ref()
                                                    .map_or(json!({"type": "empty"}), describe),
                                            )
                                        })
                                        .collect()
                                })
                                .unwrap_or_default();
                            json!({"example": features})
                        }
                        Err(e) => json!({"not_an_example": e.to_string(), "length": data.len()}),
                    });
                }
                records += 1;
                bytes += data.len() as u64;
            }
            Ok(None) => break,
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    Ok(json!({
        "file": path,
        "compression": match compression { Compression::None => "none", Compression::Gzip => "gzip", Compression::Zlib => "zlib" },
        "records": records,
        "payload_bytes": bytes,
        "crc_ok": error.is_none(),
        "error": error,
        "first_record": first,
    }))
}

pub fn run(args: &Args) -> anyhow::Result<u8> {
    if let [dir] = args.files.as_slice() {
        let dir = std::path::Path::new(dir);
        if dir.join(stoker::convert::MANIFEST).is_file() {
            return converted(dir, args.json);
        }
    }
    let mut reports = Vec::new();
    let mut failed = false;
    // Patterns are expanded as the API expands them (a shell may have done it already).
    for f in &stoker::sources::expand_files("inspect", &args.files)? {
        let r = match inspect_file(f, &args.compression) {
            Ok(r) => r,
            Err(e) => json!({"file": f, "crc_ok": false, "error": format!("{e:#}")}),
        };
        failed |= r["crc_ok"] != json!(true);
        reports.push(r);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        for r in &reports {
            print_text(r);
        }
    }
    Ok(if failed { 1 } else { 0 })
}

fn print_text(r: &Value) {
    let file = r["file"].as_str().unwrap_or("?");
    match r["error"].as_str() {
        Some(e) if r.get("records").is_none() => {
            println!("{file}: ERROR {e}");
            return;
        }
        _ => {}
    }
    println!(
        "{file}: {} records, {} payload bytes, compression {}, {}",
        r["records"],
        r["payload_bytes"],
        r["compression"].as_str().unwrap_or("?"),
        if r["crc_ok"] == json!(true) {
            "all CRCs ok".to_string()
        } else {
            format!("ERROR {}", r["error"].as_str().unwrap_or(""))
        }
    );
    match r["first_record"].get("example").and_then(Value::as_object) {
        Some(features) => {
            println!(
                "  first record: tf.train.Example with {} features",
                features.len()
            );
            for (name, d) in features {
                let first = d
                    .get("first")
                    .or_else(|| d.get("first_lengths"))
                    .map(|v| v.to_string())
                    .unwrap_or_default();
                let label = if d.get("first_lengths").is_some() {
                    "lengths"
                } else {
                    "first"
                };
                println!(
                    "    {name}: {}[{}] {label} {first}",
                    d["type"].as_str().unwrap_or("?"),
                    d["values"]
                );
            }
        }
        None => {
            if let Some(why) = r["first_record"].get("not_an_example") {
                println!("  first record: not a tf.train.Example ({why})");
            }
        }
    }
}

/// The output folder of `stoker convert`: its manifest, summarised, and every shard checked
/// against it (size and sha256).
fn converted(dir: &std::path::Path, as_json: bool) -> anyhow::Result<u8> {
    let m = stoker::convert::Manifest::read(dir)?;
    let check = m.verify(dir, true);
    if as_json {
        let mut v = serde_json::to_value(&m)?;
        v["check"] = match &check {
            Ok(()) => json!("ok"),
            Err(e) => json!(e.to_string()),
        };
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let bytes: u64 = m.shards.iter().map(|s| s.bytes).sum();
        let done = m.shards.iter().filter(|s| s.complete).count();
        println!(
            "{}: stoker convert output, {} elements in {done} of {} shards ({:.1} MB), \
             compression {}, images {:?}{}",
            dir.display(),
            m.elements,
            m.shards.len(),
            bytes as f64 / 1e6,
            if m.options.compression.is_empty() {
                "none"
            } else {
                &m.options.compression
            },
            m.options.images,
            if m.complete { "" } else { ", NOT COMPLETE" }
        );
        println!("  offline: {}", m.offline.join(" → "));
        if !m.online.is_empty() {
            println!("  left online: {}", m.online.join(" → "));
        }
        for f in &m.fields {
            let dims: Vec<String> = (f.shape.iter())
                .map(|d| d.map_or("?".to_string(), |d| d.to_string()))
                .collect();
            println!(
                "  {}: {} [{}] stored as {}",
                f.name,
                f.dtype,
                dims.join(", "),
                f.stored.name()
            );
        }
        for s in m.shards.iter().filter(|s| s.skipped > 0) {
            println!(
                "  {}: {} bad input skipped, the last: {}",
                s.file,
                s.skipped,
                s.last_skip.as_deref().unwrap_or("?")
            );
        }
        match &check {
            Ok(()) => println!("  every shard matches its size and sha256"),
            Err(e) => println!("  ERROR {e}"),
        }
    }
    Ok(if check.is_ok() { 0 } else { 1 })
}
