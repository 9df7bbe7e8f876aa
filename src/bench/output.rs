//! The benchmark's outputs: the table, results.json and an SVG chart.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::{BenchResults, Figure};
use crate::error::{Error, Result};

/// Prints the table (or the JSON).
pub(super) fn print(results: &BenchResults, as_json: bool) {
    if as_json {
        crate::outln!("{}", json!(results));
        return;
    }
    crate::outln!(
        "\nasyncflow bench  ({}; {} CPUs; {})",
        results.server_version,
        results.cpus,
        results.started_at.format("%Y-%m-%d %H:%M UTC")
    );
    crate::outln!(
        "{:<46} {:>12} {:<10} {:>9} {:>8} {:>8}  {:<28} {:<4}",
        "figure",
        "value",
        "unit",
        "ratio",
        "CPU/op",
        "own/op",
        "bar",
        ""
    );
    for f in &results.figures {
        let ratio = match (f.ratio, f.ratio_to.as_deref()) {
            (Some(r), Some("UPDATE")) | (Some(r), None) => format!("{r:.2}x"),
            (Some(r), Some(to)) => format!("{r:.2}x {}", to.chars().next().unwrap_or('?')),
            (None, _) => "-".into(),
        };
        let us = |c: Option<f64>| c.map(|c| format!("{c:.1} us")).unwrap_or_default();
        let value = if f.value >= 100.0 { format!("{:.0}", f.value) } else { format!("{:.2}", f.value) };
        let ok = match f.pass {
            Some(true) => "ok",
            Some(false) => "MISS",
            None => "",
        };
        crate::outln!(
            "{:<46} {:>12} {:<10} {:>9} {:>8} {:>8}  {:<28} {:<4}",
            f.name,
            value,
            f.unit,
            ratio,
            us(f.cpu_us),
            us(f.own_cpu_us),
            f.bar.as_deref().unwrap_or(""),
            ok
        );
    }
    let bases: Vec<String> = results.figures.iter().filter_map(|f| f.ratio_to.clone()).fold(Vec::new(), |mut v, b| {
        if !v.contains(&b) {
            v.push(b);
        }
        v
    });
    if !bases.is_empty() {
        crate::outln!("ratio: value / the same run's {} (marked with its initial when not UPDATE)", bases.join(" or "));
    }
    if results.figures.iter().any(|f| f.cpu_us.is_some()) {
        crate::outln!(
            "CPU/op: the whole machine's busy CPU (server, kernel, this process) per operation; \
             own/op: this process's (the client, or the worker in a burn-down)"
        );
    }
}

/// Writes `<dir>/results.json` and `<dir>/chart.svg`; their paths.
pub(super) fn write(results: &BenchResults, dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let io = |e: std::io::Error| Error::Config(format!("writing benchmark results to {}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(io)?;
    let json_path = dir.join("results.json");
    let text = serde_json::to_string_pretty(results).map_err(|e| Error::Unexpected(e.to_string()))?;
    std::fs::write(&json_path, text + "\n").map_err(io)?;
    let svg_path = dir.join("chart.svg");
    std::fs::write(&svg_path, chart(results)).map_err(io)?;
    Ok((json_path, svg_path))
}

/// Left edge of the bars (names are right-aligned before it) and the height of one row.
const LEFT: f64 = 330.0;
const ROW: f64 = 26.0;

/// One row of a panel: the figure's name, a bar `length` pixels long coloured by its bar's
/// outcome (green met, red missed, blue no bar), and `label` after it.
fn bar(svg: &mut String, f: &Figure, y: f64, length: f64, label: &str) {
    let colour = match f.pass {
        Some(true) => "#3a8f3a",
        Some(false) => "#c0392b",
        None => "#4a78b5",
    };
    let length = length.max(1.0);
    let _ = writeln!(svg, r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#, LEFT - 8.0, y + 15.0, escape(&f.name));
    let _ = writeln!(
        svg,
        r#"<rect x="{LEFT}" y="{}" width="{length:.1}" height="{}" fill="{colour}"/>"#,
        y + 3.0,
        ROW - 8.0
    );
    let _ = writeln!(svg, r#"<text x="{:.1}" y="{}">{}</text>"#, LEFT + length + 5.0, y + 15.0, escape(label));
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Two panels: throughput figures as multiples of the UPDATE baseline (with the bar's line where
/// there is one), and latencies in milliseconds.
pub(super) fn chart(results: &BenchResults) -> String {
    let rates: Vec<&Figure> = results.figures.iter().filter(|f| f.unit.ends_with("/s")).collect();
    let times: Vec<&Figure> = results.figures.iter().filter(|f| f.unit == "ms").collect();
    let (width, row) = (420.0, ROW);
    let top_rates = 60.0;
    let top_times = top_rates + row * rates.len() as f64 + 70.0;
    let height = top_times + row * times.len() as f64 + 50.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{height}" font-family="sans-serif" font-size="12">"#,
        w = LEFT + width + 200.0
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="10" y="22" font-size="15" font-weight="bold">asyncflow bench — {} — {} CPUs — {}</text>"#,
        escape(&results.server_version),
        results.cpus,
        results.started_at.format("%Y-%m-%d %H:%M UTC")
    );

    // every bar as a multiple of UPDATE, also for the figures whose ratio is to another baseline
    let update = results.figures.iter().find(|f| f.key == "update").map(|f| f.value).filter(|v| *v > 0.0);
    let to_update = |f: &Figure| match f.ratio_to.as_deref() {
        Some("UPDATE") => f.ratio,
        _ => update.map(|u| f.value / u),
    };
    let max_ratio = rates.iter().filter_map(|f| to_update(f)).fold(5.5_f64, f64::max);
    let scale = width / max_ratio;
    let _ = writeln!(
        svg,
        r#"<text x="10" y="{}" font-weight="bold">throughput, as a multiple of the same run's one-row UPDATE commit rate</text>"#,
        top_rates - 12.0
    );
    for (i, f) in rates.iter().enumerate() {
        let r = to_update(f).unwrap_or(0.0);
        let label = format!("{r:.2}x ({:.0} {})", f.value, f.unit);
        bar(&mut svg, f, top_rates + row * i as f64, r * scale, &label);
    }
    for (x, label) in [(1.0, "1x"), (5.0, "5x bar")] {
        let px = LEFT + x * scale;
        let _ = writeln!(
            svg,
            r##"<line x1="{px:.1}" y1="{}" x2="{px:.1}" y2="{}" stroke="#555" stroke-dasharray="4 3"/>"##,
            top_rates - 4.0,
            top_rates + row * rates.len() as f64
        );
        let _ = writeln!(
            svg,
            r#"<text x="{px:.1}" y="{}" text-anchor="middle" fill="\#555">{label}</text>"#,
            top_rates + row * rates.len() as f64 + 14.0
        );
    }

    let max_ms = times.iter().map(|f| f.value).fold(6.5_f64, f64::max);
    let ms_scale = width / max_ms;
    let _ = writeln!(svg, r#"<text x="10" y="{}" font-weight="bold">latency, milliseconds</text>"#, top_times - 12.0);
    for (i, f) in times.iter().enumerate() {
        bar(&mut svg, f, top_times + row * i as f64, f.value * ms_scale, &format!("{:.2} ms", f.value));
    }
    svg.push_str("</svg>\n");
    svg
}
