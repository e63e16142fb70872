//! The HTML report of a pipeline run (`stoker bench --report`, `Dataset.report`): one
//! self-contained file (inline CSS and SVG, no script, nothing fetched) with the step-time
//! graph, throughput and buffer fill over time, the per-stage table and the verdict.

use std::fmt::Write;

use crate::bench_run::BenchResult;

/// A training loop's steps, as measured by the step timer (milliseconds per step).
#[derive(Clone, Debug, Default)]
pub struct Steps {
    pub input_ms: Vec<f64>,
    pub compute_ms: Vec<f64>,
    /// The step timer's verdict line.
    pub verdict: String,
}

const INPUT: &str = "#e8710a";
const REST: &str = "#1a73e8";
const PALETTE: [&str; 8] = [
    "#1a73e8", "#e8710a", "#188038", "#d93025", "#9334e6", "#12b5cb", "#f9ab00", "#5f6368",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

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

struct Frame {
    w: f64,
    h: f64,
    left: f64,
    bottom: f64,
    top: f64,
    right: f64,
}

impl Frame {
    fn new() -> Frame {
        Frame {
            w: 900.0,
            h: 260.0,
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
    /// The SVG opening, axes, grid and labels.
    fn open(&self, y_max: f64, y_label: &str, x_max: f64, x_label: &str) -> String {
        let mut s = format!(
            "<svg viewBox=\"0 0 {} {}\" width=\"100%\" role=\"img\" \
             xmlns=\"http://www.w3.org/2000/svg\">",
            self.w, self.h
        );
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
                v = fmt_num(y_max * f)
            );
            let _ = write!(
                s,
                "<text x=\"{x}\" y=\"{y}\" class=\"tick\" text-anchor=\"middle\">{v}</text>",
                x = self.x(f),
                y = self.h - self.bottom + 16.0,
                v = if x_max >= 20.0 {
                    format!("{:.0}", x_max * f)
                } else {
                    fmt_num(x_max * f)
                }
            );
        }
        let _ = write!(
            s,
            "<text x=\"14\" y=\"{}\" class=\"label\" transform=\"rotate(-90 14 {})\" \
             text-anchor=\"middle\">{}</text>\
             <text x=\"{}\" y=\"{}\" class=\"label\" text-anchor=\"middle\">{}</text>",
            self.h / 2.0,
            self.h / 2.0,
            esc(y_label),
            self.x(0.5),
            self.h - 4.0,
            esc(x_label)
        );
        s
    }
}

fn fmt_num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Stacked bars per step: input wait under the rest. Many steps are drawn in buckets (each
/// bar the mean of its steps).
fn step_chart(input: &[f64], rest: &[f64], title: &str) -> String {
    let n = input.len().min(rest.len());
    if n == 0 {
        return String::new();
    }
    let buckets = n.min(300);
    let per = n.div_ceil(buckets);
    let bars: Vec<(f64, f64)> = (0..n)
        .step_by(per)
        .map(|i| {
            let j = (i + per).min(n);
            let k = (j - i) as f64;
            (
                input[i..j].iter().sum::<f64>() / k,
                rest[i..j].iter().sum::<f64>() / k,
            )
        })
        .collect();
    let y_max = nice_max(bars.iter().map(|(a, b)| a + b).fold(0.0, f64::max));
    let f = Frame::new();
    let x_label = if per > 1 {
        format!("step (bars of {per} steps, mean)")
    } else {
        "step".into()
    };
    let mut s = f.open(y_max, "ms", n as f64, &x_label);
    let bw = (f.w - f.left - f.right) / bars.len() as f64;
    for (i, (a, b)) in bars.iter().enumerate() {
        let x = f.left + i as f64 * bw;
        let (ya, yb) = (f.y(a / y_max), f.y((a + b) / y_max));
        let _ = write!(
            s,
            "<rect x=\"{x:.2}\" y=\"{ya:.2}\" width=\"{w:.2}\" height=\"{ha:.2}\" fill=\"{INPUT}\"/>\
             <rect x=\"{x:.2}\" y=\"{yb:.2}\" width=\"{w:.2}\" height=\"{hb:.2}\" fill=\"{REST}\"/>",
            w = (bw * 0.9).max(0.5),
            ha = f.y(0.0) - ya,
            hb = ya - yb
        );
    }
    s.push_str("</svg>");
    format!(
        "<h2>{}</h2><p class=\"legend\"><span style=\"background:{INPUT}\"></span>waiting for \
         input <span style=\"background:{REST}\"></span>rest of the step</p>{s}",
        esc(title)
    )
}

/// Lines over time.
fn line_chart(
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
    let f = Frame::new();
    let mut s = f.open(y_max, y_label, x_max, "seconds");
    let mut legend = String::new();
    for (i, (name, points)) in lines.iter().enumerate() {
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
        let _ = write!(
            legend,
            "<span style=\"background:{color}\"></span>{} ",
            esc(name)
        );
    }
    s.push_str("</svg>");
    format!("<h2>{}</h2><p class=\"legend\">{legend}</p>{s}", esc(title))
}

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:960px;\
color:#202124}h1{font-size:22px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 6px}\
.sub{color:#5f6368}.verdict{background:#f1f3f4;border-left:4px solid #1a73e8;padding:10px 14px}\
table{border-collapse:collapse;width:100%;font-size:13px}td,th{padding:4px 6px;\
border-bottom:1px solid #e0e0e0;text-align:right}td:first-child,th:first-child{text-align:left;\
max-width:420px;overflow-wrap:anywhere}.bar{display:inline-block;height:9px;background:#1a73e8;\
vertical-align:middle}.grid{stroke:#e0e0e0}.tick{font-size:11px;fill:#5f6368}.label{font-size:12px;\
fill:#3c4043}.legend span{display:inline-block;width:11px;height:11px;margin:0 4px 0 12px;\
vertical-align:-1px}li{margin-bottom:8px}.ev{color:#5f6368;font-size:13px}";

/// The report of `run` (of the spec or pipeline `title`), with a training loop's `steps`
/// when there are some.
pub fn render(title: &str, run: &BenchResult, steps: Option<&Steps>) -> String {
    let v = &run.verdict;
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>stoker report: {t}</title><style>{STYLE}</style></head><body>\
         <h1>stoker report</h1><p class=\"sub\">{t} · {ex:.0} examples/s ({el:.1} elements/s) \
         over {s:.2} s on a budget of {th} threads{ended}</p>",
        t = esc(title),
        ex = run.examples_per_s,
        el = run.elements_per_s,
        s = run.seconds,
        th = run.threads,
        ended = if run.ended {
            " · the dataset ended"
        } else {
            ""
        }
    );

    // The verdict.
    let _ = write!(h, "<h2>Verdict</h2><div class=\"verdict\">");
    if let Some(st) = steps {
        let _ = write!(h, "<p><b>Training loop:</b> {}</p>", esc(&st.verdict));
    }
    let _ = write!(h, "<p><b>Pipeline:</b> {}</p>", esc(&v.summary));
    if v.recommendations.is_empty() {
        h.push_str("<p>No change is predicted to gain 5 % or more.</p>");
    } else {
        h.push_str("<ol>");
        for r in &v.recommendations {
            let g = r
                .predicted_gain_percent
                .map(|g| format!("predicted {g:+.0} %"))
                .unwrap_or_else(|| "gain not predictable from the pipeline alone".into());
            let _ = write!(
                h,
                "<li><b>{}</b> [{g}]<br><span class=\"ev\">because {}</span></li>",
                esc(&r.action),
                esc(&r.evidence)
            );
        }
        h.push_str("</ol>");
    }
    h.push_str("</div>");

    // Step time: the training loop's, else the time the consumer waited for each element.
    match steps {
        Some(st) => h.push_str(&step_chart(
            &st.input_ms,
            &st.compute_ms,
            "Step time (training loop)",
        )),
        None => {
            let wait: Vec<f64> = run.series.wait_ms.iter().map(|w| f64::from(*w)).collect();
            let rest = vec![0.0; wait.len()];
            h.push_str(&step_chart(
                &wait,
                &rest,
                "Time to get each element (the pipeline alone: every step is all input)",
            ));
        }
    }

    // Throughput over time.
    let samples = &run.series.samples;
    let rate: Vec<(f64, f64)> = samples
        .windows(2)
        .filter(|w| w[1].t > w[0].t)
        .map(|w| {
            (
                w[1].t,
                (w[1].elements - w[0].elements) as f64 / (w[1].t - w[0].t),
            )
        })
        .collect();
    h.push_str(&line_chart(
        "Throughput",
        "elements/s",
        &[("elements per second".into(), rate)],
        None,
    ));

    // Buffer fill over time.
    let fills: Vec<(String, Vec<(f64, f64)>)> = run
        .series
        .buffers
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let points = samples
                .iter()
                .map(|s| (s.t, f64::from(s.fill.get(i).copied().unwrap_or(0.0))))
                .collect();
            (name.clone(), points)
        })
        .collect();
    h.push_str(&line_chart(
        "Buffer fill (share of capacity)",
        "fill",
        &fills,
        Some(1.0),
    ));

    // Stages.
    h.push_str(
        "<h2>Stages (sink first)</h2><table><tr><th>stage</th><th>elements</th>\
         <th>ms / element</th><th>capacity el/s</th><th>busy s</th><th>threads</th>\
         <th>Python s</th><th>share of its threads' time</th></tr>",
    );
    for s in v.stages.iter().filter(|s| s.elements > 0 || s.busy_s > 0.0) {
        let g = &v.groups[s.group];
        let share = s.busy_s / (v.wall_s.max(1e-9) * g.threads as f64);
        let marker = if Some(&s.name) == v.bottleneck.as_ref() {
            " ◀ bottleneck"
        } else {
            ""
        };
        let _ = write!(
            h,
            "<tr><td>{}{marker}</td><td>{}</td><td>{:.3}</td><td>{}</td><td>{:.2}</td><td>{}</td>\
             <td>{:.2}</td><td><span class=\"bar\" style=\"width:{:.0}px\"></span> {:.0} %</td></tr>",
            esc(&s.name),
            s.elements,
            s.ms_per_element,
            if s.capacity_per_s.is_finite() {
                format!("{:.0}", s.capacity_per_s)
            } else {
                "—".into()
            },
            s.busy_s,
            g.threads,
            s.python_s,
            (share.clamp(0.0, 1.0) * 80.0),
            share * 100.0
        );
    }
    h.push_str("</table>");
    if !v.ops.is_empty() {
        h.push_str(
            "<h2>Ops inside maps</h2><table><tr><th>op</th><th>calls</th><th>ms / call</th>\
             <th>busy s</th><th>share of all busy time</th></tr>",
        );
        for o in &v.ops {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{:.3}</td><td>{:.2}</td><td><span class=\"bar\" \
                 style=\"width:{:.0}px\"></span> {:.0} %</td></tr>",
                esc(&o.name),
                o.calls,
                o.busy_s * 1e3 / o.calls.max(1) as f64,
                o.busy_s,
                o.share.clamp(0.0, 1.0) * 80.0,
                o.share * 100.0
            );
        }
        h.push_str("</table>");
    }
    let _ = write!(
        h,
        "<p class=\"sub\">CPU budget used: {:.0} %; Python held the GIL {:.0} % of the run. \
         Made by stoker {}.</p></body></html>",
        v.cpu_utilisation * 100.0,
        v.gil_utilisation * 100.0,
        env!("CARGO_PKG_VERSION")
    );
    h
}
