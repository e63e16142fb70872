//! The look of stoker's HTML reports, shared by the pipeline report (`stoker bench --report`)
//! and the trace analyzer's (`stoker analyze --html`): one self-contained page (inline CSS and
//! SVG, no script, nothing fetched) and the charts drawn on it.

mod chart;
mod page;

pub use chart::{line_chart, stacked_bars, timeline_strip, Lane, Series};
pub use page::{esc, fmt_num, share_cell, Page};

/// Colours, in the order series take them.
pub const PALETTE: [&str; 8] = [
    "#1a73e8", "#e8710a", "#188038", "#d93025", "#9334e6", "#12b5cb", "#f9ab00", "#5f6368",
];
