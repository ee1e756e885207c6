//! The herd as an SVG chart: title, legend, one panel per jitter mode, axes with units.
//!
//! Hand-written SVG rather than a plotting crate: its text is SVG `<text>` in the generic
//! `sans-serif` family, laid out by whatever shows the picture (a browser, GitHub), so drawing
//! it needs no font files, and the example no dependency beyond retry-core. The same flags
//! write the same bytes.

use std::fmt::Write as _;
use std::path::Path;

use crate::simulate::Outcome;
use crate::{Config, show};

/// One colour per mode, in the order of `MODES` (matplotlib's first four: apart for most
/// colour-blind readers too, and every panel names its mode in words besides).
const COLOURS: [&str; 4] = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd"];

const WIDTH: f64 = 960.0;
/// Room for the y tick labels and the y axis title.
const LEFT: f64 = 88.0;
const RIGHT: f64 = 24.0;
/// Title, subtitle and legend.
const TOP: f64 = 100.0;
/// Above each panel: its heading.
const HEADING: f64 = 30.0;
const PANEL: f64 = 120.0;
/// The x tick labels and the x axis title.
const BOTTOM: f64 = 60.0;
/// Empty windows sit on the bottom edge of the log axis.
const Y_FLOOR: f64 = 0.7;

const GRID: &str = "#d9d9d9";
const OUTAGE: &str = "#ececec";
const TEXT: &str = "#222222";
const MUTED: &str = "#555555";

/// Writes the chart of `outcomes` (in the order of `MODES`) to `path`, creating its directory.
pub(crate) fn write(c: &Config, outcomes: &[Outcome], path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, draw(c, outcomes))
}

/// The picture as SVG text.
fn draw(c: &Config, outcomes: &[Outcome]) -> String {
    let window = c.window.as_secs_f64();
    let outage = c.outage.as_secs_f64();
    let traffic_end = outcomes
        .iter()
        .map(|o| o.per_window.len() as f64 * window)
        .fold(outage, f64::max);
    let step = tick_step(traffic_end);
    let x_end = ((traffic_end / step).ceil() * step).max(step);
    let busiest = outcomes
        .iter()
        .flat_map(|o| o.per_window.iter().copied())
        .max()
        .unwrap_or(1);
    let y_top = (busiest as f64).max(1.0) * 2.0;
    let capacity = c.capacity as f64 * window;
    let plot_width = WIDTH - LEFT - RIGHT;
    let height = TOP + outcomes.len() as f64 * (HEADING + PANEL) + BOTTOM;
    let x_at = |t: f64| LEFT + t / x_end * plot_width;
    let window_name = format!("{} window", show(c.window));

    let mut svg = Svg::new(WIDTH, height);
    svg.text(
        WIDTH / 2.0,
        30.0,
        "font-size=\"20\" font-weight=\"bold\" text-anchor=\"middle\"",
        &format!(
            "Thundering herd: {} clients retry through a {} outage",
            thousands(u64::from(c.clients)),
            show(c.outage)
        ),
    );
    svg.text(
        WIDTH / 2.0,
        52.0,
        &format!("font-size=\"13\" text-anchor=\"middle\" fill=\"{MUTED}\""),
        &format!(
            "then the server serves {} requests/s; backoff base {}, cap {}, at most {} attempts per client",
            thousands(c.capacity),
            show(c.base),
            show(c.cap),
            c.max_attempts
        ),
    );
    legend(&mut svg, 80.0, &window_name, capacity);

    for (i, (o, colour)) in outcomes.iter().zip(COLOURS).enumerate() {
        let top = TOP + i as f64 * (HEADING + PANEL) + HEADING;
        let y_at = |n: f64| {
            let share = (n.max(Y_FLOOR) / Y_FLOOR).ln() / (y_top / Y_FLOOR).ln();
            top + PANEL * (1.0 - share)
        };
        heading(&mut svg, top - 9.0, o, colour, c, capacity);
        svg.rect(
            x_at(0.0),
            top,
            x_at(outage) - x_at(0.0),
            PANEL,
            OUTAGE,
            "none",
        );
        let mut tick = step;
        while tick < x_end {
            svg.line(x_at(tick), top, x_at(tick), top + PANEL, GRID, 1.0);
            tick += step;
        }
        let mut decade = 1.0;
        while decade < y_top {
            let y = y_at(decade);
            svg.line(LEFT, y, LEFT + plot_width, y, GRID, 1.0);
            svg.text(
                LEFT - 6.0,
                y + 4.0,
                &format!("font-size=\"12\" text-anchor=\"end\" fill=\"{MUTED}\""),
                &thousands(decade as u64),
            );
            decade *= 10.0;
        }
        let points: Vec<(f64, f64)> =
            busiest_per_column(&o.per_window, window, x_end, plot_width as usize)
                .into_iter()
                .map(|(t, n)| (x_at(t), y_at(n as f64)))
                .collect();
        svg.polyline(&points, colour, 1.5);
        let y = y_at(capacity);
        svg.line(LEFT, y, LEFT + plot_width, y, "#000000", 1.5);
        svg.rect(LEFT, top, plot_width, PANEL, "none", "#444444");
    }

    let axis = TOP + outcomes.len() as f64 * (HEADING + PANEL);
    let mut tick = 0.0;
    while tick <= x_end {
        svg.line(x_at(tick), axis, x_at(tick), axis + 5.0, "#444444", 1.0);
        svg.text(
            x_at(tick),
            axis + 19.0,
            &format!("font-size=\"12\" text-anchor=\"middle\" fill=\"{MUTED}\""),
            &format!("{tick}"),
        );
        tick += step;
    }
    svg.text(
        LEFT + plot_width / 2.0,
        axis + 44.0,
        "font-size=\"13\" text-anchor=\"middle\"",
        "time since every client's first request (s)",
    );
    let middle = TOP + (axis - TOP) / 2.0;
    svg.text(
        24.0,
        middle,
        &format!(
            "font-size=\"13\" text-anchor=\"middle\" transform=\"rotate(-90 24 {middle:.1})\""
        ),
        &format!("requests sent per {window_name} (log scale)"),
    );
    svg.finish()
}

/// The key: what the coloured, black and grey marks mean, centred on one line.
fn legend(svg: &mut Svg, y: f64, window_name: &str, capacity: f64) {
    const SIZE: f64 = 12.0;
    const MARK: f64 = 28.0;
    const GAP: f64 = 8.0;
    const BETWEEN: f64 = 32.0;
    let requests = format!("requests per {window_name} (colour: jitter mode)");
    let served = format!("capacity, {} per window", thousands(capacity as u64));
    let outage = "outage (every request fails)";
    let width = [&requests, &served, outage]
        .iter()
        .map(|t| MARK + GAP + text_width(t, SIZE))
        .sum::<f64>()
        + 2.0 * BETWEEN;
    let label = "font-size=\"12\"";
    let mut x = (WIDTH - width) / 2.0;
    for (i, colour) in COLOURS.iter().enumerate() {
        let from = x + i as f64 * MARK / 4.0;
        svg.line(from, y - 4.0, from + MARK / 4.0, y - 4.0, colour, 3.0);
    }
    svg.text(x + MARK + GAP, y, label, &requests);
    x += MARK + GAP + text_width(&requests, SIZE) + BETWEEN;
    svg.line(x, y - 4.0, x + MARK, y - 4.0, "#000000", 1.5);
    svg.text(x + MARK + GAP, y, label, &served);
    x += MARK + GAP + text_width(&served, SIZE) + BETWEEN;
    svg.rect(x, y - 11.0, MARK, 13.0, OUTAGE, "#bbbbbb");
    svg.text(x + MARK + GAP, y, label, outage);
}

/// Above a panel: the jitter mode, and what the recovering server saw.
fn heading(svg: &mut Svg, y: f64, o: &Outcome, colour: &str, c: &Config, capacity: f64) {
    let mode = match o.jitter.name() {
        "none" => "no jitter".to_owned(),
        name => format!("{name} jitter"),
    };
    let busiest = if capacity > 0.0 {
        format!(
            "{} ({:.1}\u{d7} capacity)",
            thousands(o.peak),
            o.peak as f64 / capacity
        )
    } else {
        thousands(o.peak)
    };
    svg.spans(
        LEFT,
        y,
        "font-size=\"14\"",
        &[
            (
                format!("font-weight=\"bold\" fill=\"{colour}\"").as_str(),
                mode.as_str(),
            ),
            (
                // SVG collapses leading spaces: the gap is a shift.
                format!("dx=\"12\" fill=\"{TEXT}\"").as_str(),
                format!(
                    "busiest window after the outage: {busiest}; {} of {} clients served",
                    thousands(u64::from(o.succeeded)),
                    thousands(u64::from(c.clients))
                )
                .as_str(),
            ),
        ],
    );
}

/// Seconds between x ticks: 1, 2 or 5 times a power of ten, for at most ten intervals.
fn tick_step(end: f64) -> f64 {
    let mut scale = 1.0;
    loop {
        for step in [1.0, 2.0, 5.0] {
            if end / (step * scale) <= 10.0 {
                return step * scale;
            }
        }
        scale *= 10.0;
    }
}

/// The busiest window in each of `columns` equal slices of `[0, x_end)` seconds, as (middle of
/// the slice, requests), empty slices left out. One point per pixel column keeps every spike
/// visible when windows are narrower than a pixel, and keeps the file small for long runs.
fn busiest_per_column(
    per_window: &[u64],
    window: f64,
    x_end: f64,
    columns: usize,
) -> Vec<(f64, u64)> {
    let width = x_end / columns as f64;
    let mut busiest: Vec<Option<u64>> = vec![None; columns];
    for (w, &n) in per_window.iter().enumerate() {
        let column = (((w as f64 + 0.5) * window / width) as usize).min(columns - 1);
        let slot = &mut busiest[column];
        *slot = Some(slot.map_or(n, |m| m.max(n)));
    }
    busiest
        .into_iter()
        .enumerate()
        .filter_map(|(column, n)| Some(((column as f64 + 0.5) * width, n?)))
        .collect()
}

/// `12345` as `12,345`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// A generous guess at the width of `text` in a sans-serif face (no font is read to measure
/// it): enough to place the legend's items one after another without overlap.
fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size * 0.6
}

/// An SVG document being written: shapes and text, numbers with one decimal.
struct Svg(String);

impl Svg {
    fn new(width: f64, height: f64) -> Svg {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
             viewBox=\"0 0 {width:.0} {height:.0}\" font-family=\"sans-serif\" fill=\"{TEXT}\">"
        );
        let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>");
        Svg(s)
    }

    fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, stroke: &str, width: f64) {
        let _ = writeln!(
            self.0,
            "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" stroke=\"{stroke}\" stroke-width=\"{width}\"/>"
        );
    }

    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, stroke: &str) {
        let _ = writeln!(
            self.0,
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" fill=\"{fill}\" stroke=\"{stroke}\"/>"
        );
    }

    fn polyline(&mut self, points: &[(f64, f64)], stroke: &str, width: f64) {
        let mut coords = String::new();
        for (i, (x, y)) in points.iter().enumerate() {
            // A line break now and then keeps the file readable in a diff.
            let separator = match i {
                0 => "",
                i if i % 10 == 0 => "\n",
                _ => " ",
            };
            let _ = write!(coords, "{separator}{x:.1},{y:.1}");
        }
        let _ = writeln!(
            self.0,
            "<polyline fill=\"none\" stroke=\"{stroke}\" stroke-width=\"{width}\" stroke-linejoin=\"round\" points=\"{coords}\"/>"
        );
    }

    /// `attributes` are written as given; `text` is escaped.
    fn text(&mut self, x: f64, y: f64, attributes: &str, text: &str) {
        self.spans(x, y, attributes, &[("", text)]);
    }

    /// One line of text in parts styled apart, each `(attributes, text)`.
    fn spans(&mut self, x: f64, y: f64, attributes: &str, spans: &[(&str, &str)]) {
        let _ = write!(self.0, "<text x=\"{x:.1}\" y=\"{y:.1}\" {attributes}>");
        for (span_attributes, text) in spans {
            let text = escape(text);
            if span_attributes.is_empty() {
                self.0.push_str(&text);
            } else {
                let _ = write!(self.0, "<tspan {span_attributes}>{text}</tspan>");
            }
        }
        self.0.push_str("</text>\n");
    }

    fn finish(mut self) -> String {
        self.0.push_str("</svg>\n");
        self.0
    }
}

/// Text as SVG character data.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
