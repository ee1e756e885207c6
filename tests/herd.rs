//! `cargo run --example herd` end to end, at 1,000 clients: without jitter the whole herd comes
//! back in one window and the clients do the most work; the SVG chart is written with its text
//! (title, axes, legend, the figures of each panel); the same flags give the same figures and
//! the same picture; without `--out` the chart goes to a path the program prints, never over the
//! guide's; a bad flag value is refused with a clear message.

use crate::example;
use crate::tempdir;

use std::collections::HashMap;
use std::path::Path;
use std::process::Output;

use tempdir::TempDir;

const CLIENTS: u64 = 1000;

fn herd(args: &[&str]) -> Output {
    example::run("herd", args)
}

fn run_ok(out: &Path) -> String {
    let clients = CLIENTS.to_string();
    example::stdout_of_success(
        "herd",
        &["--clients", &clients, "--out", out.to_str().unwrap()],
    )
}

/// One row of the printed table.
#[derive(Debug)]
struct Row {
    peak: u64,
    in_outage: u64,
    after_outage: u64,
    total: u64,
    succeeded: u64,
    gave_up: u64,
}

/// The table's rows by jitter name. Columns: jitter, peak/win, x cap, peak at s, req outage,
/// req after, req total, succeeded, gave up, drain s.
fn table(stdout: &str) -> HashMap<String, Row> {
    let rows = stdout
        .lines()
        .skip_while(|l| !l.starts_with("jitter "))
        .skip(1)
        .take_while(|l| !l.trim().is_empty());
    let mut table = HashMap::new();
    for line in rows {
        let cells: Vec<&str> = line.split_whitespace().collect();
        if cells.len() != 10 {
            continue; // "... clients still waiting" notes
        }
        let n = |i: usize| -> u64 {
            cells[i]
                .parse()
                .unwrap_or_else(|_| panic!("column {i} of {line:?} is not a count"))
        };
        table.insert(
            cells[0].to_owned(),
            Row {
                peak: n(1),
                in_outage: n(4),
                after_outage: n(5),
                total: n(6),
                succeeded: n(7),
                gave_up: n(8),
            },
        );
    }
    table
}

#[test]
fn no_jitter_is_one_synchronised_spike_and_the_most_work() {
    let dir = TempDir::new("herd");
    let svg = dir.file("herd.svg");
    let stdout = run_ok(&svg);
    let table = table(&stdout);
    let mut modes: Vec<_> = table.keys().map(String::as_str).collect();
    modes.sort_unstable();
    assert_eq!(modes, ["decorrelated", "equal", "full", "none"], "{stdout}");

    // The header states the conventions the figures depend on.
    for convention in [
        "max attempts 10 (first send included)",
        "(the first wait is base)",
        "1 per 1ms tick",
        "[k*w, (k+1)*w)",
    ] {
        assert!(
            stdout.contains(convention),
            "no {convention:?} in\n{stdout}"
        );
    }

    let none = &table["none"];
    // Without jitter every client still trying retries in the same window: nearly the whole herd
    // at once (a handful were served by the spikes before).
    assert!(none.peak >= CLIENTS * 99 / 100, "{stdout}");
    for (mode, row) in &table {
        assert_eq!(
            row.in_outage + row.after_outage,
            row.total,
            "{mode}: {stdout}"
        );
        // The default duration limit is long enough for every client to finish.
        assert_eq!(row.succeeded + row.gave_up, CLIENTS, "{mode}: {stdout}");
        if mode != "none" {
            assert!(none.peak > row.peak, "{mode}: {stdout}");
            assert!(none.total > row.total, "{mode}: {stdout}");
            assert!(none.succeeded < row.succeeded, "{mode}: {stdout}");
        }
    }

    let picture = std::fs::read_to_string(&svg).expect("the SVG is written");
    assert!(
        picture.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\"")
            && picture.ends_with("</svg>\n"),
        "not an SVG document: {}",
        &picture[..picture.len().min(200)]
    );
    // Text as text, in a generic family: nothing to install, nothing that runs.
    assert!(picture.contains("font-family=\"sans-serif\""));
    assert!(!picture.contains("<script") && !picture.contains("@font-face"));
    for text in [
        "Thundering herd: 1,000 clients retry through a 10s outage",
        "then the server serves 1,000 requests/s; backoff base 100ms, cap 10s, at most 10 attempts per client",
        "requests per 100ms window (colour: jitter mode)",
        "capacity, 100 per window",
        "outage (every request fails)",
        "time since every client's first request (s)",
        "requests sent per 100ms window (log scale)",
        ">1,000</text>",
    ] {
        assert!(picture.contains(text), "no {text:?} in the SVG");
    }
    // Each panel's heading repeats its mode's figures from the table.
    for (heading, mode) in [
        ("no jitter", "none"),
        ("full jitter", "full"),
        ("equal jitter", "equal"),
        ("decorrelated jitter", "decorrelated"),
    ] {
        let row = &table[mode];
        // Counts are written 1,000 in the picture.
        let line = picture
            .lines()
            .find(|l| l.contains(&format!(">{heading}</tspan>")))
            .unwrap_or_else(|| panic!("no panel for {mode}"))
            .replace(',', "");
        for figure in [
            format!("busiest window after the outage: {}", row.peak),
            format!("{} of 1000 clients served", row.succeeded),
        ] {
            assert!(line.contains(&figure), "{mode}: no {figure:?} in {line}");
        }
    }

    // Deterministic: the same flags print the same figures and draw the same picture (only the
    // line naming the picture's path differs).
    let again = dir.file("again.svg");
    let figures = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| !l.starts_with("picture:"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(figures(&run_ok(&again)), figures(&stdout));
    assert!(
        std::fs::read_to_string(&again).unwrap() == picture,
        "the second SVG differs"
    );
}

#[test]
fn without_out_the_chart_goes_to_a_printed_path_outside_the_repository() {
    let stdout = example::stdout_of_success("herd", &["--clients", "100"]);
    let path = stdout
        .lines()
        .find_map(|l| l.strip_prefix("picture: "))
        .and_then(|rest| rest.split(" (SVG").next())
        .unwrap_or_else(|| panic!("no picture line in\n{stdout}"));
    let path = Path::new(path);
    assert!(
        path.starts_with(std::env::temp_dir()),
        "{} is not in the temporary directory",
        path.display()
    );
    let picture = std::fs::read_to_string(path).expect("the SVG is written where it says");
    assert!(picture.contains("Thundering herd: 100 clients"), "{path:?}");
}

#[test]
fn a_bad_value_names_the_flag_and_points_to_help() {
    let output = herd(&["--base", "1.5s"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--base 1.5s"), "{stderr}");
    assert!(stderr.contains("1500ms"), "{stderr}");
    assert!(stderr.contains("--help"), "{stderr}");
    assert!(output.stdout.is_empty());
}

#[test]
fn clients_sent_to_one_retry_after_date_come_back_after_it_and_spread() {
    let stdout = example::stdout_of_success("herd", &["--retry-after-date"]);
    assert!(stdout.contains("10000 clients answered 503"), "{stdout}");
    let rows: HashMap<String, Vec<String>> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("jitter "))
        .skip(1)
        .filter_map(|l| {
            let cells: Vec<String> = l.split_whitespace().map(str::to_owned).collect();
            (cells.len() == 7).then(|| (cells[0].clone(), cells))
        })
        .collect();
    assert_eq!(rows.len(), 4, "{stdout}");
    let n = |mode: &str, column: usize| -> f64 { rows[mode][column].parse().unwrap() };
    for mode in ["none", "full", "equal", "decorrelated"] {
        // Columns: jitter, before date, earliest s, spread s, busiest/win, at +s, old busiest.
        assert_eq!(
            n(mode, 1),
            0.0,
            "{mode} came back before the date: {stdout}"
        );
        assert!(n(mode, 2) >= 10.0, "{stdout}");
        // The old rule `max(retry_after, backoff)` sent everyone into one window.
        assert_eq!(n(mode, 6), 10_000.0, "{stdout}");
    }
    // With jitter the clients spread over at least the backoff they would have used (full:
    // U[0, 1s]) and the busiest window is a small part of the herd.
    assert!(n("full", 3) >= 0.9, "{stdout}");
    for mode in ["full", "equal", "decorrelated"] {
        assert!(n(mode, 4) <= 2_500.0, "{mode}: {stdout}");
    }
}
