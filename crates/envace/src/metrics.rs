//! The catalogue of what a training job records: every metric key with its label, unit and the
//! training-view chart that draws it, and every evaluation category. The studio charts what this
//! declares (it reaches the front end through the typed bindings), and tests fail when a job
//! writes a key or a category the catalogue does not describe, so a renamed metric cannot
//! silently empty a chart.
//!
//! A key or category is a pattern of `/`-separated segments; a segment may hold one
//! placeholder, `{name}`, with literal text around it (`loss_{role}`). A placeholder listed in
//! [`PARTS`] stands for one of its values; any other stands for any non-empty text without `/`.

use serde::Serialize;

/// The values a closed placeholder may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Part {
    /// The placeholder's name, as written between braces.
    pub name: &'static str,
    /// Its values.
    pub values: &'static [&'static str],
}

/// A chart of the training view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Chart {
    /// Stable id (the page's element ids derive from it).
    pub id: &'static str,
    /// Its title.
    pub title: &'static str,
}

/// One family of metric keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Metric {
    /// The key pattern, e.g. `{role}/kl`.
    pub key: &'static str,
    /// What it measures, in words.
    pub label: &'static str,
    /// Its unit: `""` for a plain number or a fraction, else e.g. `s` or `tokens/s`.
    pub unit: &'static str,
    /// The id of the training-view chart that draws it, if one does.
    pub chart: Option<&'static str>,
}

/// One family of evaluation categories (`eval_results.category`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Category {
    /// The category pattern, e.g. `rehearsal/{style}/{budget}`.
    pub pattern: &'static str,
    /// What its rows are, in words.
    pub label: &'static str,
}

/// The whole catalogue, as the bindings export it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Catalogue {
    /// Closed placeholders.
    pub parts: &'static [Part],
    /// The training view's charts, in display order.
    pub charts: &'static [Chart],
    /// Metric keys; a key belongs to the first entry it matches.
    pub metrics: &'static [Metric],
    /// Evaluation categories.
    pub categories: &'static [Category],
}

/// The roles a role-wise metric is split by.
pub const ROLES: [&str; 2] = ["act", "rehearse"];

/// The fidelity scores of a rehearsed response against the real one, in the order and with the
/// names `crate::fidelity::Aggregate::named` gives them.
pub const FIDELITY_SCORES: [&str; 5] = [
    "valid_json",
    "outcome_agreement",
    "key_f1",
    "value_accuracy",
    "exact_match",
];

/// The closed placeholders.
pub const PARTS: &[Part] = &[
    Part {
        name: "role",
        values: &ROLES,
    },
    Part {
        name: "score",
        values: &FIDELITY_SCORES,
    },
    Part {
        name: "style",
        values: &["parallel", "sequential"],
    },
];

/// The training view's charts, in display order.
pub const CHARTS: &[Chart] = &[
    Chart {
        id: "reward",
        title: "Reward per role",
    },
    Chart {
        id: "sft-loss",
        title: "SFT loss",
    },
    Chart {
        id: "advantage",
        title: "Advantage (mean, std)",
    },
    Chart {
        id: "kl",
        title: "KL to the reference",
    },
    Chart {
        id: "entropy",
        title: "Entropy",
    },
    Chart {
        id: "clip",
        title: "Clip fraction",
    },
    Chart {
        id: "length",
        title: "Response length",
    },
    Chart {
        id: "fidelity",
        title: "Fidelity (all tools)",
    },
    Chart {
        id: "fidelity-tool",
        title: "Fidelity per tool (value accuracy)",
    },
];

const fn metric(
    key: &'static str,
    label: &'static str,
    unit: &'static str,
    chart: Option<&'static str>,
) -> Metric {
    Metric {
        key,
        label,
        unit,
        chart,
    }
}

/// Every metric key a job writes; a key belongs to the first entry it matches.
pub const METRICS: &[Metric] = &[
    // SFT.
    metric(
        "sft/loss",
        "SFT cross-entropy per trained token",
        "nats",
        Some("sft-loss"),
    ),
    metric(
        "sft/loss_{role}",
        "SFT cross-entropy of one role",
        "nats",
        Some("sft-loss"),
    ),
    metric(
        "sft/grad_norm",
        "SFT gradient norm before clipping",
        "",
        None,
    ),
    metric("sft/lr", "SFT learning rate", "", None),
    // GRPO, per role.
    metric(
        "{role}/reward",
        "mean reward of the role's samples",
        "",
        Some("reward"),
    ),
    metric(
        "{role}/advantage_mean",
        "mean advantage",
        "",
        Some("advantage"),
    ),
    metric(
        "{role}/advantage_std",
        "advantage standard deviation",
        "",
        Some("advantage"),
    ),
    metric(
        "{role}/kl",
        "KL to the reference per token",
        "nats",
        Some("kl"),
    ),
    metric(
        "{role}/entropy",
        "entropy per token",
        "nats",
        Some("entropy"),
    ),
    metric(
        "{role}/clip_fraction",
        "share of tokens clipped",
        "",
        Some("clip"),
    ),
    metric(
        "{role}/response_length",
        "mean response length",
        "tokens",
        Some("length"),
    ),
    metric("{role}/n_samples", "trained samples of the role", "", None),
    // GRPO, the whole step.
    metric("rl/reward", "mean episode reward", "", Some("reward")),
    metric("rl/success", "share of episodes that succeeded", "", None),
    metric("rl/masked_fraction", "share of episodes masked", "", None),
    metric("rl/turns", "mean turns per episode", "", None),
    metric("rl/grad_norm", "RL gradient norm before clipping", "", None),
    metric("rl/optimizer_updates", "optimizer updates so far", "", None),
    metric(
        "rl/signal_group_fraction",
        "share of groups with a non-zero advantage",
        "",
        None,
    ),
    metric("rl/n_groups", "groups rolled out", "", None),
    metric(
        "rl/dropped_groups",
        "zero-variance groups dropped (dynamic sampling)",
        "",
        None,
    ),
    metric(
        "rl/rollout_rounds",
        "rollout rounds to fill the batch",
        "",
        None,
    ),
    metric("rl/lr", "RL learning rate", "", None),
    metric(
        "rl/family/{family}/success",
        "share of one family's rollouts that succeeded",
        "",
        None,
    ),
    metric(
        "rl/family/{family}/trained_groups",
        "groups of one family in the loss",
        "",
        None,
    ),
    // Drift of the rehearsed world against the real one.
    metric(
        "drift/rehearsed_error_rate",
        "rehearsed error rate",
        "",
        None,
    ),
    metric(
        "drift/real_error_rate",
        "real error rate (same calls replayed)",
        "",
        None,
    ),
    // Fidelity of rehearsed responses.
    metric(
        "fidelity/n_pairs",
        "rehearsed calls replayed and scored",
        "",
        None,
    ),
    metric(
        "fidelity/{score}",
        "fidelity over all tools",
        "",
        Some("fidelity"),
    ),
    metric(
        "fidelity/{tool}/value_accuracy",
        "leaf-value accuracy of one tool",
        "",
        Some("fidelity-tool"),
    ),
    metric("fidelity/{tool}/{score}", "fidelity of one tool", "", None),
    // Held-out evaluations (the whole set's figures, also in eval_results).
    metric("eval/{benchmark}/{metric}", "held-out figure", "", None),
    // Speed.
    metric("perf/step_time_secs", "wall time of the step", "s", None),
    metric(
        "perf/rollout_secs",
        "wall time of the step's rollouts",
        "s",
        None,
    ),
    metric(
        "perf/generated_tokens_per_sec",
        "generated tokens per second",
        "tokens/s",
        None,
    ),
    metric(
        "perf/tokens_per_sec",
        "trained tokens per second",
        "tokens/s",
        None,
    ),
    metric(
        "perf/update_secs",
        "wall time of the step's update (losses, backward, optimizer)",
        "s",
        None,
    ),
    metric(
        "perf/generated_tokens",
        "tokens generated in the step",
        "tokens",
        None,
    ),
    metric(
        "perf/peak_rss_mib",
        "peak resident memory of the process so far",
        "MiB",
        None,
    ),
];

/// Every evaluation category.
pub const CATEGORIES: &[Category] = &[
    Category {
        pattern: "all",
        label: "every held-out task",
    },
    Category {
        pattern: "family/{family}",
        label: "the held-out tasks of one family",
    },
    Category {
        pattern: "rehearsal/{style}/{budget}",
        label: "a rehearsal-budget point: committed attempts after N imagined ones",
    },
];

/// The catalogue as the bindings export it.
pub const CATALOGUE: Catalogue = Catalogue {
    parts: PARTS,
    charts: CHARTS,
    metrics: METRICS,
    categories: CATEGORIES,
};

/// Whether `text` matches `pattern` (see the module's rules).
pub fn matches(pattern: &str, text: &str) -> bool {
    let pattern_segments: Vec<&str> = pattern.split('/').collect();
    let segments: Vec<&str> = text.split('/').collect();
    pattern_segments.len() == segments.len()
        && pattern_segments
            .iter()
            .zip(&segments)
            .all(|(p, s)| segment_matches(p, s))
}

fn segment_matches(pattern: &str, segment: &str) -> bool {
    let Some((prefix, rest)) = pattern.split_once('{') else {
        return pattern == segment;
    };
    let Some((name, suffix)) = rest.split_once('}') else {
        return pattern == segment;
    };
    let Some(middle) = segment
        .strip_prefix(prefix)
        .and_then(|s| s.strip_suffix(suffix))
    else {
        return false;
    };
    match PARTS.iter().find(|part| part.name == name) {
        Some(part) => part.values.contains(&middle),
        None => !middle.is_empty(),
    }
}

/// The catalogue entry of a metric key: the first that matches.
pub fn metric_of(key: &str) -> Option<&'static Metric> {
    METRICS.iter().find(|m| matches(m.key, key))
}

/// The catalogue entry of an evaluation category.
pub fn category_of(category: &str) -> Option<&'static Category> {
    CATEGORIES.iter().find(|c| matches(c.pattern, category))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_find_their_entries() {
        let key_of = |key: &str| metric_of(key).map(|m| m.key);
        assert_eq!(key_of("sft/loss"), Some("sft/loss"));
        assert_eq!(key_of("sft/loss_act"), Some("sft/loss_{role}"));
        assert_eq!(key_of("sft/loss_rl"), None);
        assert_eq!(key_of("rehearse/kl"), Some("{role}/kl"));
        assert_eq!(key_of("rl/reward"), Some("rl/reward"));
        assert_eq!(key_of("rl/kl"), None);
        assert_eq!(
            key_of("rl/family/fn_strings/success"),
            Some("rl/family/{family}/success")
        );
        assert_eq!(key_of("fidelity/key_f1"), Some("fidelity/{score}"));
        assert_eq!(key_of("fidelity/n_pairs"), Some("fidelity/n_pairs"));
        assert_eq!(
            key_of("fidelity/get_weather/value_accuracy"),
            Some("fidelity/{tool}/value_accuracy")
        );
        assert_eq!(
            key_of("fidelity/get_weather/key_f1"),
            Some("fidelity/{tool}/{score}")
        );
        assert_eq!(key_of("fidelity/get_weather/nonsense"), None);
        assert_eq!(
            key_of("eval/generated_test/pass@4_se"),
            Some("eval/{benchmark}/{metric}")
        );
        assert_eq!(key_of("eval//score"), None);
        assert_eq!(key_of("perf/tokens_per_sec/extra"), None);
    }

    #[test]
    fn categories_find_their_entries() {
        let of = |c: &str| category_of(c).map(|c| c.pattern);
        assert_eq!(of("all"), Some("all"));
        assert_eq!(of("family/fn_arithmetic"), Some("family/{family}"));
        assert_eq!(
            of("rehearsal/parallel/4"),
            Some("rehearsal/{style}/{budget}")
        );
        assert_eq!(of("rehearsal/diagonal/4"), None);
        assert_eq!(of("family"), None);
    }

    #[test]
    fn every_chart_is_drawn_and_every_reference_is_declared() {
        for chart in CHARTS {
            assert!(
                METRICS.iter().any(|m| m.chart == Some(chart.id)),
                "chart {} draws nothing",
                chart.id
            );
        }
        for metric in METRICS {
            if let Some(id) = metric.chart {
                assert!(
                    CHARTS.iter().any(|c| c.id == id),
                    "{}: no chart {id}",
                    metric.key
                );
            }
        }
        let mut keys: Vec<&str> = METRICS.iter().map(|m| m.key).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), METRICS.len(), "a key is declared twice");
    }
}
