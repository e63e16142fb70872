//! PNG's file structure, read without decoding: the signature, the IHDR's size, the chunks
//! (with their CRCs checked), and whether the image data can hold the image the header claims.

pub(crate) const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

pub(crate) fn is_png(data: &[u8]) -> bool {
    data.starts_with(PNG_MAGIC)
}

/// `(width, height)` from a PNG's IHDR, which is always its first chunk; `None` when `data`
/// is not a PNG.
pub(crate) fn png_size(data: &[u8]) -> Option<(usize, usize)> {
    let be = |b: &[u8]| Some(u32::from_be_bytes(b.try_into().ok()?) as usize);
    match (
        is_png(data),
        data.get(12..16),
        data.get(16..20),
        data.get(20..24),
    ) {
        (true, Some(b"IHDR"), Some(w), Some(h)) => Some((be(w)?, be(h)?)),
        _ => None,
    }
}

/// The most a deflate stream expands (a 258-byte match per 2 bits, about 1032:1).
const DEFLATE_MAX_RATIO: u64 = 1032;

/// Checks that a PNG's image data can hold the image its IHDR claims, given that deflate
/// expands at most [`DEFLATE_MAX_RATIO`] times: a tiny file claiming a huge image is refused
/// before its pixel buffer is allocated. Malformed chunks are left for the decoder to report.
pub(crate) fn check_png_data(data: &[u8]) -> Result<(), String> {
    let (Some((width, height)), Some(&depth), Some(&color)) =
        (png_size(data), data.get(24), data.get(25))
    else {
        return Ok(());
    };
    let samples: u64 = match color {
        2 => 3,
        4 => 2,
        6 => 4,
        _ => 1,
    };
    let row_bits = width as u64 * samples * u64::from(depth);
    let needed = (height as u64).saturating_mul(row_bits.div_ceil(8));
    let mut idat = 0u64;
    let mut at = PNG_MAGIC.len();
    while let Some(header) = data.get(at..at + 8) {
        let len = u64::from(u32::from_be_bytes([
            header[0], header[1], header[2], header[3],
        ]));
        match &header[4..8] {
            b"IDAT" => idat += len,
            b"IEND" => break,
            _ => {}
        }
        at = at.saturating_add(12).saturating_add(len as usize);
    }
    if idat.saturating_mul(DEFLATE_MAX_RATIO) + 64 < needed {
        return Err(format!(
            "PNG: the header claims {width}x{height} pixels ({needed} bytes of samples), but the \
             file holds {idat} bytes of image data, too few for that even at deflate's largest \
             expansion"
        ));
    }
    Ok(())
}

/// A PNG chunk's type and body.
pub(crate) type PngChunk<'a> = (&'a [u8; 4], &'a [u8]);

/// The chunks of a PNG up to IEND, having checked that they are whole, with correct CRCs.
pub(crate) fn png_chunks(data: &[u8]) -> Result<Vec<PngChunk<'_>>, String> {
    let mut chunks = Vec::new();
    let mut at = PNG_MAGIC.len();
    loop {
        let header = data.get(at..at + 8).ok_or_else(|| {
            format!(
                "PNG: truncated: no IEND chunk (the file ends at byte {})",
                data.len()
            )
        })?;
        let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let kind: &[u8; 4] = header[4..8].try_into().map_err(|_| "PNG: chunk type")?;
        let body_end = at.saturating_add(8).saturating_add(len);
        let crc = data.get(body_end..body_end.saturating_add(4)).ok_or_else(|| {
            format!(
                "PNG: truncated: the {} chunk at byte {at} runs past the end of the file ({} bytes)",
                String::from_utf8_lossy(kind),
                data.len()
            )
        })?;
        let want = u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]);
        if crc32fast::hash(&data[at + 4..body_end]) != want {
            return Err(format!(
                "PNG: CRC error in the {} chunk at byte {at}",
                String::from_utf8_lossy(kind)
            ));
        }
        chunks.push((kind, &data[at + 8..body_end]));
        if kind == b"IEND" {
            return Ok(chunks);
        }
        at = body_end + 4;
    }
}
