//! Rows of a training batch that begin with the same tokens (a GRPO group's completions of
//! one prompt) run as one row holding the shared tokens once, each sequence's own tokens after
//! them, where that costs less than running them apart.
//!
//! In the packed row a sequence's own tokens keep the positions they have in the sequence and
//! attend to the shared tokens and to their own earlier tokens only, so every hidden state is
//! the one the sequence gets alone. What packing saves is the shared tokens' linear layers for
//! every sequence but one; what it costs is attention work, since the fused attention scans a
//! query's keys up to itself and masks the other sequences' keys in between. [`PackCost`]
//! weighs the two from the model's sizes.

use crate::model::TransformerConfig;

/// The work of one token through the linear layers against that of one query-key pair of
/// attention, both per layer and summed over heads, as multiply-adds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PackCost {
    /// Query-key pairs that cost as much as one token's linear layers.
    pairs_per_token: f64,
}

impl PackCost {
    /// From the model's sizes: the projections and the feed-forward against the scores and
    /// the weighted sum of values, a pair counted twice for what its multiply-adds leave out
    /// (an exponential, and the backward's recomputation of the scores).
    pub(crate) fn of(cfg: &TransformerConfig) -> Self {
        let (h, d) = (cfg.hidden_size as f64, cfg.head_dim as f64);
        let (heads, kv) = (cfg.n_heads as f64, cfg.n_kv_heads as f64);
        let per_token =
            h * ((heads + 2.0 * kv) * d + heads * d + 3.0 * cfg.intermediate_size as f64);
        let per_pair = 2.0 * 2.0 * heads * d;
        PackCost {
            pairs_per_token: per_token / per_pair.max(1.0),
        }
    }

    /// Sequences of `lens` tokens run as one row sharing their first `prefix` tokens.
    fn packed(&self, prefix: usize, lens: &[usize]) -> f64 {
        let p = prefix as f64;
        let mut tokens = p;
        let mut pairs = p * p / 2.0;
        let mut before = p;
        for &len in lens {
            let own = (len - prefix) as f64;
            tokens += own;
            pairs += own * (before + own / 2.0);
            before += own;
        }
        tokens * self.pairs_per_token + pairs
    }

    /// One sequence of `len` tokens alone.
    fn alone(&self, len: usize) -> f64 {
        let n = len as f64;
        n * self.pairs_per_token + n * n / 2.0
    }
}

/// The packed rows of a batch, ready for `Policy::train_token_stats_laid_out`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Packed {
    /// Packed rows.
    pub n_rows: usize,
    /// Tokens per packed row (padding included).
    pub width: usize,
    /// Token ids, `n_rows × width` (padding 0).
    pub input: Vec<u32>,
    /// Each token's position in its own sequence.
    pub positions: Vec<u32>,
    /// `n_rows × width × width`: 1 where a query sees a key.
    pub allowed: Vec<u8>,
    /// For each position `row × l + t` of the batch: the flat index `packed_row × width + i`
    /// where it runs (padding positions map to 0 and must not be asked for).
    pub place: Vec<u32>,
}

/// One packed row: the batch rows in it and how many tokens they share.
struct Pack {
    members: Vec<usize>,
    prefix: usize,
}

/// A packed row holds at most this many times the batch's row length: the attention's
/// buffers grow with the square of a row's length.
const MAX_WIDTH_FACTOR: usize = 4;

/// Packs the rows of `input` (`lens.len()` rows of `l`, row `r`'s tokens its first `lens[r]`)
/// that share leading tokens where [`PackCost`] says it saves work, no packed row longer than
/// [`MAX_WIDTH_FACTOR`] × `l`; `None` when no two rows are worth packing.
pub(crate) fn pack_shared_prefixes(
    input: &[u32],
    lens: &[usize],
    l: usize,
    cost: PackCost,
) -> Option<Packed> {
    let tokens = |row: usize| &input[row * l..row * l + lens[row]];
    let mut packs: Vec<Pack> = Vec::new();
    for row in 0..lens.len() {
        let mut best: Option<(usize, usize, f64)> = None;
        for (idx, pack) in packs.iter().enumerate() {
            let first = tokens(pack.members[0]);
            let shared = first
                .iter()
                .zip(tokens(row))
                .take(pack.prefix)
                .take_while(|(a, b)| a == b)
                .count();
            if shared == 0 {
                continue;
            }
            let mut lens_with: Vec<usize> = pack.members.iter().map(|&m| lens[m]).collect();
            let own: usize = lens_with
                .iter()
                .chain([&lens[row]])
                .map(|n| n - shared)
                .sum();
            if shared + own > MAX_WIDTH_FACTOR * l {
                continue;
            }
            let before = cost.packed(pack.prefix, &lens_with) + cost.alone(lens[row]);
            lens_with.push(lens[row]);
            let gain = before - cost.packed(shared, &lens_with);
            if gain > 0.0 && best.is_none_or(|(_, _, g)| gain > g) {
                best = Some((idx, shared, gain));
            }
        }
        match best {
            Some((idx, shared, _)) => {
                packs[idx].members.push(row);
                packs[idx].prefix = shared;
            }
            None => packs.push(Pack {
                members: vec![row],
                prefix: lens[row],
            }),
        }
    }
    if packs.len() == lens.len() {
        return None;
    }
    let row_len = |pack: &Pack| {
        pack.prefix
            + pack
                .members
                .iter()
                .map(|&m| lens[m] - pack.prefix)
                .sum::<usize>()
    };
    let width = packs.iter().map(row_len).max().unwrap_or(0).max(1);
    let n_rows = packs.len();
    let mut out = Packed {
        n_rows,
        width,
        input: vec![0; n_rows * width],
        positions: vec![0; n_rows * width],
        allowed: vec![0; n_rows * width * width],
        place: vec![0; lens.len() * l],
    };
    for (p, pack) in packs.iter().enumerate() {
        let base = p * width;
        let prefix = pack.prefix;
        let first = tokens(pack.members[0]);
        // The shared tokens: causal among themselves.
        for i in 0..prefix {
            out.input[base + i] = first[i];
            out.positions[base + i] = i as u32;
            let mask = &mut out.allowed[(base + i) * width..(base + i + 1) * width];
            mask[..=i].fill(1);
        }
        // Each member's own tokens: the shared ones and its own up to itself.
        let mut start = prefix;
        for &member in &pack.members {
            let own = tokens(member);
            for t in 0..prefix {
                out.place[member * l + t] = (base + t) as u32;
            }
            for (t, &token) in own.iter().enumerate().skip(prefix) {
                let i = start + t - prefix;
                out.input[base + i] = token;
                out.positions[base + i] = t as u32;
                out.place[member * l + t] = (base + i) as u32;
                let mask = &mut out.allowed[(base + i) * width..(base + i + 1) * width];
                mask[..prefix].fill(1);
                mask[start..=i].fill(1);
            }
            start += own.len() - prefix;
        }
        // Padding sees only itself (a finite softmax; nothing real sees it).
        for i in start..width {
            out.allowed[(base + i) * width + i] = 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost() -> PackCost {
        PackCost {
            pairs_per_token: 750.0,
        }
    }

    #[test]
    fn a_groups_rows_share_their_prompt_and_see_only_it_and_themselves() {
        let l = 6;
        // Rows 0 and 2 share [7, 8, 9]; row 1 shares nothing; row 3 is row 0 cut short.
        #[rustfmt::skip]
        let input = [
            7, 8, 9, 1, 2, 0,
            5, 5, 0, 0, 0, 0,
            7, 8, 9, 3, 0, 0,
            7, 8, 9, 1, 0, 0,
        ];
        let lens = [5, 2, 4, 4];
        let packed = pack_shared_prefixes(&input, &lens, l, cost()).unwrap();
        assert_eq!(packed.n_rows, 2);
        // Row 0's pack: [7 8 9] then row 0's [1 2], row 2's [3], row 3's [1].
        assert_eq!(packed.width, 7);
        assert_eq!(&packed.input[..7], &[7, 8, 9, 1, 2, 3, 1]);
        assert_eq!(&packed.positions[..7], &[0, 1, 2, 3, 4, 3, 3]);
        assert_eq!(&packed.input[7..9], &[5, 5]);
        assert_eq!(&packed.positions[7..9], &[0, 1]);
        let seen = |row: usize, q: usize| -> Vec<usize> {
            let start = (row * packed.width + q) * packed.width;
            (0..packed.width)
                .filter(|&k| packed.allowed[start + k] == 1)
                .collect()
        };
        assert_eq!(seen(0, 1), [0, 1]);
        assert_eq!(seen(0, 4), [0, 1, 2, 3, 4]);
        assert_eq!(seen(0, 5), [0, 1, 2, 5]);
        assert_eq!(seen(0, 6), [0, 1, 2, 6]);
        assert_eq!(seen(1, 1), [0, 1]);
        assert_eq!(seen(1, 4), [4], "padding sees itself");
        // Where each batch position runs.
        assert_eq!(&packed.place[0..5], &[0, 1, 2, 3, 4]);
        assert_eq!(&packed.place[6..8], &[7, 8]);
        assert_eq!(&packed.place[12..16], &[0, 1, 2, 5]);
        assert_eq!(&packed.place[18..22], &[0, 1, 2, 6]);
    }

    #[test]
    fn rows_are_packed_only_where_it_saves_work() {
        let l = 400;
        let row = |shared: &[u32], own: u32, len: usize| -> Vec<u32> {
            let mut r: Vec<u32> = shared.to_vec();
            r.extend((r.len()..len).map(|i| own * 1_000 + i as u32));
            r.resize(l, 0);
            r
        };
        // A long shared prompt and short completions: packed.
        let prompt: Vec<u32> = (1..=90).collect();
        let input: Vec<u32> = (0..4).flat_map(|g| row(&prompt, g + 1, 150)).collect();
        let packed = pack_shared_prefixes(&input, &[150; 4], l, cost()).unwrap();
        assert_eq!((packed.n_rows, packed.width), (1, 90 + 4 * 60));
        // A short shared system line and long own parts: each row runs alone.
        let system: Vec<u32> = (1..=10).collect();
        let input: Vec<u32> = (0..4).flat_map(|g| row(&system, g + 1, 400)).collect();
        assert_eq!(pack_shared_prefixes(&input, &[400; 4], l, cost()), None);
        // Nothing shared.
        let input: Vec<u32> = (0..3).flat_map(|g| row(&[], g + 1, 50)).collect();
        assert_eq!(pack_shared_prefixes(&input, &[50; 3], l, cost()), None);
        // Sixteen rows of a 60-token prompt and 40 own tokens, in rows of 100: eight to a
        // packed row, whose width stays within four rows'.
        let (l, prompt) = (100, &prompt[..60]);
        let input: Vec<u32> = (0..16)
            .flat_map(|g| {
                let mut r = row(prompt, g + 1, 100);
                r.truncate(l);
                r
            })
            .collect();
        let packed = pack_shared_prefixes(&input, &[100; 16], l, cost()).unwrap();
        assert_eq!((packed.n_rows, packed.width), (2, 60 + 8 * 40));
    }

    #[test]
    fn the_tiny_models_cost_weighs_a_token_as_about_750_pairs() {
        let tiny = crate::config::TinyModelConfig::default();
        let cfg = crate::model::TransformerConfig::from_tiny(&tiny).unwrap();
        let ratio = PackCost::of(&cfg).pairs_per_token;
        assert!((700.0..800.0).contains(&ratio), "{ratio}");
    }
}
