//! The HTML report of a pipeline run (`stoker bench --report`, `Dataset.report`): one
//! self-contained file (inline CSS and SVG, no script, nothing fetched) with the step-time
//! graph, throughput and buffer fill over time, the per-stage table and the verdict.

use std::fmt::Write;

use stoker_html::{esc, line_chart, share_cell, stacked_bars, Page, Series};

use crate::bench_run::BenchResult;
use crate::verdict::Verdict;

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

/// The report of `run` (of the spec or pipeline `title`), with a training loop's `steps`
/// when there are some.
pub fn render(title: &str, run: &BenchResult, steps: Option<&Steps>) -> String {
    let v = &run.verdict;
    let mut page = Page::new(
        "report",
        title,
        "stoker report",
        &format!(
            "{t} · {ex:.0} examples/s ({el:.1} elements/s) over {s:.2} s on a budget of {th} \
             threads{ended}",
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
        ),
    );
    page.push(&verdict(v, steps));
    page.push(&step_time(run, steps));
    page.push(&throughput(run));
    page.push(&buffer_fill(run));
    tuner(&mut page, run);
    stages(&mut page, v);
    ops(&mut page, v);
    page.finish(&format!(
        "CPU budget used: {:.0} %; Python held the GIL {:.0} % of the run. Made by stoker {}.",
        v.cpu_utilisation * 100.0,
        v.gil_utilisation * 100.0,
        env!("CARGO_PKG_VERSION")
    ))
}

/// The verdict: the training loop's and the pipeline's, and the advice.
fn verdict(v: &Verdict, steps: Option<&Steps>) -> String {
    let mut h = String::from("<h2>Verdict</h2><div class=\"verdict\">");
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
    h
}

/// Step time: the training loop's, else the time the consumer waited for each element.
fn step_time(run: &BenchResult, steps: Option<&Steps>) -> String {
    match steps {
        Some(st) => stacked_bars(
            "Step time (training loop)",
            &[
                Series {
                    label: "waiting for input",
                    color: INPUT,
                    values: &st.input_ms,
                },
                Series {
                    label: "rest of the step",
                    color: REST,
                    values: &st.compute_ms,
                },
            ],
        ),
        None => {
            let wait: Vec<f64> = run.series.wait_ms.iter().map(|w| f64::from(*w)).collect();
            stacked_bars(
                "Time to get each element (the pipeline alone: every step is all input)",
                &[Series {
                    label: "waiting for input",
                    color: INPUT,
                    values: &wait,
                }],
            )
        }
    }
}

/// Throughput over time.
fn throughput(run: &BenchResult) -> String {
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
    line_chart(
        "Throughput",
        "elements/s",
        &[("elements per second".into(), rate)],
        None,
    )
}

/// Buffer fill over time.
fn buffer_fill(run: &BenchResult) -> String {
    let samples = &run.series.samples;
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
    line_chart("Buffer fill (share of capacity)", "fill", &fills, Some(1.0))
}

/// The tuned knobs over time, and the tuner's moves with why (the latest, where it made many).
fn tuner(page: &mut Page, run: &BenchResult) {
    let series = &run.series;
    if series.knobs.is_empty() {
        return;
    }
    let values: Vec<(String, Vec<(f64, f64)>)> = series
        .knobs
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let points = series
                .samples
                .iter()
                .filter_map(|s| Some((s.t, f64::from(*s.knobs.get(i)?))))
                .collect();
            (name.clone(), points)
        })
        .collect();
    page.push(&line_chart("AUTOTUNE: knob values", "value", &values, None));
    page.heading("AUTOTUNE: the tuner's moves");
    const SHOWN: usize = 60;
    let skip = series.tuning.len().saturating_sub(SHOWN);
    if skip > 0 {
        page.push(&format!(
            "<p>The latest {SHOWN} of {} moves.</p>",
            series.tuning.len()
        ));
    }
    let rows: Vec<Vec<String>> = series.tuning[skip..]
        .iter()
        .map(|m| {
            vec![
                format!("{:.2}", m.t),
                esc(&m.knob),
                m.value.to_string(),
                esc(&m.reason),
            ]
        })
        .collect();
    if rows.is_empty() {
        page.push("<p>No moves: every knob kept its starting value.</p>");
    } else {
        page.table(&["s (negative: warm-up)", "knob", "value", "why"], &rows);
    }
}

/// The stages' table, sink first.
fn stages(page: &mut Page, v: &Verdict) {
    page.heading("Stages (sink first)");
    let rows: Vec<Vec<String>> = v
        .stages
        .iter()
        .filter(|s| s.elements > 0 || s.busy_s > 0.0)
        .map(|s| {
            let g = &v.groups[s.group];
            let share = s.busy_s / (v.wall_s.max(1e-9) * g.threads as f64);
            let marker = if Some(&s.name) == v.bottleneck.as_ref() {
                " ◀ bottleneck"
            } else {
                ""
            };
            vec![
                format!("{}{marker}", esc(&s.name)),
                s.elements.to_string(),
                format!("{:.3}", s.ms_per_element),
                if s.capacity_per_s.is_finite() {
                    format!("{:.0}", s.capacity_per_s)
                } else {
                    "—".into()
                },
                format!("{:.2}", s.busy_s),
                g.threads.to_string(),
                format!("{:.2}", s.python_s),
                share_cell(share),
            ]
        })
        .collect();
    page.table(
        &[
            "stage",
            "elements",
            "ms / element",
            "capacity el/s",
            "busy s",
            "threads",
            "Python s",
            "share of its threads' time",
        ],
        &rows,
    );
}

/// The ops inside maps, where the run timed them.
fn ops(page: &mut Page, v: &Verdict) {
    if v.ops.is_empty() {
        return;
    }
    page.heading("Ops inside maps");
    let rows: Vec<Vec<String>> = v
        .ops
        .iter()
        .map(|o| {
            vec![
                esc(&o.name),
                o.calls.to_string(),
                format!("{:.3}", o.busy_s * 1e3 / o.calls.max(1) as f64),
                format!("{:.2}", o.busy_s),
                share_cell(o.share),
            ]
        })
        .collect();
    page.table(
        &[
            "op",
            "calls",
            "ms / call",
            "busy s",
            "share of all busy time",
        ],
        &rows,
    );
}
