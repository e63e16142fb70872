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
