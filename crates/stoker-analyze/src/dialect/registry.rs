//! The dialects stoker reads, and the choice of one for a file.

use std::io::Read;
use std::path::Path;

use super::chrome_json::ChromeJson;
use super::xspace::Xspace;
use super::Dialect;
use crate::error::{AnalyzeError, Result};
use crate::model::Trace;

/// Every dialect, in the order they are asked whether a file is theirs. A file no dialect
/// claims is read as Chrome trace JSON, whose errors name the line and column where it is not.
pub static DIALECTS: &[&dyn Dialect] = &[&Xspace, &ChromeJson];

/// How many first bytes of a file the dialects are shown to tell their files.
const HEAD: usize = 16;

/// Reads `path` into the model, with the first dialect whose file name it has or, where no
/// dialect knows the name, the first that knows its first bytes (plain or gzipped).
pub fn load(path: &Path) -> Result<Trace> {
    choose(path)?.read(path)
}

/// The dialect of the file at `path`.
fn choose(path: &Path) -> Result<&'static dyn Dialect> {
    let name = path.to_string_lossy();
    if let Some(&d) = DIALECTS.iter().find(|d| d.by_name(&name)) {
        return Ok(d);
    }
    let mut head = [0u8; HEAD];
    let n = super::open(path)?
        .read(&mut head)
        .map_err(|e| AnalyzeError::io(path, e))?;
    Ok((DIALECTS.iter().copied())
        .find(|d| d.by_content(&head[..n]))
        .unwrap_or(&ChromeJson))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// A file whose name says nothing is read by the dialect its first bytes (gunzipped) say,
    /// and what none claims as JSON, whose error names the line and column.
    #[test]
    fn a_file_without_a_known_name_by_its_first_bytes() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/traces");
        let xspace = std::fs::read(dir.join("jax/jax_train.xplane.pb")).unwrap_or_default();
        let json = std::fs::read(dir.join("tensorflow/tf1_timeline/cpu_timeline_01.json"))
            .unwrap_or_default();
        assert!(!xspace.is_empty() && !json.is_empty());
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let gzipped = gz.write_all(&xspace).and_then(|()| gz.finish());
        let gzipped = gzipped.unwrap_or_default();
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for (name, bytes, dialect) in [
            ("profile", &xspace, "xspace"),
            ("profile.gz", &gzipped, "xspace"),
            ("timeline.trace", &json, "tensorflow-timeline"),
        ] {
            let path = tmp.path().join(name);
            std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{e}"));
            let trace = load(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(trace.dialect, dialect, "{name}");
        }
        let path = tmp.path().join("notes.txt");
        std::fs::write(&path, "not a trace\n").unwrap_or_else(|e| panic!("{e}"));
        let message = load(&path).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("line 1, column 1"), "{message}");
    }
}
