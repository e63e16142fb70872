//! The HTML report of an analysis (`stoker analyze --html`), in the pipeline report's style:
//! the verdict and recommendations, step time by cause, the idle-gap breakdown, a timeline
//! strip of the worst step, and the step and kernel tables.

use std::fmt::Write;

use stoker_html::{esc, share_cell, stacked_bars, timeline_strip, Lane, Page, Series};

use crate::analysis::{Analysis, Causes, StepStats, CAUSES};
use crate::intervals::Union;
use crate::model::{DeviceKind, Direction, HostKind, Trace};

const BUSY: &str = "#1a73e8";
/// Colours of [`CAUSE_NAMES`], in its order.
/// In the order of [`CAUSES`].
const CAUSE_COLORS: [&str; 10] = [
    "#e8710a", "#f9ab00", "#188038", "#12b5cb", "#1a73e8", "#d93025", "#9334e6", "#5f6368",
    "#f538a0", "#9aa0a6",
];

/// Rows of the memory table at most.
const MAX_MEMORY_ROWS: usize = 200;

/// The report of `analysis`, made from `trace`: a page of sections, in the order below.
pub fn render(trace: &Trace, analysis: &Analysis) -> String {
    let a = analysis;
    let file = std::path::Path::new(&a.path)
        .file_name()
        .map_or_else(|| a.path.clone(), |f| f.to_string_lossy().into_owned());
    let kept: Vec<_> = a
        .steps
        .iter()
        .filter(|s| !s.warmup && !s.incomplete)
        .collect();
    let mut page = Page::new(
        "analysis",
        &file,
        "stoker analyze",
        &format!(
            "{} · {} · {} events · {} kernels on device(s) {:?} · {} steps from {} ({} warm-up \
             or cut off, left out)",
            esc(&a.path),
            esc(&a.dialect),
            a.events,
            a.kernels,
            a.devices,
            kept.len(),
            esc(&a.steps_from),
            a.steps.len() - kept.len()
        ),
    );

    verdict_section(&mut page, a);
    time_by_cause_section(&mut page, &kept);
    idle_breakdown_section(&mut page, a);
    longest_gaps_section(&mut page, a);
    worst_step_section(&mut page, &kept, trace);
    copies_section(&mut page, a);
    memory_section(&mut page, a);
    steps_section(&mut page, a);
    kernels_section(&mut page, a);
    page.finish(&format!(
        "Made by stoker {}. Times are from the trace; idle time is on the compute streams \
         (kernels and memsets, not collectives), each idle moment credited to the first of: \
         input, communication, host-to-device copy, other copies, queued on the device (the \
         next kernel launched, not started), synchronisation, kernel launch, host operators, Python (inside a step, no traced operator), host idle / \
         untraced.",
        env!("CARGO_PKG_VERSION")
    ))
}

/// The verdict, xprof's conclusion and the recommendations.
fn verdict_section(page: &mut Page, a: &Analysis) {
    let mut h = format!(
        "<h2>Verdict</h2><div class=\"verdict\"><p><b>{}:</b> {:.1} % of step time getting \
         the next batch. {:.2} ms per step; the device is busy {:.1} % and idle {:.1} % of it.\
         </p>",
        esc(&a.verdict),
        a.input_percent,
        a.step_ms,
        a.busy_percent,
        a.idle_percent
    );
    if let Some(x) = &a.xprof_conclusion {
        h.push_str(&format!("<p>In xprof's terms: {}.</p>", esc(x)));
    }
    if a.recommendations.is_empty() {
        h.push_str("<p>Nothing to change stands out in this trace.</p>");
    } else {
        h.push_str("<ol>");
        for r in &a.recommendations {
            let _ = write!(
                h,
                "<li><b>{}</b><br><span class=\"ev\">because {}</span></li>",
                esc(&r.action),
                esc(&r.evidence)
            );
        }
        h.push_str("</ol>");
    }
    h.push_str("</div>");
    page.push(&h);
}

/// Each kept step's time: the device busy, and its idle time by cause.
fn time_by_cause_section(page: &mut Page, kept: &[&StepStats]) {
    let busy: Vec<f64> = kept.iter().map(|s| s.busy_ms).collect();
    let per_step: Vec<[f64; 10]> = kept.iter().map(|s| s.gaps.values()).collect();
    let by_cause: [Vec<f64>; 10] = std::array::from_fn(|i| per_step.iter().map(|v| v[i]).collect());
    let mut series = vec![Series {
        label: "device busy",
        color: BUSY,
        values: &busy,
    }];
    for (i, values) in by_cause.iter().enumerate() {
        if values.iter().any(|v| *v > 0.0) {
            series.push(Series {
                label: CAUSES[i].1,
                color: CAUSE_COLORS[i],
                values,
            });
        }
    }
    page.push(&stacked_bars(
        "Step time: device busy, and idle by cause",
        &series,
    ));
}

/// The idle time per step by cause, with what the device and the host did then.
fn idle_breakdown_section(page: &mut Page, a: &Analysis) {
    page.heading("Device idle time per step, by cause");
    let rows: Vec<Vec<String>> = a
        .idle_by_cause
        .iter()
        .map(|c| {
            let mut evidence: Vec<String> = (c.top.iter())
                .map(|o| format!("{} ({:.2} ms)", esc(&o.what), o.ms))
                .collect();
            evidence.extend(c.note.iter().map(|n| esc(n)));
            vec![
                esc(c.name),
                format!("{:.2}", c.ms_per_step),
                share_cell(c.share_of_idle),
                format!(
                    "<div style=\"text-align:left\">{}</div>",
                    evidence.join("<br>")
                ),
            ]
        })
        .collect();
    page.table(
        &["cause", "ms per step", "share of idle time", "evidence"],
        &rows,
    );
}

/// The longest idle gaps, with the host's work during each.
fn longest_gaps_section(page: &mut Page, a: &Analysis) {
    if !a.largest_gaps.is_empty() {
        page.heading("Longest idle gaps, and what the host was doing");
        let rows: Vec<Vec<String>> = a
            .largest_gaps
            .iter()
            .map(|g| {
                let host: Vec<String> = g
                    .host
                    .iter()
                    .map(|h| {
                        format!(
                            "{} <span class=\"ev\">({}{}, {:.2} ms)</span>",
                            esc(&h.name),
                            h.kind,
                            h.thread
                                .as_deref()
                                .map(|t| format!(" on {}", esc(t)))
                                .unwrap_or_default(),
                            h.overlap_ms
                        )
                    })
                    .collect();
                vec![
                    host.join("<br>"),
                    esc(&g.step),
                    format!("+{:.2}", g.at_ms),
                    format!("{:.2}", g.ms),
                    esc(g.cause),
                ]
            })
            .collect();
        page.table(
            &[
                "host activity during the gap",
                "step",
                "at ms",
                "idle ms",
                "mostly",
            ],
            &rows,
        );
    }
}

/// The timeline of the longest kept step.
fn worst_step_section(page: &mut Page, kept: &[&StepStats], trace: &Trace) {
    if let Some(worst) = kept.iter().max_by(|x, y| x.step_ms.total_cmp(&y.step_ms)) {
        if let Some(mark) = step_bounds(trace, &worst.name) {
            page.push(&worst_step_strip(trace, &worst.name, mark));
        }
    }
}

/// The host-to-device copies.
fn copies_section(page: &mut Page, a: &Analysis) {
    let c = &a.h2d;
    if c.bytes_per_step > 0.0 || c.ms_per_step > 0.0 {
        page.heading("Host-to-device copies");
        page.push(&format!(
            "<p>{:.2} MB and {:.2} ms per step{}; {:.2} ms per step not overlapped by kernels. \
             From pageable memory {:.1} MB, from pinned {:.1} MB.</p>",
            c.bytes_per_step / 1e6,
            c.ms_per_step,
            c.gbps
                .map(|g| format!(" ({g:.1} GB/s)"))
                .unwrap_or_default(),
            c.exposed_ms_per_step,
            c.pageable_bytes / 1e6,
            c.pinned_bytes / 1e6
        ));
    }
}

/// The devices' memory.
fn memory_section(page: &mut Page, a: &Analysis) {
    if !a.memory.is_empty() {
        page.heading("Memory");
        for m in &a.memory {
            page.push(&format!("<p>{}.</p>", esc(&m.summary())));
        }
        let rows: Vec<Vec<String>> = (a.memory.iter())
            .flat_map(|m| {
                m.steps.iter().map(move |s| {
                    vec![
                        esc(&m.device),
                        esc(&s.step),
                        format!("{:.1}", s.start_bytes / 1e6),
                        format!("{:.1}", s.peak_bytes / 1e6),
                        format!("{:.1}", s.end_bytes / 1e6),
                    ]
                })
            })
            .take(MAX_MEMORY_ROWS)
            .collect();
        page.table(
            &[
                "device",
                "step",
                "allocated at start, MB",
                "peak, MB",
                "at end, MB",
            ],
            &rows,
        );
    }
}

/// The steps, a row each (at most a few hundred).
fn steps_section(page: &mut Page, a: &Analysis) {
    page.heading("Steps");
    const MAX_ROWS: usize = 200;
    let rows: Vec<Vec<String>> = a
        .steps
        .iter()
        .take(MAX_ROWS)
        .map(|s| {
            let note = if s.warmup {
                " (warm-up, left out)"
            } else if s.incomplete {
                " (cut off, left out)"
            } else {
                ""
            };
            vec![
                format!("{}{note}", esc(&s.name)),
                format!("{:.2}", s.step_ms),
                format!("{:.2}", s.device_step_ms),
                format!("{:.2}", s.busy_ms),
                format!("{:.2}", s.input_ms),
                format!("{:.2}", s.h2d_exposed_ms),
            ]
        })
        .collect();
    page.table(
        &[
            "step",
            "host ms",
            "device ms",
            "busy ms",
            "input ms",
            "exposed H2D ms",
        ],
        &rows,
    );
    if a.steps.len() > MAX_ROWS {
        page.push(&format!(
            "<p class=\"sub\">… and {} more steps (all of them in --json).</p>",
            a.steps.len() - MAX_ROWS
        ));
    }
}

/// The kernels that took the most time.
fn kernels_section(page: &mut Page, a: &Analysis) {
    if !a.top_kernels.is_empty() {
        page.heading("Top kernels");
        let rows: Vec<Vec<String>> = a
            .top_kernels
            .iter()
            .map(|k| {
                vec![
                    esc(&k.name),
                    k.count.to_string(),
                    format!("{:.2}", k.total_ms),
                    share_cell(k.share),
                ]
            })
            .collect();
        page.table(
            &["kernel", "launches", "total ms", "share of kernel time"],
            &rows,
        );
        page.push(&format!(
            "<p class=\"sub\">Median kernel {:.1} µs.</p>",
            a.median_kernel_us
        ));
    }
}

/// The span of step `name` (the whole trace when there are no step markers).
fn step_bounds(t: &Trace, name: &str) -> Option<(f64, f64)> {
    if t.steps.is_empty() {
        return t.span;
    }
    t.steps
        .iter()
        .find(|s| s.name == name)
        .map(|s| (s.start, s.end))
}

/// Device and host lanes over one step, then the device's idle time by cause.
fn worst_step_strip(t: &Trace, name: &str, (a, b): (f64, f64)) -> String {
    let ms = |spans: Vec<(f64, f64)>| -> Vec<(f64, f64)> {
        Union::new(spans)
            .within(a, b)
            .map(|(x, y)| ((x - a) * 1e-3, (y - a) * 1e-3))
            .collect()
    };
    let device = |keep: &dyn Fn(DeviceKind) -> bool| {
        ms(t.device_ops
            .iter()
            .filter(|o| keep(o.kind) && o.end > a && o.start < b)
            .map(|o| (o.start, o.end))
            .collect())
    };
    let in_step: Vec<_> = t
        .host_spans()
        .filter(|h| h.end > a && h.start < b)
        .collect();
    let host = |kind: HostKind| {
        ms(in_step
            .iter()
            .filter(|h| h.kind == kind)
            .map(|h| (h.start, h.end))
            .collect())
    };
    let kernels = device(&|k| matches!(k, DeviceKind::Kernel | DeviceKind::Memset));
    let collectives = device(&|k| k == DeviceKind::Collective);
    let h2d = device(&|k| k == DeviceKind::Memcpy(Direction::HtoD));
    let other_copies = device(&|k| matches!(k, DeviceKind::Memcpy(d) if d != Direction::HtoD));
    let host_lanes = [
        ("host: data loading", HostKind::DataLoading, CAUSE_COLORS[0]),
        ("host: collectives", HostKind::Collective, CAUSE_COLORS[1]),
        ("host: synchronise", HostKind::Sync, CAUSE_COLORS[4]),
        ("host: launches", HostKind::Launch, CAUSE_COLORS[5]),
        ("host: operators", HostKind::Cpu, CAUSE_COLORS[6]),
        ("host: Python", HostKind::Python, CAUSE_COLORS[7]),
    ]
    .map(|(label, kind, color)| (label, color, host(kind)));
    let causes = Causes::with_host(t, (a, b), &in_step);
    let idle: Vec<Vec<(f64, f64)>> = causes
        .classify(a, b)
        .into_iter()
        .map(|spans| {
            spans
                .into_iter()
                .map(|(x, y)| ((x - a) * 1e-3, (y - a) * 1e-3))
                .collect()
        })
        .collect();
    let mut lanes = vec![
        Lane {
            label: "kernels",
            color: BUSY,
            spans: &kernels,
        },
        Lane {
            label: "collectives",
            color: CAUSE_COLORS[1],
            spans: &collectives,
        },
        Lane {
            label: "H2D copies",
            color: CAUSE_COLORS[2],
            spans: &h2d,
        },
        Lane {
            label: "other copies",
            color: CAUSE_COLORS[3],
            spans: &other_copies,
        },
    ];
    for (label, color, spans) in &host_lanes {
        lanes.push(Lane {
            label,
            color,
            spans,
        });
    }
    let idle_labels = CAUSES.map(|(key, _)| format!("idle: {key}"));
    for (i, spans) in idle.iter().enumerate() {
        lanes.push(Lane {
            label: &idle_labels[i],
            color: CAUSE_COLORS[i],
            spans,
        });
    }
    // Lanes with nothing in this step are left out.
    lanes.retain(|l| !l.spans.is_empty());
    timeline_strip(
        &format!(
            "Timeline of the longest step ({name}, {:.2} ms)",
            (b - a) * 1e-3
        ),
        "ms from the step's start",
        0.0,
        (b - a) * 1e-3,
        &lanes,
    )
}
