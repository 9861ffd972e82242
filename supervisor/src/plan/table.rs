//! Human-readable plan: per engine the choice, then every candidate with its reason.

use std::fmt::Write;

use super::{Plan, Proof};

pub fn render(plan: &Plan, verbose: bool) -> String {
    let mut out = String::new();
    for group in &plan.groups {
        let proof = match &group.proof {
            Proof::Unproven => "unproven (no smoke start)".to_string(),
            Proof::Proven { cached: true } => "proven (cached smoke start)".to_string(),
            Proof::Proven { cached: false } => "proven (smoke start)".to_string(),
            Proof::Failed { reason } => format!("FAILED: {reason}"),
        };
        let _ = writeln!(
            out,
            "{} on {}: variant {}, profile {}, port {} — {proof}",
            group.name,
            group.devices.join(", "),
            group.choice.variant,
            group.choice.profile,
            group.choice.launch.port
        );
        let _ = writeln!(
            out,
            "  command: {} {}",
            group.choice.launch.program,
            group.choice.launch.args.join(" ")
        );
        for (k, v) in &group.choice.launch.env {
            let _ = writeln!(out, "  env: {k}={v}");
        }
        if !group.fallbacks.is_empty() {
            let names: Vec<String> =
                group.fallbacks.iter().map(|c| format!("{}/{}", c.variant, c.profile)).collect();
            let _ = writeln!(out, "  falls back to: {}", names.join(", "));
        }
        for c in group.candidates.iter().filter(|c| verbose || c.accepted || c.profile == "*") {
            let _ = writeln!(
                out,
                "  {} {:<7} {:<32} {}",
                if c.accepted { "✓" } else { "✗" },
                c.variant,
                c.profile,
                c.reason
            );
        }
    }
    for u in &plan.unplanned {
        let _ = writeln!(out, "{}: no engine — {}", u.device, u.reason);
    }
    out
}
