//! `scripts/bench-compare`: idem's variants (a by default) on this build
//! against an earlier build's binary, side by side in one command (README,
//! "Benchmark").
//!
//! Both builds run the same harness: the same workload, the same topic
//! layout, the same config (less what the earlier binary would refuse, see
//! [`idem_tests::use_idem_bin`]), the same checks of the answer. Rounds
//! alternate the order (base first, then this build first, …) so that a
//! drift of the machine over the run (page cache, PostgreSQL's autovacuum,
//! a warming broker) falls on both sides alike; each side's figure is the
//! median of its rounds.

use std::path::PathBuf;

use serde::Serialize;

use crate::{Kind, Row, VARIANTS, idem_variant};

/// The build to compare against.
pub struct Base {
    pub label: String,
    pub bin: PathBuf,
    /// Whether it seals dead letters (builds before that refuse
    /// `[dlq] key_file`).
    pub sealed: bool,
}

#[derive(Serialize)]
pub struct Comparison {
    pub base: String,
    pub rounds: Vec<(usize, String, Row)>,
    pub medians: Vec<Median>,
}

/// One variant's medians on both builds.
#[derive(Serialize)]
pub struct Median {
    pub variant: &'static str,
    pub http: bool,
    pub base: f64,
    pub this: f64,
}

const THIS: &str = "this build";

/// The idem variants whose letter is in `letters`, with and without HTTP
/// (f with it only, o without), `rounds` times per build.
pub async fn run(base: &Base, letters: &str, orders: i64, rounds: usize) -> anyhow::Result<Comparison> {
    let variants: Vec<(&'static str, Kind)> = VARIANTS
        .iter()
        .filter(|v| matches!(v.kind, Kind::Idem(_) | Kind::Emit))
        .filter(|v| v.name.chars().next().is_some_and(|c| letters.contains(c)))
        .map(|v| (v.name, v.kind))
        .collect();
    anyhow::ensure!(!variants.is_empty(), "compare: no idem variant among {letters:?} (the ceiling d runs no idem)");
    let mut runs = Vec::new();
    for round in 1..=rounds {
        let order: [bool; 2] = if round % 2 == 1 { [true, false] } else { [false, true] };
        for is_base in order {
            let label = if is_base { base.label.clone() } else { THIS.to_owned() };
            idem_tests::use_idem_bin(is_base.then(|| base.bin.clone()), !is_base || base.sealed);
            for http in [false, true] {
                for (name, kind) in variants.iter().filter(|(_, kind)| measured(*kind, http)) {
                    eprintln!(
                        "bench: round {round}: {name} on {label} ({})",
                        if http { "with HTTP" } else { "no HTTP" }
                    );
                    let row = variant(name, *kind, http, orders).await?;
                    eprintln!("bench:   {:.0} records/s", row.events_per_s);
                    runs.push((round, label.clone(), row));
                }
            }
        }
    }
    idem_tests::use_idem_bin(None, true);
    let median_of = |label: &str, variant: &str, http: bool| {
        let mut rates: Vec<f64> = runs
            .iter()
            .filter(|(_, l, r)| l == label && r.variant == variant && r.http == http)
            .map(|(_, _, r)| r.events_per_s)
            .collect();
        rates.sort_by(f64::total_cmp);
        let n = rates.len();
        match n {
            0 => f64::NAN,
            // Even: the mean of the middle two.
            _ if n.is_multiple_of(2) => (rates[n / 2 - 1] + rates[n / 2]) / 2.0,
            _ => rates[n / 2],
        }
    };
    let mut medians = Vec::new();
    for http in [false, true] {
        for (variant, _) in variants.iter().filter(|(_, kind)| measured(*kind, http)) {
            let (old, new) = (median_of(&base.label, variant, http), median_of(THIS, variant, http));
            medians.push(Median { variant, http, base: old, this: new });
        }
    }
    Ok(Comparison { base: base.label.clone(), rounds: runs, medians })
}

/// Whether `kind` runs with HTTP (`http`) or without: f only with it (its
/// provider's drops are the point), o only without (as in the benchmark).
fn measured(kind: Kind, http: bool) -> bool {
    match kind {
        Kind::Idem(shape) => http || !shape.drops,
        Kind::Emit => !http,
        _ => false,
    }
}

/// One round of the variant `name`.
async fn variant(name: &'static str, kind: Kind, http: bool, orders: i64) -> anyhow::Result<Row> {
    match kind {
        Kind::Idem(shape) => idem_variant(name, shape, http, orders).await,
        Kind::Emit => Ok(crate::emit::variant(name, orders).await?.0),
        _ => anyhow::bail!("compare: {name} runs no idem"),
    }
}

/// The rounds and the medians, in Markdown.
pub fn render(c: &Comparison) -> String {
    let mut text = String::from(
        "| round | build | variant | HTTP | records/s | p50 ms | p99 ms | CPU s |\n|---|---|---|---|---|---|---|---|\n",
    );
    let http = |yes: bool| if yes { "yes" } else { "no" };
    for (round, label, r) in &c.rounds {
        text.push_str(&format!(
            "| {round} | {label} | {} | {} | {:.0} | {} | {} | {:.1} |\n",
            r.variant,
            http(r.http),
            r.events_per_s,
            r.p50_ms.unwrap_or(0),
            r.p99_ms.unwrap_or(0),
            r.cpu_s,
        ));
    }
    text.push_str(&format!(
        "\n| variant | HTTP | median records/s on {} | on this build | this / base |\n|---|---|---|---|---|\n",
        c.base
    ));
    for m in &c.medians {
        text.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {:.3} |\n",
            m.variant,
            http(m.http),
            m.base,
            m.this,
            m.this / m.base
        ));
    }
    // The benchmark's ratios of a to b and to c, on each build.
    for yes in [false, true] {
        let of = |letter: char, base: bool| {
            c.medians
                .iter()
                .find(|m| m.http == yes && m.variant.starts_with(letter))
                .map(|m| if base { m.base } else { m.this })
        };
        for other in ['b', 'c'] {
            if let (Some(a0), Some(x0), Some(a1), Some(x1)) =
                (of('a', true), of(other, true), of('a', false), of(other, false))
            {
                let (before, now) = (a0 / x0, a1 / x1);
                text.push_str(&format!(
                    "\n{}: a/{other} = {before:.2} on {}, {now:.2} on this build ({:+.1}%)",
                    if yes { "with HTTP" } else { "without HTTP" },
                    c.base,
                    (now / before - 1.0) * 100.0
                ));
            }
        }
    }
    text.push('\n');
    text
}
