//! The page: head, style, headings and tables with inline bars.

use std::fmt::Write;

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:960px;\
color:#202124}h1{font-size:22px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 6px}\
.sub{color:#5f6368}.verdict{background:#f1f3f4;border-left:4px solid #1a73e8;padding:10px 14px}\
table{border-collapse:collapse;width:100%;font-size:13px}td,th{padding:4px 6px;\
border-bottom:1px solid #e0e0e0;text-align:right}td:first-child,th:first-child{text-align:left;\
max-width:420px;overflow-wrap:anywhere}.bar{display:inline-block;height:9px;background:#1a73e8;\
vertical-align:middle}.grid{stroke:#e0e0e0}.tick{font-size:11px;fill:#5f6368}.label{font-size:12px;\
fill:#3c4043}.legend span{display:inline-block;width:11px;height:11px;margin:0 4px 0 12px;\
vertical-align:-1px}li{margin-bottom:8px}.ev{color:#5f6368;font-size:13px}";

/// Escapes text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A number with as many decimals as its size deserves.
pub fn fmt_num(v: f64) -> String {
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

/// An HTML page being written.
pub struct Page {
    html: String,
}

impl Page {
    /// A page titled `stoker <kind>: <title>`, with `heading` and a grey `subtitle` line
    /// (HTML, already escaped).
    pub fn new(kind: &str, title: &str, heading: &str, subtitle_html: &str) -> Page {
        let mut html = String::new();
        let _ = write!(
            html,
            "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>stoker {kind}: {t}</title><style>{STYLE}</style></head><body>\
             <h1>{h}</h1><p class=\"sub\">{subtitle_html}</p>",
            kind = esc(kind),
            t = esc(title),
            h = esc(heading)
        );
        Page { html }
    }

    /// Appends raw HTML.
    pub fn push(&mut self, html: &str) {
        self.html.push_str(html);
    }

    pub fn heading(&mut self, text: &str) {
        let _ = write!(self.html, "<h2>{}</h2>", esc(text));
    }

    /// A table: `header` cells, then rows of HTML cells (already escaped). The first column
    /// is left-aligned, the rest right-aligned.
    pub fn table(&mut self, header: &[&str], rows: &[Vec<String>]) {
        self.html.push_str("<table><tr>");
        for h in header {
            let _ = write!(self.html, "<th>{}</th>", esc(h));
        }
        self.html.push_str("</tr>");
        for row in rows {
            self.html.push_str("<tr>");
            for cell in row {
                let _ = write!(self.html, "<td>{cell}</td>");
            }
            self.html.push_str("</tr>");
        }
        self.html.push_str("</table>");
    }

    /// The page, closed with a grey `footer_html` line.
    pub fn finish(mut self, footer_html: &str) -> String {
        let _ = write!(
            self.html,
            "<p class=\"sub\">{footer_html}</p></body></html>"
        );
        self.html
    }
}

/// A table cell with a bar of `share` (0..1) and its percentage.
pub fn share_cell(share: f64) -> String {
    format!(
        "<span class=\"bar\" style=\"width:{:.0}px\"></span> {:.0} %",
        share.clamp(0.0, 1.0) * 80.0,
        share * 100.0
    )
}
