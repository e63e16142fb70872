//! A PNG decoded only as far as a window of it needs, for `decode_crop_or_pad` (W2 crops its
//! 960x720 photos and label maps to 512x512).
//!
//! PNG's row filters refer to the pixel to the left and the row above, never to the right or
//! below. So the window needs only the rows down to its last, and of each row only the bytes
//! up to its right edge: the rest of each row is inflated (the zlib stream runs through it) but
//! neither unfiltered nor copied, and the window's pixels go straight to their destination
//! (the batch row, usually). The png crate decodes whole rows only, so this path inflates with
//! `fdeflate` (the png crate's own inflater) and unfilters here.
//!
//! `decode_image` decodes whole images of these PNGs here too ([`Png8::decode`]): each row is
//! unfiltered straight from the inflated bytes into the output, with no row buffer between,
//! and Paeth rows take a branch-free predictor. Measured on W2's files, one thread: a 960x720
//! photo 6.68 -> 6.32 ms, a label map 1.39 -> 1.23 ms, against the png crate.
//!
//! It takes non-interlaced 8-bit PNGs whose samples need no conversion: grey, grey + alpha,
//! RGB or RGBA, without a tRNS chunk, decoded to as many channels as they store. Others go
//! through the png crate (`Png8::open` says `None`), as do headers it does not read (an IHDR
//! not 13 bytes long, a compression or filter method other than 0: the png crate says what
//! is wrong). Every chunk's CRC is checked up front, through IEND, and the zlib stream is
//! inflated to its end (the rows below a window unused) to check its Adler-32: a damaged or
//! truncated file fails as the whole decode would.

use stoker_core::storage::shared_pool;

use crate::codecs::decoded::{check_size, Decoded};
use crate::codecs::png_file::{check_png_data, png_chunks};

/// The PNG bytes of one image that the window decoder takes, and their layout.
pub(crate) struct Png8<'a> {
    pub width: usize,
    pub height: usize,
    pub channels: usize,
    /// The IDAT chunks' bodies, in order: one zlib stream.
    idat: Vec<&'a [u8]>,
}

/// How far back a deflate stream may refer.
const WINDOW: usize = 32 << 10;

impl<'a> Png8<'a> {
    /// `data` as a PNG this decoder takes, with `channels` wanted (0: as stored); `Ok(None)`
    /// for other PNGs (the caller decodes them whole). Fails on a damaged file.
    pub(crate) fn open(
        data: &'a [u8],
        channels: u8,
        max_pixels: u64,
    ) -> Result<Option<Self>, String> {
        // IHDR is always the first chunk: decide from it before reading (and CRC-checking)
        // the rest, which the png crate's path checks itself when this one declines.
        let ihdr = match data.get(8..16) {
            Some([0, 0, 0, 13, b'I', b'H', b'D', b'R']) => data.get(16..29).unwrap_or_default(),
            Some([_, _, _, _, b'I', b'H', b'D', b'R']) => return Ok(None), // malformed: the png crate says how
            _ => return Err("PNG: the first chunk is not IHDR".to_string()),
        };
        let &[w0, w1, w2, w3, h0, h1, h2, h3, depth, color, compression, filtering, interlace] =
            ihdr
        else {
            return Err("PNG: IHDR is too short".to_string());
        };
        if compression != 0 || filtering != 0 {
            return Ok(None); // not a valid PNG: the png crate says how
        }
        let width = u32::from_be_bytes([w0, w1, w2, w3]) as usize;
        let height = u32::from_be_bytes([h0, h1, h2, h3]) as usize;
        check_size(width, height, max_pixels)?;
        check_png_data(data)?;
        let stored = match color {
            0 => 1,
            4 => 2,
            2 => 3,
            6 => 4,
            _ => return Ok(None), // palette (expanded by the png crate) or invalid
        };
        let converts = channels != 0 && usize::from(channels) != stored;
        if depth != 8 || interlace != 0 || converts {
            return Ok(None);
        }
        let chunks = png_chunks(data)?;
        if chunks.iter().any(|&(kind, _)| kind == b"tRNS") {
            return Ok(None); // the png crate adds an alpha channel
        }
        let idat: Vec<&[u8]> = chunks
            .iter()
            .filter(|&&(kind, body)| kind == b"IDAT" && !body.is_empty())
            .map(|&(_, body)| body)
            .collect();
        Ok(Some(Png8 {
            width,
            height,
            channels: stored,
            idat,
        }))
    }

    /// Decodes rows `0..top + rows` and hands `each(y, pixels)` the pixels of columns
    /// `left..left + cols` of rows `top..top + rows` (`y` from 0).
    pub(crate) fn window(
        &self,
        [top, left, rows, cols]: [usize; 4],
        mut each: impl FnMut(usize, &[u8]),
    ) -> Result<(), String> {
        let c = self.channels;
        if top + rows > self.height || left + cols > self.width {
            return Err(format!(
                "PNG: window {rows}x{cols} at ({top}, {left}) is outside the {}x{} image",
                self.height, self.width
            ));
        }
        // Only the bytes up to the window's right edge are unfiltered.
        let used = (left + cols) * c;
        let (mut prev, mut cur) = (vec![0u8; used], vec![0u8; used]);
        self.inflate_rows(top + rows, |y, filter, raw| {
            unfilter(filter, c, &raw[..used], &prev, &mut cur)?;
            if y >= top {
                each(y - top, &cur[left * c..]);
            }
            std::mem::swap(&mut prev, &mut cur);
            Ok(())
        })
    }

    /// The whole image, in a pooled buffer.
    pub(crate) fn decode(&self) -> Result<Decoded, String> {
        let mut pixels = shared_pool().take(self.height * self.width * self.channels);
        self.decode_into(pixels.as_bytes_mut())?;
        Ok(Decoded {
            height: self.height,
            width: self.width,
            channels: self.channels,
            pixels,
        })
    }

    /// The whole image, `height` rows of `width * channels` samples, each row unfiltered
    /// straight into `out` (which must hold exactly that many bytes).
    fn decode_into(&self, out: &mut [u8]) -> Result<(), String> {
        let line = self.width * self.channels;
        if out.len() != line * self.height {
            return Err(format!(
                "PNG: {} bytes for a {}x{}x{} image",
                out.len(),
                self.height,
                self.width,
                self.channels
            ));
        }
        let above_first = vec![0u8; line];
        self.inflate_rows(self.height, |y, filter, raw| {
            let (done, rest) = out.split_at_mut(y * line);
            let prev = match y {
                0 => &above_first[..],
                _ => &done[(y - 1) * line..],
            };
            unfilter(filter, self.channels, raw, prev, &mut rest[..line])
        })
    }

    /// Inflates rows `0..rows` and hands `each(y, filter, raw)` each row's filter type and
    /// its filtered bytes, in order; `each`'s error (an unknown filter type) names the row.
    /// Then inflates the rest of the stream, unused, to check its Adler-32 (as zlib does for
    /// libpng and TensorFlow): a CRC guards each chunk as written, but data damaged before it
    /// was written (with a CRC to match) shows only there, and may lie in the rows handed out.
    fn inflate_rows(
        &self,
        rows: usize,
        mut each: impl FnMut(usize, u8, &[u8]) -> Result<(), u8>,
    ) -> Result<(), String> {
        let stride = 1 + self.width * self.channels;
        // Room for what the stream may refer back to or a row being filled, whichever is
        // more, and 64 KiB to inflate into.
        let mut inflated = vec![0u8; WINDOW.max(stride) + (64 << 10)];
        // Bytes inflated into `inflated`, and where the next row starts.
        let (mut end, mut row) = (0, 0);
        let mut inflater = fdeflate::Decompressor::new();
        let mut chunks = self.idat.iter().peekable();
        let mut input: &[u8] = &[];
        // Bytes inflated in all: the stream must hold every row the header claims.
        let mut total = 0usize;
        for y in 0..rows {
            while end - row < stride {
                if inflated.len() - end < (16 << 10) {
                    // Keep what the stream may still refer to, and the row being filled.
                    let keep = row.min(end.saturating_sub(WINDOW));
                    inflated.copy_within(keep..end, 0);
                    (end, row) = (end - keep, row - keep);
                }
                if input.is_empty() {
                    input = chunks
                        .next()
                        .ok_or_else(|| format!("PNG: image data ends at row {y}"))?;
                }
                let last = chunks.peek().is_none();
                let (read, wrote) = inflater
                    .read(input, &mut inflated, end, last)
                    .map_err(|e| format!("PNG: {e:?}"))?;
                input = &input[read..];
                end += wrote;
                total += wrote;
                if read == 0 && wrote == 0 {
                    return Err(format!("PNG: image data ends at row {y}"));
                }
            }
            each(y, inflated[row], &inflated[row + 1..row + stride])
                .map_err(|f| format!("PNG: unknown filter type {f} in row {y}"))?;
            row += stride;
        }
        while !inflater.is_done() {
            if inflated.len() - end < (16 << 10) {
                let keep = end.saturating_sub(WINDOW);
                inflated.copy_within(keep..end, 0);
                end -= keep;
            }
            if input.is_empty() {
                match chunks.next() {
                    Some(chunk) => input = chunk,
                    None => break,
                }
            }
            let last = chunks.peek().is_none();
            let (read, wrote) = inflater
                .read(input, &mut inflated, end, last)
                .map_err(|e| format!("PNG: damaged image data: {e:?}"))?;
            input = &input[read..];
            end += wrote;
            total += wrote;
            if total > stride * self.height {
                return Err(too_much(stride * self.height));
            }
            if read == 0 && wrote == 0 {
                break;
            }
        }
        if !inflater.is_done() {
            return Err("PNG: the image data ends before its zlib stream does".into());
        }
        if total > stride * self.height {
            return Err(too_much(stride * self.height));
        }
        if total < stride * self.height {
            return Err(format!("PNG: image data ends at row {}", total / stride));
        }
        Ok(())
    }
}

/// Checks that the image data of the PNG `data` (its IDAT chunks, in order) is one whole zlib
/// stream whose Adler-32 matches, and says how many bytes it inflates to: what the png crate's decode does not always check (it stops
/// once it has every row), while zlib checks it for libpng and TensorFlow. Inflates into a
/// small buffer it keeps reusing.
/// It stops, an error, past `max_out` bytes: the rows hold no more, and a small file could
/// otherwise make it inflate gigabytes.
pub(crate) fn check_zlib_stream(data: &[u8], max_out: usize) -> Result<usize, String> {
    let chunks = png_chunks(data)?;
    let mut idat = chunks
        .iter()
        .filter(|&&(kind, body)| kind == b"IDAT" && !body.is_empty())
        .map(|&(_, body)| body)
        .peekable();
    let mut inflated = vec![0u8; WINDOW + (64 << 10)];
    let (mut end, mut total) = (0, 0);
    let mut inflater = fdeflate::Decompressor::new();
    let mut input: &[u8] = &[];
    while !inflater.is_done() {
        if inflated.len() - end < (16 << 10) {
            let keep = end.saturating_sub(WINDOW);
            inflated.copy_within(keep..end, 0);
            end -= keep;
        }
        if input.is_empty() {
            match idat.next() {
                Some(chunk) => input = chunk,
                None => break,
            }
        }
        let last = idat.peek().is_none();
        let (read, wrote) = inflater
            .read(input, &mut inflated, end, last)
            .map_err(|e| format!("PNG: damaged image data: {e:?}"))?;
        input = &input[read..];
        end += wrote;
        total += wrote;
        if total > max_out {
            return Err(too_much(max_out));
        }
        if read == 0 && wrote == 0 {
            break;
        }
    }
    if !inflater.is_done() {
        return Err("PNG: the image data ends before its zlib stream does".into());
    }
    Ok(total)
}

fn too_much(rows: usize) -> String {
    format!("PNG: the image data inflates to more than the {rows} bytes its rows hold")
}

/// Undoes PNG filter `filter` on the row `raw` (whole pixels of `bpp` bytes) into `cur`, given
/// the row above, `prev` (zeros above the first row); `Err(filter)` for an unknown filter type.
fn unfilter(filter: u8, bpp: usize, raw: &[u8], prev: &[u8], cur: &mut [u8]) -> Result<(), u8> {
    match (filter, bpp) {
        (0, _) => cur.copy_from_slice(raw),
        // Up needs no pixel to the left: one straight (vectorised) pass.
        (2, _) => {
            for ((x, r), b) in cur.iter_mut().zip(raw).zip(prev) {
                *x = r.wrapping_add(*b);
            }
        }
        (1 | 3 | 4, 1) => unfilter_left::<1>(filter, raw, prev, cur),
        (1 | 3 | 4, 2) => unfilter_left::<2>(filter, raw, prev, cur),
        (1 | 3 | 4, 3) => unfilter_left::<3>(filter, raw, prev, cur),
        (1 | 3 | 4, _) => unfilter_left::<4>(filter, raw, prev, cur),
        (f, _) => return Err(f),
    }
    Ok(())
}

/// The filters that look left (1 Sub, 3 Average, 4 Paeth) for pixels of `N` bytes, a pixel at
/// a time, carrying the pixel to the left (`a`) and the one above that (`c`) along.
fn unfilter_left<const N: usize>(filter: u8, raw: &[u8], prev: &[u8], cur: &mut [u8]) {
    let pixels = cur
        .chunks_exact_mut(N)
        .zip(raw.chunks_exact(N))
        .zip(prev.chunks_exact(N));
    let (mut a, mut c) = ([0u8; N], [0u8; N]);
    match filter {
        1 => {
            for ((x, r), _) in pixels {
                for i in 0..N {
                    x[i] = r[i].wrapping_add(a[i]);
                    a[i] = x[i];
                }
            }
        }
        3 => {
            for ((x, r), b) in pixels {
                for i in 0..N {
                    let mean = (u16::from(a[i]) + u16::from(b[i])) / 2;
                    x[i] = r[i].wrapping_add(mean as u8);
                    a[i] = x[i];
                }
            }
        }
        _ => {
            for ((x, r), b) in pixels {
                for i in 0..N {
                    x[i] = r[i].wrapping_add(paeth(a[i], b[i], c[i]));
                    a[i] = x[i];
                    c[i] = b[i];
                }
            }
        }
    }
}

/// The PNG specification's Paeth predictor: of left `a`, above `b` and upper left `c`, the
/// one nearest to `p = a + b - c` (ties go to `a`, then `b`). This is the branch-free
/// formulation stb_image decodes with (two comparisons against `3c - (a + b)`, which compile
/// to conditional moves), the one the png crate uses on x86-64 too; it equals the
/// specification's form for all 2^24 inputs (tested). W2's label maps are 40 % Paeth rows.
#[inline(always)]
fn paeth(a: u8, b: u8, c: u8) -> u8 {
    let (a, b, c) = (i16::from(a), i16::from(b), i16::from(c));
    let t = 3 * c - (a + b);
    let (lo, hi) = (a.min(b), a.max(b));
    let nearer = if hi <= t { lo } else { c };
    (if t <= lo { hi } else { nearer }) as u8
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A `width` x `height` PNG of 8-bit samples in colour type `color`, from `raw` rows (each
    /// a filter byte then the pixels), its image data split into IDAT chunks of `split` bytes.
    pub(crate) fn png(width: u32, height: u32, color: u8, raw: &[u8], split: usize) -> Vec<u8> {
        png_from_stream(width, height, color, &fdeflate::compress_to_vec(raw), split)
    }

    /// Rows of pseudo-random pixels, each with filter `filters[y % len]`.
    pub(crate) fn raw_rows(width: usize, height: usize, bpp: usize, filters: &[u8]) -> Vec<u8> {
        let mut state = 12345u32;
        let mut out = Vec::new();
        for y in 0..height {
            out.push(filters[y % filters.len()]);
            for _ in 0..width * bpp {
                state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
                // Smooth-ish values, so the filters' sums wrap both ways.
                out.push((state >> 24) as u8);
            }
        }
        out
    }

    /// The png crate's decode of the whole image.
    pub(crate) fn reference(data: &[u8]) -> Vec<u8> {
        let mut reader = png::Decoder::new(std::io::Cursor::new(data))
            .read_info()
            .unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        buf.truncate(info.buffer_size());
        buf
    }

    #[test]
    fn windows_and_whole_decodes_equal_the_png_crates_for_every_filter_and_pixel_size() {
        let (w, h) = (37usize, 23usize);
        for (color, bpp) in [(0u8, 1usize), (4, 2), (2, 3), (6, 4)] {
            let raw = raw_rows(w, h, bpp, &[0, 1, 2, 3, 4, 4, 3]);
            for split in [7, 100_000] {
                let data = png(w as u32, h as u32, color, &raw, split);
                let whole = reference(&data);
                let img = Png8::open(&data, 0, 1 << 20).unwrap().unwrap();
                assert_eq!((img.width, img.height, img.channels), (w, h, bpp));
                let decoded = img.decode().unwrap();
                assert_eq!((decoded.height, decoded.width), (h, w));
                assert_eq!(
                    decoded.pixels.as_bytes(),
                    &whole[..],
                    "colour {color} split {split}"
                );
                for win in [[0, 0, h, w], [5, 3, 11, 20], [22, 36, 1, 1], [0, 30, 23, 7]] {
                    let [top, left, rows, cols] = win;
                    let mut got = Vec::new();
                    img.window(win, |y, px| {
                        assert_eq!(y, got.len() / (cols * bpp));
                        got.extend_from_slice(&px[..cols * bpp]);
                    })
                    .unwrap();
                    let want: Vec<u8> = (top..top + rows)
                        .flat_map(|y| {
                            let start = (y * w + left) * bpp;
                            whole[start..start + cols * bpp].to_vec()
                        })
                        .collect();
                    assert_eq!(got, want, "colour {color} split {split} window {win:?}");
                }
            }
        }
    }

    #[test]
    fn damaged_image_data_with_intact_crcs_is_an_error_or_an_image_never_a_panic() {
        // The CRCs guard against damage in transit; a file written damaged (CRCs made over
        // the damaged bytes) reaches the inflater and the unfilter.
        let raw = raw_rows(19, 11, 3, &[0, 1, 2, 3, 4]);
        let good = png(19, 11, 2, &raw, 64);
        let mut state = 7u32;
        let (mut errors, mut images) = (0, 0);
        for _ in 0..2000 {
            let mut data = good.clone();
            for _ in 0..3 {
                state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
                let at = 33 + (state >> 8) as usize % (data.len() - 45);
                data[at] ^= 1 << (state % 8);
            }
            let data = with_fixed_crcs(&data);
            let Ok(Some(img)) = Png8::open(&data, 0, 1 << 20) else {
                continue;
            };
            match img.decode() {
                Ok(d) => {
                    // Damage the stream's checksum does not see changed no pixel.
                    assert_eq!(d.pixels.as_bytes(), reference(&good));
                    images += 1;
                }
                Err(e) => {
                    assert!(e.starts_with("PNG: "), "{e}");
                    errors += 1;
                }
            }
            let _ = img.window([2, 3, 5, 7], |_, px| assert_eq!(px.len(), 21));
        }
        assert!(errors > 100, "{errors} errors, {images} images");
    }

    #[test]
    fn data_damaged_before_its_crcs_were_made_fails_the_streams_checksum_on_every_path() {
        // A byte of row 4 changed before compression, the zlib stream keeping the checksum of
        // the original rows: the inflater sees a valid stream, only its Adler-32 tells.
        let (w, h) = (19usize, 11usize);
        let raw = raw_rows(w, h, 3, &[0, 1, 2, 3, 4]);
        let mut damaged = raw.clone();
        damaged[4 * (1 + w * 3) + 7] ^= 0x40;
        let good = fdeflate::compress_to_vec(&raw);
        let mut stream = fdeflate::compress_to_vec(&damaged);
        let n = stream.len();
        stream[n - 4..].copy_from_slice(&good[good.len() - 4..]);
        let data = png_from_stream(w as u32, h as u32, 2, &stream, 40);
        let img = Png8::open(&data, 0, 1 << 20).unwrap().unwrap();
        let err = img.decode().map(|_| ()).unwrap_err();
        assert!(err.contains("WrongChecksum"), "{err}");
        // A window over the damaged row, and one above it: the stream fails either way.
        for window in [[2, 3, 5, 7], [0, 0, 2, w]] {
            let err = img.window(window, |_, _| {}).unwrap_err();
            assert!(err.contains("WrongChecksum"), "{window:?}: {err}");
        }
        // The intact file decodes on every path.
        let intact = png_from_stream(w as u32, h as u32, 2, &good, 40);
        let img = Png8::open(&intact, 0, 1 << 20).unwrap().unwrap();
        assert_eq!(img.decode().unwrap().pixels.as_bytes(), reference(&intact));
        img.window([0, 0, 2, w], |_, _| {}).unwrap();
    }

    /// A PNG whose image data is the zlib stream `stream`, split into IDAT chunks of `split`.
    fn png_from_stream(width: u32, height: u32, color: u8, stream: &[u8], split: usize) -> Vec<u8> {
        fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], body: &[u8]) {
            out.extend_from_slice(&(body.len() as u32).to_be_bytes());
            let start = out.len();
            out.extend_from_slice(kind);
            out.extend_from_slice(body);
            let crc = crc32fast::hash(&out[start..]);
            out.extend_from_slice(&crc.to_be_bytes());
        }
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut ihdr = width.to_be_bytes().to_vec();
        ihdr.extend_from_slice(&height.to_be_bytes());
        ihdr.extend_from_slice(&[8, color, 0, 0, 0]);
        chunk(&mut out, b"IHDR", &ihdr);
        for part in stream.chunks(split) {
            chunk(&mut out, b"IDAT", part);
        }
        chunk(&mut out, b"IEND", &[]);
        out
    }

    /// `data` with every chunk's CRC made over its current bytes.
    fn with_fixed_crcs(data: &[u8]) -> Vec<u8> {
        let mut out = data.to_vec();
        let mut at = 8;
        while at + 12 <= out.len() {
            let len = u32::from_be_bytes([out[at], out[at + 1], out[at + 2], out[at + 3]]) as usize;
            let Some(end) = at.checked_add(8 + len).filter(|&e| e + 4 <= out.len()) else {
                break;
            };
            let crc = crc32fast::hash(&out[at + 4..end]);
            out[end..end + 4].copy_from_slice(&crc.to_be_bytes());
            at = end + 4;
        }
        out
    }

    #[test]
    fn paeth_equals_the_specification_for_every_input() {
        fn spec(a: u8, b: u8, c: u8) -> u8 {
            let (ia, ib, ic) = (i16::from(a), i16::from(b), i16::from(c));
            let p = ia + ib - ic;
            let (pa, pb, pc) = ((p - ia).abs(), (p - ib).abs(), (p - ic).abs());
            if pa <= pb && pa <= pc {
                a
            } else if pb <= pc {
                b
            } else {
                c
            }
        }
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                for c in 0..=255u8 {
                    assert_eq!(paeth(a, b, c), spec(a, b, c), "a={a} b={b} c={c}");
                }
            }
        }
    }

    #[test]
    fn other_pngs_are_left_to_the_png_crate_and_bad_data_is_an_error() {
        let raw = raw_rows(8, 4, 3, &[4]);
        let rgb = png(8, 4, 2, &raw, 1000);
        assert!(Png8::open(&rgb, 3, 1 << 20).unwrap().is_some());
        // Channel conversions and palettes are not this decoder's.
        assert!(Png8::open(&rgb, 4, 1 << 20).unwrap().is_none());
        let palette = png(8, 4, 3, &raw_rows(8, 4, 1, &[0]), 1000);
        assert!(Png8::open(&palette, 0, 1 << 20).unwrap().is_none());
        // A damaged file is an error, not a fallback.
        let mut damaged = rgb.clone();
        damaged[29] ^= 1; // IHDR's CRC
        let err = Png8::open(&damaged, 0, 1 << 20).err().unwrap();
        assert!(err.contains("CRC error in the IHDR chunk"), "{err}");
        // An IHDR this decoder does not know how to read (a compression or filter method
        // other than 0, a length other than 13) is left to the png crate, which says why.
        for (at, value) in [(26, 1), (27, 1), (11, 14)] {
            let mut odd = rgb.clone();
            odd[at] = value;
            assert!(Png8::open(&odd, 0, 1 << 20).unwrap().is_none(), "byte {at}");
        }
        // An oversized header is refused before anything is decoded.
        let err = Png8::open(&rgb, 0, 31).err().unwrap();
        assert!(err.contains("over the limit"), "{err}");
        // An unknown filter type, with intact CRCs.
        let mut bad = raw.clone();
        bad[2 * (1 + 8 * 3)] = 9;
        let data = png(8, 4, 2, &bad, 1000);
        let img = Png8::open(&data, 0, 1 << 20).unwrap().unwrap();
        let err = img.window([0, 0, 4, 8], |_, _| {}).unwrap_err();
        assert!(err.contains("unknown filter type 9 in row 2"), "{err}");
        let err = img.decode().err().unwrap();
        assert!(err.contains("unknown filter type 9 in row 2"), "{err}");
        // Image data that ends too soon.
        let short = png(8, 4, 2, &raw[..2 * (1 + 8 * 3)], 1000);
        let img = Png8::open(&short, 0, 1 << 20).unwrap().unwrap();
        let err = img.window([0, 0, 4, 8], |_, _| {}).unwrap_err();
        assert!(err.contains("ends at row 2"), "{err}");
        let err = img.decode().err().unwrap();
        assert!(err.contains("ends at row 2"), "{err}");
        // ... and so does a window above the missing rows, as the whole decode does.
        let err = img.window([0, 0, 2, 8], |_, _| {}).unwrap_err();
        assert!(err.contains("ends at row 2"), "{err}");
    }
}
