//! The HTML report on real traces: self-contained, and drawing what the analysis found.
#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::path::PathBuf;

use stoker_analyze::{analysis, report};

fn render(rel: &str) -> (analysis::Analysis, String) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/traces");
    let path = if rel.ends_with('*') {
        let (d, prefix) = rel.trim_end_matches('*').rsplit_once('/').unwrap();
        std::fs::read_dir(dir.join(d))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
            .unwrap()
    } else {
        dir.join(rel)
    };
    let trace = stoker_analyze::load(&path).unwrap();
    let a = analysis::analyze(&trace);
    let html = report::render(&trace, &a);
    (a, html)
}

fn self_contained(html: &str) {
    assert!(html.starts_with("<!DOCTYPE html>") && html.ends_with("</html>"));
    assert!(!html.contains("<script"));
    let urls = html.matches("http").count();
    let xmlns = html.matches("xmlns=\"http://www.w3.org/2000/svg\"").count();
    assert_eq!(urls, xmlns, "the report must fetch nothing");
}

#[test]
fn resnet50_input_bound_report() {
    let (a, html) = render("pytorch/kineto_tb_samples/resnet50_num_workers_0*");
    self_contained(&html);
    assert!(html.contains("<b>highly input-bound:</b> 39.8 %"));
    assert!(html.contains("more DataLoader workers"));
    // The step chart and the worst step's strip.
    assert_eq!(html.matches("<svg").count(), 2);
    let worst = a
        .steps
        .iter()
        .filter(|s| !s.warmup && !s.incomplete)
        .max_by(|x, y| x.step_ms.total_cmp(&y.step_ms))
        .unwrap();
    assert!(html.contains(&format!(
        "Timeline of the longest step ({}, {:.2} ms)",
        worst.name, worst.step_ms
    )));
    // The idle-by-input lane has marks (the orange of "waiting for input").
    let strip = &html[html.find("Timeline of the longest step").unwrap()..];
    assert!(
        strip.matches("fill=\"#e8710a\"").count() >= 2,
        "input lanes empty"
    );
    // Every step is in the table, the warm-up marked.
    for s in &a.steps {
        assert!(html.contains(&format!("<td>{}", s.name)), "{}", s.name);
    }
    assert!(html.contains("(warm-up, left out)"));
    assert!(html.contains("Top kernels"));
    assert!(html.contains("Host-to-device copies"));
}

#[test]
fn report_of_a_trace_without_steps() {
    let (a, html) = render("tensorflow/tf1_timeline/gpu_timeline_02_step_1.json");
    assert_eq!(a.steps.len(), 1);
    self_contained(&html);
    assert!(html.contains("Timeline of the longest step (trace,"));
    assert!(html.contains("fill=\"#1a73e8\""), "kernels drawn");
}
