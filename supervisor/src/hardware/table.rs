//! Human-readable table of a detection (what `lucebox detect` prints). Memory in MiB.

use std::fmt::Write;

use super::{Detection, Device};

pub fn render(detection: &Detection) -> String {
    let host = &detection.host;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Host: {} ({} cores, {} threads, {}), {} MiB RAM, kernel {}, {}",
        host.cpu_model,
        host.cores,
        host.threads,
        if host.cpu_arch.is_empty() { "unknown arch" } else { &host.cpu_arch },
        host.memory_mib,
        host.kernel.as_deref().unwrap_or("unknown"),
        if host.in_container { "in a container" } else { "not in a container" },
    );
    let rows: Vec<[String; 8]> = detection.devices.iter().map(row).collect();
    let header = [
        "DEVICE",
        "VENDOR",
        "MODEL",
        "ARCH",
        "MEMORY MiB (dedicated/shared/usable)",
        "DRIVER",
        "USABLE",
        "SOURCES",
    ];
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                let _ = write!(s, "{cell:<w$}  ", w = widths[i]);
            }
        }
        s.trim_end().to_string()
    };
    let _ = writeln!(out, "{}", line(&header.map(String::from)));
    for r in &rows {
        let _ = writeln!(out, "{}", line(r));
    }
    let notes: Vec<String> = detection
        .warnings
        .iter()
        .map(|w| format!("  - {w}"))
        .chain(
            detection
                .devices
                .iter()
                .flat_map(|d| d.warnings.iter().map(move |w| format!("  - {}: {w}", d.id))),
        )
        .collect();
    if !notes.is_empty() {
        let _ = writeln!(out, "Warnings:");
        for n in notes {
            let _ = writeln!(out, "{n}");
        }
    }
    out
}

fn row(d: &Device) -> [String; 8] {
    let m = &d.memory;
    let memory = format!(
        "{}/{}/{}{}",
        m.dedicated_mib,
        m.shared_mib,
        m.usable_mib,
        if m.measured { "" } else { " (spec)" }
    );
    let driver = match (&d.driver.name, &d.driver.version) {
        (Some(n), Some(v)) => format!("{n} {v}"),
        (Some(n), None) => n.clone(),
        _ => "-".to_string(),
    };
    let sources: Vec<String> = d
        .sources
        .iter()
        .map(|s| serde_json::to_value(s).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default())
        .collect();
    [
        d.id.clone(),
        d.vendor.as_str().to_string(),
        format!("{}{}", d.model, if d.integrated && d.pci_id.is_some() { " (integrated)" } else { "" }),
        d.arch.clone().unwrap_or_else(|| "?".to_string()),
        memory,
        driver,
        if d.accessible { "yes" } else { "no" }.to_string(),
        sources.join(","),
    ]
}
