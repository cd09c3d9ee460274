//! A metric's points shaped for drawing: the x axis chosen (step or wall time), exponential
//! smoothing, and a bounded number of points per line (each bucket keeps its lowest and
//! highest value, so spikes survive).

use crate::follow::Point;

/// What the x axis shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XAxis {
    /// Optimizer steps.
    #[default]
    Step,
    /// Minutes since the run's first metric.
    WallTime,
}

impl XAxis {
    /// The axis label.
    pub fn label(self) -> &'static str {
        match self {
            XAxis::Step => "step",
            XAxis::WallTime => "minutes since start",
        }
    }

    fn x(self, point: &Point) -> f64 {
        match self {
            XAxis::Step => point.step,
            XAxis::WallTime => point.secs / 60.0,
        }
    }
}

/// Most points a line draws; more are reduced bucket by bucket.
pub const MAX_POINTS: usize = 2_000;

/// `points` as `[x, y]` pairs: smoothed with weight `smoothing` (0: none, towards 1: more; a
/// bias-corrected exponential moving average, so the first values are not pulled to zero),
/// non-finite values left out, and reduced to at most about `max_points`.
pub fn shape(points: &[Point], axis: XAxis, smoothing: f64, max_points: usize) -> Vec<[f64; 2]> {
    let smoothing = smoothing.clamp(0.0, 0.999);
    let mut out = Vec::with_capacity(points.len().min(max_points + 2));
    let mut average = 0.0;
    let mut weight = 0.0;
    let finite = points.iter().filter(|p| p.value.is_finite());
    let n = points.iter().filter(|p| p.value.is_finite()).count();
    // Points per bucket; each bucket gives its lowest and highest point, in x order.
    let per_bucket = n.div_ceil((max_points / 2).max(1)).max(1);
    let mut bucket: Vec<[f64; 2]> = Vec::with_capacity(per_bucket);
    for point in finite {
        let y = if smoothing > 0.0 {
            average = smoothing * average + (1.0 - smoothing) * point.value;
            weight = smoothing * weight + (1.0 - smoothing);
            average / weight
        } else {
            point.value
        };
        let xy = [axis.x(point), y];
        if per_bucket == 1 {
            out.push(xy);
            continue;
        }
        bucket.push(xy);
        if bucket.len() == per_bucket {
            flush(&mut bucket, &mut out);
        }
    }
    flush(&mut bucket, &mut out);
    out
}

/// Moves a bucket's lowest and highest points (in their x order) to `out`.
fn flush(bucket: &mut Vec<[f64; 2]>, out: &mut Vec<[f64; 2]>) {
    if bucket.is_empty() {
        return;
    }
    let low = bucket
        .iter()
        .copied()
        .min_by(|a, b| a[1].total_cmp(&b[1]))
        .unwrap_or(bucket[0]);
    let high = bucket
        .iter()
        .copied()
        .max_by(|a, b| a[1].total_cmp(&b[1]))
        .unwrap_or(bucket[0]);
    if low == high {
        out.push(low);
    } else if low[0] <= high[0] {
        out.extend([low, high]);
    } else {
        out.extend([high, low]);
    }
    bucket.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(values: &[f64]) -> Vec<Point> {
        values
            .iter()
            .enumerate()
            .map(|(i, &value)| Point {
                step: i as f64,
                secs: 30.0 * i as f64,
                value,
            })
            .collect()
    }

    #[test]
    fn without_smoothing_the_points_are_drawn_as_written_on_either_axis() {
        let p = points(&[1.0, f64::NAN, 3.0]);
        assert_eq!(
            shape(&p, XAxis::Step, 0.0, MAX_POINTS),
            vec![[0.0, 1.0], [2.0, 3.0]]
        );
        assert_eq!(
            shape(&p, XAxis::WallTime, 0.0, MAX_POINTS),
            vec![[0.0, 1.0], [1.0, 3.0]]
        );
    }

    #[test]
    fn smoothing_starts_at_the_first_value_and_lags_behind_a_jump() {
        let shaped = shape(&points(&[2.0, 2.0, 10.0]), XAxis::Step, 0.5, MAX_POINTS);
        assert_eq!(shaped[0], [0.0, 2.0]);
        assert_eq!(shaped[1], [1.0, 2.0]);
        assert!(shaped[2][1] > 2.0 && shaped[2][1] < 10.0, "{shaped:?}");
    }

    #[test]
    fn a_long_series_is_reduced_and_keeps_its_extremes() {
        let mut values: Vec<f64> = (0..100_000).map(|i| (i % 7) as f64).collect();
        values[54_321] = 1_000.0;
        values[12_345] = -1_000.0;
        let shaped = shape(&points(&values), XAxis::Step, 0.0, MAX_POINTS);
        assert!(shaped.len() <= MAX_POINTS + 2, "{}", shaped.len());
        assert!(shaped.contains(&[54_321.0, 1_000.0]));
        assert!(shaped.contains(&[12_345.0, -1_000.0]));
        assert!(
            shaped.windows(2).all(|w| w[0][0] <= w[1][0]),
            "x order kept"
        );
    }
}
