//! Results: one value per server, measurement and round; the report is the median over rounds,
//! mountfs/peer ratios, and issue 6's targets checked against those medians.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::measure::Sample;

/// Which direction is better for a figure (ratios are always mountfs/peer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Higher,
    Lower,
}

#[derive(Debug)]
struct Row {
    label: String,
    better: Better,
    values: BTreeMap<String, Vec<f64>>,
}

/// All figures of a run.
#[derive(Debug)]
pub struct Table {
    servers: Vec<&'static str>,
    rows: Vec<Row>,
    failures: BTreeMap<(String, String), (usize, usize)>,
    /// (operation, server, open-file limit, failed calls, calls, first failure)
    limited: Vec<(String, String, u64, usize, usize, Option<String>)>,
    notes: Vec<String>,
}

pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "–".to_owned()
    } else if v >= 1000.0 {
        let whole = format!("{v:.0}");
        let mut out = String::new();
        for (i, c) in whole.chars().enumerate() {
            if i > 0 && (whole.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

impl Table {
    pub fn new(servers: Vec<&'static str>) -> Self {
        Self {
            servers,
            rows: Vec::new(),
            failures: BTreeMap::new(),
            limited: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn record(&mut self, label: &str, better: Better, server: &str, value: f64) {
        let index = match self.rows.iter().position(|r| r.label == label) {
            Some(i) => i,
            None => {
                self.rows.push(Row {
                    label: label.to_owned(),
                    better,
                    values: BTreeMap::new(),
                });
                self.rows.len() - 1
            }
        };
        self.rows[index]
            .values
            .entry(server.to_owned())
            .or_default()
            .push(value);
    }

    /// Records a measurement's figures; a measurement with any failed call counts as failed
    /// (NaN), so the time it took to fail is never reported as a speed.
    pub fn record_sample(&mut self, label: &str, server: &str, sample: &Sample) {
        let figure = |v: f64| if sample.failures == 0 { v } else { f64::NAN };
        let figures = [
            ("calls/s", Better::Higher, sample.rate()),
            ("p50 ms", Better::Lower, sample.quantile_ms(0.5)),
            ("p99 ms", Better::Lower, sample.quantile_ms(0.99)),
            (
                "server CPU ms/call",
                Better::Lower,
                sample.cpu_ms_per_call(),
            ),
        ];
        for (what, better, value) in figures {
            self.record(&format!("{label}: {what}"), better, server, figure(value));
        }
        let seen = self
            .failures
            .entry((label.to_owned(), server.to_owned()))
            .or_default();
        seen.0 += sample.failures;
        seen.1 += sample.calls;
    }

    /// A robustness check: `sample` ran under a soft open-file limit of `nofile`.
    pub fn record_limited(&mut self, op: &str, server: &str, nofile: u64, sample: &Sample) {
        self.limited.push((
            op.to_owned(),
            server.to_owned(),
            nofile,
            sample.failures,
            sample.calls,
            sample.first_failure.clone(),
        ));
    }

    pub fn note(&mut self, note: String) {
        self.notes.push(note);
    }

    /// The median of a figure over the rounds where it did not fail; NaN if it failed in
    /// every round, `None` if it was not measured.
    pub fn value(&self, label: &str, server: &str) -> Option<f64> {
        let row = self.rows.iter().find(|r| r.label == label)?;
        let mut values: Vec<f64> = row
            .values
            .get(server)?
            .iter()
            .copied()
            .filter(|v| !v.is_nan())
            .collect();
        Some(median(&mut values))
    }

    fn columns(&self) -> Vec<&str> {
        let mut columns: Vec<&str> = self.servers.clone();
        if self.rows.iter().any(|r| r.values.contains_key("rg")) {
            columns.push("rg");
        }
        columns
    }

    /// The report, as Markdown.
    pub fn render(&self, rounds: usize, machine: &str, took: Duration) -> String {
        let mut out = String::new();
        let columns = self.columns();
        let ours = columns[0];
        let peers = &columns[1..];
        let _ = writeln!(
            out,
            "### Results (median of {rounds} rounds; ratios are {ours}/peer)\n"
        );
        let _ = write!(out, "| measurement |");
        for c in &columns {
            let _ = write!(out, " {c} |");
        }
        for p in peers {
            let _ = write!(out, " {ours}/{p} |");
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "|---|{}", "---|".repeat(columns.len() + peers.len()));
        for row in &self.rows {
            let arrow = match row.better {
                Better::Higher => "↑",
                Better::Lower => "↓",
            };
            let _ = write!(out, "| {} {arrow} |", row.label);
            for c in &columns {
                let cell = match self.value(&row.label, c) {
                    None => "–".to_owned(),
                    Some(v) if v.is_nan() => "fails".to_owned(),
                    Some(v) => number(v),
                };
                let _ = write!(out, " {cell} |");
            }
            let mine = self.value(&row.label, ours);
            for p in peers {
                match (mine, self.value(&row.label, p)) {
                    (Some(a), Some(b)) if b > 0.0 && a.is_finite() && b.is_finite() => {
                        let _ = write!(out, " {:.2}× |", a / b);
                    }
                    _ => {
                        let _ = write!(out, " – |");
                    }
                }
            }
            let _ = writeln!(out);
        }
        let _ = writeln!(
            out,
            "\n↑ higher is better, ↓ lower is better. \"fails\": some call of that measurement failed \
             in every round (see below), so no speed is given.\n"
        );

        let failed: Vec<String> = self
            .failures
            .iter()
            .filter(|(_, (f, _))| *f > 0)
            .map(|((label, server), (f, n))| {
                format!("- {server}, {label}: {f} of {n} calls failed")
            })
            .collect();
        let _ = writeln!(out, "### Failed calls (all rounds)\n");
        if failed.is_empty() {
            let _ = writeln!(out, "None.");
        } else {
            let _ = writeln!(out, "{}", failed.join("\n"));
        }
        if let Some((_, _, nofile, ..)) = self.limited.first() {
            let _ = writeln!(
                out,
                "\n### 16 concurrent calls under a soft open-file limit of {nofile}\n"
            );
            for (op, server, _, f, n, first) in &self.limited {
                let example = first
                    .as_ref()
                    .map(|t| format!(", e.g. \"{}\"", t.chars().take(80).collect::<String>()))
                    .unwrap_or_default();
                let _ = writeln!(out, "- {server}, {op}: {f} of {n} failed{example}");
            }
        }
        let _ = writeln!(
            out,
            "\n### Targets (issues 6 and 15), from the medians above\n"
        );
        for line in self.targets(ours) {
            let _ = writeln!(out, "{line}");
        }
        if !self.notes.is_empty() {
            let _ = writeln!(out, "\n### Notes from the run\n");
            let mut notes = self.notes.clone();
            notes.dedup();
            for note in notes {
                let _ = writeln!(out, "- {note}");
            }
        }
        let _ = writeln!(
            out,
            "\n### Machine\n\n{machine}\n- run took {:.0} s",
            took.as_secs_f64()
        );
        out
    }

    fn check(&self, what: &str, ok: Option<bool>, detail: String) -> String {
        let mark = match ok {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "not measured",
        };
        format!("- {what}: **{mark}** ({detail})")
    }

    fn ratio_check(
        &self,
        label: &str,
        peer: &str,
        ours: &str,
        limit: f64,
        at_most: bool,
    ) -> String {
        let (mine, theirs) = (self.value(label, ours), self.value(label, peer));
        let ratio = mine.zip(theirs).map(|(a, b)| a / b);
        let ok = ratio.map(|r| if at_most { r <= limit } else { r >= limit });
        let sign = if at_most { "≤" } else { "≥" };
        self.check(
            &format!("{label}, {ours}/{peer} {sign} {limit}"),
            ok,
            ratio.map_or("–".to_owned(), |r| format!("{r:.3}")),
        )
    }

    fn targets(&self, ours: &str) -> Vec<String> {
        let mut lines = Vec::new();
        let small = ["read_file 2 KiB", "ls 36 entries"];
        let modes = ["sequential", "16 in flight"];
        for (peer, cpu_limit, rate_limit) in
            [("reference", 0.1, 3.0), ("rust-mcp-filesystem", 0.5, 1.5)]
        {
            if !self.servers.contains(&peer) {
                continue;
            }
            for op in small {
                for mode in modes {
                    let label = format!("{op}, {mode}");
                    lines.push(self.ratio_check(
                        &format!("{label}: server CPU ms/call"),
                        peer,
                        ours,
                        cpu_limit,
                        true,
                    ));
                    lines.push(self.ratio_check(
                        &format!("{label}: calls/s"),
                        peer,
                        ours,
                        rate_limit,
                        false,
                    ));
                }
            }
        }
        // Issue 31: at an agent's pace (one call, then a pause) a call costs the server at most
        // 1.2x what it costs pipelined, and a paced read at most 1/4 of the reference's paced.
        for op in small {
            let cpu = |mode: &str| self.value(&format!("{op}, {mode}: server CPU ms/call"), ours);
            let ratio = cpu("paced 2 ms apart")
                .zip(cpu("16 in flight"))
                .map(|(paced, pipelined)| paced / pipelined);
            lines.push(self.check(
                &format!("{op}: server CPU paced / 16 in flight ≤ 1.2"),
                ratio.map(|r| r <= 1.2),
                ratio.map_or("–".to_owned(), |r| format!("{r:.2}")),
            ));
        }
        if self.servers.contains(&"reference") {
            lines.push(self.ratio_check(
                "read_file 2 KiB, paced 2 ms apart: server CPU ms/call",
                "reference",
                ours,
                0.25,
                true,
            ));
        }
        let spawn = self.value("spawn → initialized, ms", ours);
        lines.push(self.check(
            "spawn → initialized ≤ 10 ms",
            spawn.map(|v| v <= 10.0),
            spawn.map_or("–".to_owned(), |v| format!("{v:.1} ms")),
        ));
        // Issue 15: at most rg's time end to end on the 2,000-file trees, 1.1× on the whole
        // tree; a glob's server CPU at most 1.2× rg's user + system time.
        for op in ["glob **/*.toml", "grep", "grep content"] {
            for (scope, limit) in [
                ("2,000 files", 1.0),
                ("2,000 crate files", 1.0),
                ("20,000 files", 1.1),
            ] {
                let label = format!("{op}, {scope}, sequential: p50 ms");
                lines.push(self.ratio_check(&label, "rg", ours, limit, true));
                if op.starts_with("glob") {
                    let label = format!("{op}, {scope}, sequential: server CPU ms/call");
                    lines.push(self.ratio_check(&label, "rg", ours, 1.2, true));
                }
            }
        }
        let key = (
            "grep, 2,000 files, 16 in flight".to_owned(),
            ours.to_owned(),
        );
        let failures = self.failures.get(&key);
        lines.push(self.check(
            "16 concurrent greps all succeed",
            failures.map(|(f, _)| *f == 0),
            failures.map_or("–".to_owned(), |(f, n)| format!("{f} of {n} failed")),
        ));
        let rss = self.value("peak RSS under 16 in flight, MiB", ours);
        lines.push(self.check(
            "peak RSS under the concurrent load ≤ 20 MiB",
            rss.map(|v| v <= 20.0),
            rss.map_or("–".to_owned(), |v| format!("{v:.1} MiB")),
        ));
        lines
    }
}

/// Facts about the machine, as Markdown list items.
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or("unknown".to_owned(), |kib| {
            format!("{:.1} GiB", kib / 1024.0 / 1024.0)
        });
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let nofile = std::fs::read_to_string("/proc/self/limits")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .map(|l| l.split_whitespace().nth(3).unwrap_or("?").to_owned())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "- CPU: {model}, {cores} cores (nproc)\n- memory: {memory}\n- kernel: Linux {}\n- open-file limit (soft) inherited by every server: {nofile}",
        kernel.trim()
    )
}
