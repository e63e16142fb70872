//! `stoker analyze --compare BEFORE AFTER`: two runs side by side, as one optimises by
//! comparing a run before and after a change: step time and its breakdown, what changed and
//! by how much, and the verdict of each.

use serde::Serialize;
use stoker_html::{esc, Page};

use crate::analysis::Analysis;

/// One figure of both runs.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub metric: String,
    pub unit: String,
    pub before: f64,
    pub after: f64,
    /// `after - before`.
    pub change: f64,
    /// The change relative to `before` (`None` where `before` is 0 or the figure is a share,
    /// whose change is in points).
    pub change_percent: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub before: String,
    pub after: String,
    pub verdict_before: String,
    pub verdict_after: String,
    pub rows: Vec<Row>,
    /// What changed most, in a few sentences.
    pub summary: Vec<String>,
}

/// Units whose change is in points, not relative.
const POINTS: &str = "%";

impl Comparison {
    pub fn new(before: &Analysis, after: &Analysis) -> Comparison {
        let mut rows = Vec::new();
        let mut row = |metric: &str, unit: &str, b: f64, a: f64| {
            rows.push(Row {
                metric: metric.into(),
                unit: unit.into(),
                before: b,
                after: a,
                change: a - b,
                change_percent: (unit != POINTS && b != 0.0).then(|| (a - b) / b * 100.0),
            });
        };
        row("step time", "ms", before.step_ms, after.step_ms);
        row(
            "input share",
            POINTS,
            before.input_percent,
            after.input_percent,
        );
        row(
            "device busy",
            POINTS,
            before.busy_percent,
            after.busy_percent,
        );
        row(
            "device idle",
            POINTS,
            before.idle_percent,
            after.idle_percent,
        );
        let (g0, g1) = (&before.gaps_ms_per_step, &after.gaps_ms_per_step);
        let (v0, v1) = (g0.values(), g1.values());
        for (i, (_, name)) in crate::analysis::CAUSES.iter().enumerate() {
            if v0[i] > 0.0 || v1[i] > 0.0 {
                row(&format!("idle: {name}"), "ms per step", v0[i], v1[i]);
            }
        }
        let mb = 1e-6;
        row(
            "host-to-device copies",
            "MB per step",
            before.h2d.bytes_per_step * mb,
            after.h2d.bytes_per_step * mb,
        );
        row(
            "copies not overlapped",
            "ms per step",
            before.h2d.exposed_ms_per_step,
            after.h2d.exposed_ms_per_step,
        );
        for m0 in &before.memory {
            if let Some(m1) = after.memory.iter().find(|m| m.device == m0.device) {
                row(
                    &format!("peak memory ({})", m0.device),
                    "MB",
                    m0.peak_allocated_bytes * mb,
                    m1.peak_allocated_bytes * mb,
                );
            }
        }
        let summary = summarize(before, after, &rows);
        Comparison {
            before: before.path.clone(),
            after: after.path.clone(),
            verdict_before: before.verdict.clone(),
            verdict_after: after.verdict.clone(),
            rows,
            summary,
        }
    }

    pub fn to_text(&self) -> String {
        let mut out = format!("before: {}\nafter:  {}\n", self.before, self.after);
        for s in &self.summary {
            out.push_str(&format!("{s}\n"));
        }
        let labels: Vec<String> = (self.rows.iter())
            .map(|r| format!("{} ({})", r.metric, r.unit))
            .collect();
        let w = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
        out.push_str(&format!(
            "{:<w$} {:>10} {:>10}  {}\n",
            "", "before", "after", "change"
        ));
        for (r, label) in self.rows.iter().zip(&labels) {
            out.push_str(&format!(
                "{:<w$} {:>10} {:>10}  {}\n",
                label,
                format!("{:.2}", r.before),
                format!("{:.2}", r.after),
                change_text(r)
            ));
        }
        out
    }

    pub fn to_html(&self) -> String {
        let name = |p: &str| {
            std::path::Path::new(p)
                .file_name()
                .map_or_else(|| p.to_string(), |f| f.to_string_lossy().into_owned())
        };
        let mut page = Page::new(
            "comparison",
            &format!("{} vs {}", name(&self.before), name(&self.after)),
            "stoker analyze --compare",
            &format!(
                "before: {} · after: {}",
                esc(&self.before),
                esc(&self.after)
            ),
        );
        page.heading("What changed");
        let items: String = (self.summary.iter())
            .map(|s| format!("<li>{}</li>", esc(s)))
            .collect();
        page.push(&format!("<ul class=\"verdict\">{items}</ul>"));
        page.heading("Side by side");
        let rows: Vec<Vec<String>> = (self.rows.iter())
            .map(|r| {
                vec![
                    esc(&r.metric),
                    esc(&r.unit),
                    format!("{:.2}", r.before),
                    format!("{:.2}", r.after),
                    esc(&change_text(r)),
                ]
            })
            .collect();
        page.table(&["", "unit", "before", "after", "change"], &rows);
        page.finish(&format!(
            "Made by stoker {}. Each run is analysed as <code>stoker analyze</code> analyses it alone \
             (steps, warm-up left out, idle time by cause); shares change in points.",
            env!("CARGO_PKG_VERSION")
        ))
    }
}

fn change_text(r: &Row) -> String {
    match (r.unit.as_str(), r.change_percent) {
        (POINTS, _) => format!("{:+.1} points", r.change),
        (_, Some(p)) => format!("{:+.2} ({p:+.1} %)", r.change),
        (_, None) => format!("{:+.2}", r.change),
    }
}

/// The verdicts, step time, and the figures that moved most.
fn summarize(before: &Analysis, after: &Analysis, rows: &[Row]) -> Vec<String> {
    let mut out = Vec::new();
    let step = &rows[0];
    let speed = if after.step_ms > 0.0 {
        before.step_ms / after.step_ms
    } else {
        0.0
    };
    out.push(format!(
        "step time {:.2} → {:.2} ms ({}{})",
        step.before,
        step.after,
        step.change_percent
            .map(|p| format!("{p:+.1} %"))
            .unwrap_or_else(|| "no step time before".into()),
        if speed > 1.0 {
            format!(", {speed:.2}x faster")
        } else {
            String::new()
        }
    ));
    if before.verdict != after.verdict {
        out.push(format!("verdict: {} → {}", before.verdict, after.verdict));
    } else {
        out.push(format!("verdict: {} in both", before.verdict));
    }
    out.push(format!(
        "input share {} from {:.1} % to {:.1} % ({:+.1} points)",
        if after.input_percent < before.input_percent {
            "fell"
        } else if after.input_percent > before.input_percent {
            "rose"
        } else {
            "stayed"
        },
        before.input_percent,
        after.input_percent,
        after.input_percent - before.input_percent
    ));
    // The idle cause that moved most (ms per step).
    if let Some(r) = rows
        .iter()
        .filter(|r| r.metric.starts_with("idle: "))
        .max_by(|a, b| a.change.abs().total_cmp(&b.change.abs()))
        .filter(|r| r.change.abs() >= 0.01)
    {
        out.push(format!(
            "largest change in idle time: {} {:.2} → {:.2} ms per step",
            r.metric.trim_start_matches("idle: "),
            r.before,
            r.after
        ));
    }
    out
}
