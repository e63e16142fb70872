//! Charts as inline SVG: stacked bars per step, lines over time, and a timeline strip.

use std::fmt::Write;

use crate::page::esc;
use crate::PALETTE;

/// A round axis maximum at or above `v`.
fn nice_max(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

/// Round values from `min` to `max` for an axis's ticks: the multiples of a step of 1, 2, 2.5
/// or 5 × 10^k, about `n` intervals' worth.
fn ticks(min: f64, max: f64, n: usize) -> Vec<f64> {
    let span = max - min;
    if !(span.is_finite() && span > 0.0) {
        return vec![min];
    }
    let step = nice_max(span / n.max(1) as f64);
    let first = (min / step).ceil();
    (0..)
        .map(|k| (first + f64::from(k)) * step)
        .take_while(|v| *v <= max + step * 1e-9)
        .collect()
}

/// A tick's value as written: exactly (ticks are round numbers), without trailing zeros.
fn tick_label(v: f64) -> String {
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// The plot area inside an SVG of `w` × `h`.
struct Frame {
    w: f64,
    h: f64,
    left: f64,
    bottom: f64,
    top: f64,
    right: f64,
}

impl Frame {
    fn new(h: f64) -> Frame {
        Frame {
            w: 900.0,
            h,
            left: 64.0,
            bottom: 36.0,
            top: 12.0,
            right: 16.0,
        }
    }
    fn x(&self, f: f64) -> f64 {
        self.left + f * (self.w - self.left - self.right)
    }
    fn y(&self, f: f64) -> f64 {
        self.h - self.bottom - f * (self.h - self.bottom - self.top)
    }
    fn svg_open(&self) -> String {
        format!(
            "<svg viewBox=\"0 0 {} {}\" width=\"100%\" role=\"img\" \
             xmlns=\"http://www.w3.org/2000/svg\">",
            self.w, self.h
        )
    }
    /// Ticks at round values, each where its value lies.
    fn x_ticks(&self, s: &mut String, x_min: f64, x_max: f64, x_label: &str) {
        let span = x_max - x_min;
        for v in ticks(x_min, x_max, 4) {
            let f = if span > 0.0 { (v - x_min) / span } else { 0.0 };
            let _ = write!(
                s,
                "<text x=\"{x}\" y=\"{y}\" class=\"tick\" text-anchor=\"middle\">{v}</text>",
                x = self.x(f),
                y = self.h - self.bottom + 16.0,
                v = tick_label(v)
            );
        }
        self.x_label(s, x_label);
    }
    fn x_label(&self, s: &mut String, x_label: &str) {
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{}\" class=\"label\" text-anchor=\"middle\">{}</text>",
            self.x(0.5),
            self.h - 4.0,
            esc(x_label)
        );
    }
    /// The SVG opening, the y axis's grid and labels (the caller draws the x axis).
    fn open(&self, y_max: f64, y_label: &str) -> String {
        let mut s = self.svg_open();
        for i in 0..=4 {
            let f = i as f64 / 4.0;
            let _ = write!(
                s,
                "<line x1=\"{l}\" x2=\"{r}\" y1=\"{y}\" y2=\"{y}\" class=\"grid\"/>\
                 <text x=\"{tx}\" y=\"{ty}\" class=\"tick\" text-anchor=\"end\">{v}</text>",
                l = self.left,
                r = self.w - self.right,
                y = self.y(f),
                tx = self.left - 6.0,
                ty = self.y(f) + 4.0,
                v = tick_label(y_max * f)
            );
        }
        let _ = write!(
            s,
            "<text x=\"14\" y=\"{}\" class=\"label\" transform=\"rotate(-90 14 {})\" \
             text-anchor=\"middle\">{}</text>",
            self.h / 2.0,
            self.h / 2.0,
            esc(y_label),
        );
        s
    }
}

fn legend<'a>(items: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut s = String::from("<p class=\"legend\">");
    for (label, color) in items {
        let _ = write!(
            s,
            "<span style=\"background:{color}\"></span>{} ",
            esc(label)
        );
    }
    s.push_str("</p>");
    s
}

/// One series of a stacked bar chart: a value per step.
pub struct Series<'a> {
    pub label: &'a str,
    pub color: &'a str,
    pub values: &'a [f64],
}

/// Bars per step, each stacking `series` from the bottom up (ms). Many steps are drawn in
/// buckets, each bar the mean of its steps.
pub fn stacked_bars(title: &str, series: &[Series<'_>]) -> String {
    let n = series.iter().map(|s| s.values.len()).min().unwrap_or(0);
    if n == 0 {
        return String::new();
    }
    let buckets = n.min(300);
    let per = n.div_ceil(buckets);
    let bars: Vec<Vec<f64>> = (0..n)
        .step_by(per)
        .map(|i| {
            let j = (i + per).min(n);
            let k = (j - i) as f64;
            series
                .iter()
                .map(|s| s.values[i..j].iter().sum::<f64>() / k)
                .collect()
        })
        .collect();
    let y_max = nice_max(
        bars.iter()
            .map(|b| b.iter().sum::<f64>())
            .fold(0.0, f64::max),
    );
    let f = Frame::new(260.0);
    let x_label = if per > 1 {
        format!("step (bars of {per} steps, mean)")
    } else {
        "step".into()
    };
    let bw = (f.w - f.left - f.right) / bars.len() as f64;
    let mut s = f.open(y_max, "ms");
    if bars.len() <= 12 {
        // Few bars: number each one under its centre.
        for i in 0..bars.len() {
            let _ = write!(
                s,
                "<text x=\"{:.1}\" y=\"{}\" class=\"tick\" text-anchor=\"middle\">{}</text>",
                f.left + (i as f64 + 0.45) * bw,
                f.h - f.bottom + 16.0,
                i + 1
            );
        }
        f.x_label(&mut s, &x_label);
    } else {
        f.x_ticks(&mut s, 0.0, n as f64, &x_label);
    }
    for (i, bar) in bars.iter().enumerate() {
        let x = f.left + i as f64 * bw;
        let mut below = 0.0;
        for (v, ser) in bar.iter().zip(series) {
            let (y0, y1) = (f.y(below / y_max), f.y((below + v) / y_max));
            below += v;
            if y0 - y1 > 0.0 {
                let _ = write!(
                    s,
                    "<rect x=\"{x:.2}\" y=\"{y1:.2}\" width=\"{w:.2}\" height=\"{h:.2}\" \
                     fill=\"{c}\"/>",
                    w = (bw * 0.9).max(0.5),
                    h = y0 - y1,
                    c = ser.color
                );
            }
        }
    }
    s.push_str("</svg>");
    format!(
        "<h2>{}</h2>{}{s}",
        esc(title),
        legend(series.iter().map(|s| (s.label, s.color)))
    )
}

/// Lines over time (seconds), each `(name, points)`; `y_max` fixed or found.
pub fn line_chart(
    title: &str,
    y_label: &str,
    lines: &[(String, Vec<(f64, f64)>)],
    y_max: Option<f64>,
) -> String {
    let x_max = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(x, _)| *x))
        .fold(0.0, f64::max);
    if lines.is_empty() || x_max <= 0.0 {
        return String::new();
    }
    let y_max = y_max.unwrap_or_else(|| {
        nice_max(
            lines
                .iter()
                .flat_map(|(_, p)| p.iter().map(|(_, y)| *y))
                .fold(0.0, f64::max),
        )
    });
    let f = Frame::new(260.0);
    let mut s = f.open(y_max, y_label);
    f.x_ticks(&mut s, 0.0, x_max, "seconds");
    for (i, (_, points)) in lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let path: Vec<String> = points
            .iter()
            .map(|(x, y)| {
                format!(
                    "{:.1},{:.1}",
                    f.x(x / x_max),
                    f.y((y / y_max).clamp(0.0, 1.0))
                )
            })
            .collect();
        let _ = write!(
            s,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"1.6\"/>",
            path.join(" ")
        );
    }
    s.push_str("</svg>");
    let names = lines
        .iter()
        .enumerate()
        .map(|(i, (name, _))| (name.as_str(), PALETTE[i % PALETTE.len()]));
    format!("<h2>{}</h2>{}{s}", esc(title), legend(names))
}

/// One lane of a timeline strip: intervals in the strip's time unit.
pub struct Lane<'a> {
    pub label: &'a str,
    pub color: &'a str,
    pub spans: &'a [(f64, f64)],
}

/// Lanes of intervals over [t0, t1] (x axis in `unit`). Intervals closer than a pixel are
/// merged, so a lane of a million kernels is still a few hundred rectangles.
pub fn timeline_strip(title: &str, unit: &str, t0: f64, t1: f64, lanes: &[Lane<'_>]) -> String {
    if lanes.is_empty() || t1 <= t0 {
        return String::new();
    }
    let lane_h = 22.0;
    let mut f = Frame::new(lanes.len() as f64 * lane_h + 48.0);
    f.left = 150.0;
    let mut s = f.svg_open();
    let px = (t1 - t0) / (f.w - f.left - f.right);
    let xs = |t: f64| f.x(((t - t0) / (t1 - t0)).clamp(0.0, 1.0));
    for (i, lane) in lanes.iter().enumerate() {
        let y = f.top + i as f64 * lane_h;
        let _ = write!(
            s,
            "<line x1=\"{l}\" x2=\"{r}\" y1=\"{yl}\" y2=\"{yl}\" class=\"grid\"/>\
             <text x=\"{tx}\" y=\"{ty}\" class=\"tick\" text-anchor=\"end\">{label}</text>",
            l = f.left,
            r = f.w - f.right,
            yl = y + lane_h,
            tx = f.left - 6.0,
            ty = y + lane_h / 2.0 + 4.0,
            label = esc(lane.label)
        );
        let mut merged: Option<(f64, f64)> = None;
        let draw = |s: &mut String, (a, b): (f64, f64)| {
            let (x0, x1) = (xs(a), xs(b));
            let _ = write!(
                s,
                "<rect x=\"{x0:.2}\" y=\"{y:.1}\" width=\"{w:.2}\" height=\"{h:.1}\" fill=\"{c}\"/>",
                y = y + 3.0,
                w = (x1 - x0).max(0.6),
                h = lane_h - 6.0,
                c = lane.color
            );
        };
        for &(a, b) in lane.spans {
            let (a, b) = (a.max(t0), b.min(t1));
            if b < a {
                continue;
            }
            merged = match merged {
                Some((ma, mb)) if a <= mb + px => Some((ma, mb.max(b))),
                Some(m) => {
                    draw(&mut s, m);
                    Some((a, b))
                }
                None => Some((a, b)),
            };
        }
        if let Some(m) = merged {
            draw(&mut s, m);
        }
    }
    f.x_ticks(&mut s, 0.0, t1 - t0, unit);
    s.push_str("</svg>");
    format!("<h2>{}</h2>{s}", esc(title))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacked_bars_draws_a_rect_per_nonzero_part() {
        let a = [1.0, 2.0];
        let b = [3.0, 0.0];
        let html = stacked_bars(
            "t",
            &[
                Series {
                    label: "a",
                    color: "#111111",
                    values: &a,
                },
                Series {
                    label: "b",
                    color: "#222222",
                    values: &b,
                },
            ],
        );
        assert_eq!(html.matches("fill=\"#111111\"").count(), 2);
        assert_eq!(html.matches("fill=\"#222222\"").count(), 1);
    }

    #[test]
    fn timeline_strip_merges_spans_closer_than_a_pixel() {
        // 10,000 spans 1 apart over 0..20,000: a pixel is about 29 units, so they merge.
        let spans: Vec<(f64, f64)> = (0..10_000)
            .map(|i| (2.0 * i as f64, 2.0 * i as f64 + 1.0))
            .collect();
        let far = [(0.0, 1.0), (10_000.0, 10_001.0)];
        let html = timeline_strip(
            "t",
            "µs",
            0.0,
            20_000.0,
            &[
                Lane {
                    label: "dense",
                    color: "#111111",
                    spans: &spans,
                },
                Lane {
                    label: "sparse",
                    color: "#222222",
                    spans: &far,
                },
            ],
        );
        assert_eq!(html.matches("fill=\"#111111\"").count(), 1);
        assert_eq!(html.matches("fill=\"#222222\"").count(), 2);
    }

    #[test]
    fn ticks_are_round_numbers_where_their_values_lie() {
        assert_eq!(ticks(0.0, 5.37, 4), [0.0, 2.0, 4.0]);
        assert_eq!(ticks(0.0, 30.0, 4), [0.0, 10.0, 20.0, 30.0]);
        assert_eq!(ticks(0.0, 0.9, 4), [0.0, 0.25, 0.5, 0.75]);
        assert_eq!(ticks(3.0, 3.0, 4), [3.0]);
        assert_eq!(tick_label(0.625), "0.625");
        assert_eq!(tick_label(0.1 + 0.2), "0.3");
        assert_eq!(tick_label(2500.0), "2500");
        let f = Frame::new(100.0);
        let mut s = String::new();
        f.x_ticks(&mut s, 0.0, 5.37, "seconds");
        let labels: Vec<&str> = s
            .split("text-anchor=\"middle\">")
            .skip(1)
            .map(|t| t.split('<').next().unwrap_or(""))
            .collect();
        assert_eq!(labels, ["0", "2", "4", "seconds"]);
        // The tick for 4 lies at 4/5.37 of the axis.
        let at = f.x(4.0 / 5.37);
        assert!(s.contains(&format!("<text x=\"{at}\"")), "{s}");
    }
}
