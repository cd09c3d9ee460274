//! What the monitor draws besides plain lines: seed groups as their mean with a band of one
//! standard error, held-out and benchmark scores from the store's evaluations (each ± its
//! stored standard error), and fidelity per tool as a heatmap over steps.

use std::collections::BTreeMap;

use egui::{Color32, Rect, RichText, Sense, Stroke, vec2};

use crate::follow::{Point, RunData};
use crate::series::XAxis;

/// A seed group's mean and standard error at each aligned x.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Band {
    /// Step, or minutes since start (the members' mean at that step).
    pub x: Vec<f64>,
    /// Mean over the members with a finite value there.
    pub mean: Vec<f64>,
    /// Standard error of that mean (sample sd / √n).
    pub se: Vec<f64>,
}

/// The mean and standard error of `members` (one series per seed) at every step where at least
/// two of them have a finite value, reduced to at most about `max_points` points by averaging
/// neighbours.
pub fn seed_band(members: &[&[Point]], axis: XAxis, max_points: usize) -> Band {
    // step -> (values, x positions)
    let mut at: BTreeMap<u64, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for points in members {
        for p in points.iter().filter(|p| p.value.is_finite()) {
            let x = match axis {
                XAxis::Step => p.step,
                XAxis::WallTime => p.secs / 60.0,
            };
            let slot = at.entry(p.step as u64).or_default();
            slot.0.push(p.value);
            slot.1.push(x);
        }
    }
    let full: Vec<(f64, f64, f64)> = at
        .into_values()
        .filter(|(values, _)| values.len() >= 2)
        .map(|(values, xs)| {
            let n = values.len() as f64;
            let mean = values.iter().sum::<f64>() / n;
            let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
            (xs.iter().sum::<f64>() / n, mean, (var / n).sqrt())
        })
        .collect();
    let per = full.len().div_ceil(max_points.max(1)).max(1);
    let mut band = Band::default();
    for chunk in full.chunks(per) {
        let n = chunk.len() as f64;
        band.x.push(chunk.iter().map(|c| c.0).sum::<f64>() / n);
        band.mean.push(chunk.iter().map(|c| c.1).sum::<f64>() / n);
        band.se.push(chunk.iter().map(|c| c.2).sum::<f64>() / n);
    }
    band
}

/// One evaluation series of a run: a benchmark's metric over the whole benchmark.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalLine {
    /// `benchmark · metric`.
    pub name: String,
    /// (step, value, standard error if stored) in step order.
    pub points: Vec<(f64, f64, Option<f64>)>,
}

/// A run's evaluation series: category `all`, one line per benchmark and metric, with the
/// `<metric>_se` rows as each value's standard error.
pub fn eval_lines(run: &RunData) -> Vec<EvalLine> {
    let mut values: BTreeMap<(String, String), BTreeMap<u64, f64>> = BTreeMap::new();
    let mut errors: BTreeMap<(String, String), BTreeMap<u64, f64>> = BTreeMap::new();
    for row in run.evals.iter().filter(|r| r.category == "all") {
        match row.metric.strip_suffix("_se") {
            Some(metric) => errors
                .entry((row.benchmark.clone(), metric.to_owned()))
                .or_default()
                .insert(row.step, row.value),
            None => values
                .entry((row.benchmark.clone(), row.metric.clone()))
                .or_default()
                .insert(row.step, row.value),
        };
    }
    values
        .into_iter()
        .map(|(key, by_step)| {
            let se = errors.get(&key);
            EvalLine {
                name: format!("{} · {}", key.0, key.1),
                points: by_step
                    .into_iter()
                    .map(|(step, v)| (step as f64, v, se.and_then(|s| s.get(&step)).copied()))
                    .collect(),
            }
        })
        .collect()
}

/// Most columns a heatmap row draws; longer runs average neighbouring steps.
pub const HEATMAP_COLUMNS: usize = 120;

/// One heatmap: a row per key, a column per step (or group of steps), coloured by value from
/// 0 (red) to 1 (green); empty where the step has no value. The label column names each row by
/// the part of its key between the first and the last `/` (the tool). Returns its rect.
pub fn heatmap(ui: &mut egui::Ui, run: &RunData, keys: &[&str]) -> Rect {
    let rows: Vec<(&str, &[Point])> = keys
        .iter()
        .filter_map(|k| run.series.get(*k).map(|s| (*k, s.as_slice())))
        .collect();
    let last_step = rows
        .iter()
        .flat_map(|(_, s)| s.iter().map(|p| p.step))
        .fold(0.0_f64, f64::max);
    let n_cols = (last_step as usize + 1).min(HEATMAP_COLUMNS);
    let per = (last_step as usize + 1).div_ceil(n_cols).max(1);
    let label_w = 150.0;
    let row_h = 16.0;
    let width = ui.available_width().max(label_w + 100.0);
    let (rect, response) = ui.allocate_exact_size(
        vec2(width, row_h * rows.len() as f32 + 18.0),
        Sense::hover(),
    );
    let painter = ui.painter_at(rect);
    let cell_w = (width - label_w) / n_cols as f32;
    let mut hovered = None;
    for (r, (key, points)) in rows.iter().enumerate() {
        let y = rect.top() + r as f32 * row_h;
        let tool = key
            .split_once('/')
            .and_then(|(_, rest)| rest.rsplit_once('/'))
            .map_or(*key, |(tool, _)| tool);
        painter.text(
            egui::pos2(rect.left(), y + row_h / 2.0),
            egui::Align2::LEFT_CENTER,
            tool,
            egui::FontId::proportional(12.0),
            ui.visuals().text_color(),
        );
        let mut sums = vec![(0.0_f64, 0_u32); n_cols];
        for p in points.iter().filter(|p| p.value.is_finite()) {
            let col = (p.step as usize / per).min(n_cols - 1);
            sums[col].0 += p.value;
            sums[col].1 += 1;
        }
        for (c, (sum, n)) in sums.iter().enumerate() {
            if *n == 0 {
                continue;
            }
            let value = sum / f64::from(*n);
            let cell = Rect::from_min_size(
                egui::pos2(rect.left() + label_w + c as f32 * cell_w, y + 1.0),
                vec2(cell_w.max(1.0), row_h - 2.0),
            );
            painter.rect_filled(cell, 0.0, score_color(value));
            if response.hover_pos().is_some_and(|pos| cell.contains(pos)) {
                hovered = Some((tool.to_owned(), c * per, value));
            }
        }
    }
    let axis_y = rect.top() + rows.len() as f32 * row_h + 9.0;
    for (anchor, x, step) in [
        (egui::Align2::LEFT_CENTER, rect.left() + label_w, 0),
        (egui::Align2::RIGHT_CENTER, rect.right(), last_step as usize),
    ] {
        painter.text(
            egui::pos2(x, axis_y),
            anchor,
            format!("step {step}"),
            egui::FontId::proportional(11.0),
            ui.visuals().weak_text_color(),
        );
    }
    painter.rect_stroke(
        Rect::from_min_max(
            egui::pos2(rect.left() + label_w, rect.top()),
            egui::pos2(rect.right(), rect.top() + rows.len() as f32 * row_h),
        ),
        0.0,
        Stroke::new(1.0, ui.visuals().weak_text_color()),
        egui::StrokeKind::Inside,
    );
    if let Some((tool, step, value)) = hovered {
        response.on_hover_ui_at_pointer(|ui| {
            ui.label(RichText::new(format!("{tool} · step {step} · {value:.3}")).monospace());
        });
    }
    rect
}

/// Red (0) through yellow (0.5) to green (1).
pub fn score_color(value: f64) -> Color32 {
    let v = value.clamp(0.0, 1.0) as f32;
    let (r, g) = if v < 0.5 {
        (1.0, v * 2.0)
    } else {
        (2.0 - v * 2.0, 1.0)
    };
    Color32::from_rgb((r * 200.0) as u8, (g * 170.0) as u8, 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(values: &[f64]) -> Vec<Point> {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| Point {
                step: i as f64,
                secs: i as f64 * 60.0,
                value: *v,
            })
            .collect()
    }

    #[test]
    fn a_band_is_the_mean_and_standard_error_where_two_seeds_or_more_have_values() {
        let a = series(&[1.0, 2.0, 3.0]);
        let b = series(&[3.0, 4.0]);
        let c = series(&[5.0, f64::NAN]);
        let band = seed_band(&[&a, &b, &c], XAxis::Step, 100);
        assert_eq!(band.x, vec![0.0, 1.0]);
        assert_eq!(band.mean, vec![3.0, 3.0]);
        // Step 0: values 1, 3, 5 → sd 2, se 2/√3. Step 1: 2, 4 (NaN left out) → sd √2, se 1.
        assert!((band.se[0] - 2.0 / 3f64.sqrt()).abs() < 1e-12);
        assert!((band.se[1] - 1.0).abs() < 1e-12);
        // Step 2 has one seed only: no band there.
    }

    #[test]
    fn a_long_band_is_reduced_by_averaging_neighbours() {
        let a = series(&vec![1.0; 1000]);
        let b = series(&vec![3.0; 1000]);
        let band = seed_band(&[&a, &b], XAxis::WallTime, 100);
        assert_eq!(band.x.len(), 100);
        assert!(band.mean.iter().all(|m| (*m - 2.0).abs() < 1e-12));
        assert!(
            (band.x[0] - 4.5).abs() < 1e-9,
            "minutes, averaged: {}",
            band.x[0]
        );
    }

    #[test]
    fn scores_run_from_red_to_green() {
        assert_eq!(score_color(0.0), Color32::from_rgb(200, 0, 60));
        assert_eq!(score_color(1.0), Color32::from_rgb(0, 170, 60));
        assert_eq!(score_color(2.0), score_color(1.0));
    }
}
