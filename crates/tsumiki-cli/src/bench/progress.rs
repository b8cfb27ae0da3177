//! Progress bars on standard error, the same for every family: hidden with `--quiet`, and by
//! indicatif itself when standard error is not a terminal.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

use super::plot::si;

/// `{rate}`: the rate as people read it (`48.1k/s`, not indicatif's `48123.9984/s`).
fn rate(state: &ProgressState, w: &mut dyn std::fmt::Write) {
    let _ = write!(w, "{}/s", si(state.per_sec()));
}

fn target(quiet: bool) -> ProgressDrawTarget {
    if quiet {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr()
    }
}

/// A bar of `len` units (`unit`: "records", "txns", "ops"...), labelled `prefix`.
pub fn bar(quiet: bool, len: u64, prefix: impl Into<String>, unit: &str) -> ProgressBar {
    let b = ProgressBar::with_draw_target(Some(len), target(quiet));
    b.set_style(
        ProgressStyle::with_template(&format!(
            "{{prefix:>40}} [{{bar:30}}] {{human_pos}}/{{human_len}} {unit} {{rate}} eta {{eta}}"
        ))
        .expect("a valid template")
        .with_key("rate", rate)
        .progress_chars("=> "),
    );
    b.set_prefix(prefix.into());
    b
}

/// A counter without a known end (a run that lasts a duration), ticking on its own; with
/// an empty `unit`, only the elapsed time (a phase such as generating or reopening).
pub fn spinner(quiet: bool, prefix: impl Into<String>, unit: &str) -> ProgressBar {
    let b = ProgressBar::with_draw_target(None, target(quiet));
    let template = if unit.is_empty() {
        "{prefix:>40} {spinner} {elapsed}".to_string()
    } else {
        format!("{{prefix:>40}} {{spinner}} {{elapsed}} {{human_pos}} {unit} {{rate}}")
    };
    b.set_style(ProgressStyle::with_template(&template).expect("a valid template").with_key("rate", rate));
    b.set_prefix(prefix.into());
    b.enable_steady_tick(Duration::from_millis(200));
    b
}
