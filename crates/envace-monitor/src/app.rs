//! The monitor's window: the run list (status, live marker, filter), and the chosen runs'
//! curves grouped into the charts the engine's metrics catalogue names (a key the catalogue
//! does not chart goes under "Other metrics"), with series toggles, smoothing, and a step or
//! wall-time x axis; the focused run's latest log line at the bottom; and the episode browser,
//! each rehearsed tool response beside the real one with the differing leaves highlighted.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use std::path::PathBuf;

use egui::{Color32, Rect, RichText};
use egui_plot::{FilledArea, Legend, Line, LineStyle, Plot, PlotPoints, Points};
use envace::store::{RunId, RunStatus};

use crate::charts::{Band, eval_lines, heatmap, seed_band};
use crate::episodes::Episodes;
use crate::export;
use crate::follow::{Follower, RunData};
use crate::series::{MAX_POINTS, XAxis, shape};

/// Points drawn per pixel column of a chart, shared among its lines.
pub const POINTS_PER_PIXEL: f32 = 4.0;

/// The fewest points a line is reduced to (each bucket keeps its lowest and highest value).
pub const MIN_LINE_POINTS: usize = 100;

/// How often the store is read for new rows.
pub const POLL_EVERY: Duration = Duration::from_millis(500);

/// Run colours, by run id (a run keeps its colour in every chart, whichever others are drawn).
const PALETTE: [Color32; 8] = [
    Color32::from_rgb(31, 119, 180),
    Color32::from_rgb(255, 127, 14),
    Color32::from_rgb(44, 160, 44),
    Color32::from_rgb(214, 39, 40),
    Color32::from_rgb(148, 103, 189),
    Color32::from_rgb(140, 86, 75),
    Color32::from_rgb(227, 119, 194),
    Color32::from_rgb(23, 190, 207),
];

/// The title of the group of keys no catalogue chart draws.
const OTHER: &str = "Other metrics";

/// The monitor's state: the followed store and what the person chose to see.
#[derive(Debug)]
pub struct MonitorApp {
    follower: Follower,
    filter: String,
    drawn: BTreeSet<RunId>,
    focused: Option<RunId>,
    hidden: BTreeSet<String>,
    x_axis: XAxis,
    smoothing: f64,
    poll_every: Duration,
    last_poll: Instant,
    error: Option<String>,
    episodes_open: bool,
    episodes: Option<Episodes>,
    opened: Option<(u64, u64)>,
    /// The opened episode's rehearsed calls, compared leaf by leaf when it was opened.
    opened_calls: Vec<crate::episodes::Call>,
    max_points: usize,
    /// The charts' width in points at the last frame (lines are shaped for it).
    chart_width: f32,
    /// Lines already shaped, by run and key: reshaped only when the series grows or the
    /// axis, smoothing or point budget change, not on every frame.
    shaped: HashMap<(RunId, String), Shaped>,
    group_seeds: bool,
    /// The seed groups of the drawn runs, kept until the drawn set changes (configs never do).
    arms: Option<(BTreeSet<RunId>, Vec<Vec<RunId>>)>,
    /// Seed groups' bands by (smallest run id of the group, key).
    bands: HashMap<(RunId, String), CachedBand>,
    export_dir: PathBuf,
    export_outcome: export::Outcome,
    notice: Option<String>,
}

/// A band and what it was computed from: each member with its point count and resumes.
#[derive(Debug)]
struct CachedBand {
    members: Vec<(RunId, usize, u32)>,
    axis: XAxis,
    points: usize,
    band: Band,
}

/// The chart of held-out and benchmark scores (from the store's evaluations).
pub const EVAL_CHART: &str = "Held-out and benchmark scores";

/// One shaped line and what it was shaped from.
#[derive(Debug)]
struct Shaped {
    n_points: usize,
    resumes: u32,
    axis: XAxis,
    smoothing: f64,
    max_points: usize,
    xy: Vec<[f64; 2]>,
}

impl MonitorApp {
    /// A monitor on `follower` drawing `runs` (ids or names; none: the newest run).
    pub fn new(follower: Follower, runs: &[String]) -> envace::Result<Self> {
        let mut drawn = BTreeSet::new();
        for query in runs {
            let found = follower
                .runs()
                .values()
                .filter(|r| r.summary.id.to_string() == *query || r.summary.name == *query)
                .map(|r| r.summary.id)
                .max()
                .ok_or_else(|| envace::Error::RunNotFound(query.clone()))?;
            drawn.insert(found);
        }
        if drawn.is_empty()
            && let Some(&newest) = follower.runs().keys().next_back()
        {
            drawn.insert(newest);
        }
        Ok(MonitorApp {
            focused: drawn.iter().next_back().copied(),
            follower,
            filter: String::new(),
            drawn,
            hidden: BTreeSet::new(),
            x_axis: XAxis::Step,
            smoothing: 0.0,
            poll_every: POLL_EVERY,
            last_poll: Instant::now(),
            error: None,
            episodes_open: false,
            episodes: None,
            opened: None,
            opened_calls: Vec::new(),
            max_points: MAX_POINTS,
            chart_width: 1000.0,
            shaped: HashMap::new(),
            group_seeds: false,
            arms: None,
            bands: HashMap::new(),
            export_dir: PathBuf::from("."),
            export_outcome: export::Outcome::default(),
            notice: None,
        })
    }

    /// Reads the store every `every` (tests pass a long one and poll by hand).
    pub fn with_poll_interval(mut self, every: Duration) -> Self {
        self.poll_every = every;
        self
    }

    /// Draws at most about `n` points per line (default [`MAX_POINTS`]; a chart's lines share
    /// about [`POINTS_PER_PIXEL`] points per pixel column within that limit; `usize::MAX`
    /// draws every point).
    pub fn with_max_points(mut self, n: usize) -> Self {
        self.max_points = n.max(2);
        self
    }

    /// Saves chart PNGs into `dir` (default: the folder the monitor was started in).
    pub fn with_export_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.export_dir = dir.into();
        self
    }

    /// Whether seed groups are drawn as their mean with a band.
    pub fn groups_seeds(&self) -> bool {
        self.group_seeds
    }

    /// The last message of an action (a chart saved, or why not).
    pub fn notice(&self) -> Option<&str> {
        self.notice.as_deref()
    }

    /// Draws these runs (ids the store holds), and no others.
    pub fn set_drawn(&mut self, runs: impl IntoIterator<Item = RunId>) {
        self.drawn = runs.into_iter().collect();
        self.focused = self.drawn.iter().next_back().copied();
    }

    /// The followed store.
    pub fn follower(&self) -> &Follower {
        &self.follower
    }

    /// Reads new rows now.
    pub fn poll(&mut self) {
        self.last_poll = Instant::now();
        self.error = self.follower.poll().err().map(|e| e.to_string());
    }

    /// The runs drawn.
    pub fn drawn(&self) -> &BTreeSet<RunId> {
        &self.drawn
    }

    /// The run whose log line the status bar shows.
    pub fn focused(&self) -> Option<RunId> {
        self.focused
    }

    /// The x axis.
    pub fn x_axis(&self) -> XAxis {
        self.x_axis
    }

    /// The episode open in the browser: (step, episode index).
    pub fn opened_episode(&self) -> Option<(u64, u64)> {
        self.opened
    }

    /// Metric keys switched off.
    pub fn hidden(&self) -> &BTreeSet<String> {
        &self.hidden
    }

    /// The keys of the drawn runs grouped by chart title, in the catalogue's chart order and
    /// "Other metrics" last.
    pub fn chart_groups(&self) -> Vec<(String, Vec<String>)> {
        let keys: BTreeSet<&String> = self
            .drawn
            .iter()
            .filter_map(|id| self.follower.run(*id))
            .flat_map(|run| run.series.keys())
            .collect();
        let mut by_chart: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        let charts = envace::metrics::CHARTS;
        for key in keys {
            let position = envace::metrics::metric_of(key)
                .and_then(|m| m.chart)
                .and_then(|id| charts.iter().position(|c| c.id == id))
                .unwrap_or(charts.len());
            by_chart.entry(position).or_default().push(key.clone());
        }
        by_chart
            .into_iter()
            .map(|(position, keys)| {
                let title = charts.get(position).map_or(OTHER, |c| c.title);
                (title.to_owned(), keys)
            })
            .collect()
    }

    /// The whole window.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        if self.last_poll.elapsed() >= self.poll_every {
            self.poll();
        }
        if let Some(outcome) = self.export_outcome.lock().ok().and_then(|mut o| o.take()) {
            self.notice = Some(match outcome {
                // Named within the export folder (the folder the monitor started in, unless
                // set otherwise), whose full path the notice's tooltip gives.
                Ok(path) => format!(
                    "Saved {}",
                    path.strip_prefix(&self.export_dir)
                        .unwrap_or(&path)
                        .display()
                ),
                Err(error) => format!("The chart was not saved: {error}"),
            });
        }
        egui::Panel::top("monitor-top").show(ui, |ui| self.top_bar(ui));
        egui::Panel::bottom("monitor-status").show(ui, |ui| self.status_bar(ui));
        egui::Panel::left("monitor-runs")
            .resizable(true)
            .default_size(260.0)
            .show(ui, |ui| self.run_list(ui));
        if self.episodes_open {
            egui::Panel::right("monitor-episodes")
                .resizable(true)
                .default_size(460.0)
                .show(ui, |ui| self.episode_browser(ui));
        }
        egui::CentralPanel::default().show(ui, |ui| self.charts(ui));
    }

    fn top_bar(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            ui.heading("EnvACE monitor");
            ui.label(
                RichText::new(
                    self.follower
                        .path()
                        .file_name()
                        .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                )
                .small()
                .weak(),
            );
        });
        ui.horizontal(|ui| {
            ui.label("x axis:");
            ui.radio_value(&mut self.x_axis, XAxis::Step, "Step");
            ui.radio_value(&mut self.x_axis, XAxis::WallTime, "Wall time");
            ui.separator();
            ui.add(egui::Slider::new(&mut self.smoothing, 0.0..=0.99).text("Smoothing"));
            ui.separator();
            ui.checkbox(&mut self.group_seeds, "Group seeds")
                .on_hover_text(
                    "Runs whose configs differ only in seed: their mean ± one standard error",
                );
            ui.separator();
            ui.toggle_value(&mut self.episodes_open, "Episodes");
        });
        if let Some(notice) = &self.notice {
            let folder =
                std::path::absolute(&self.export_dir).unwrap_or_else(|_| self.export_dir.clone());
            ui.label(RichText::new(notice).small())
                .on_hover_text(format!("Charts are saved in {}", folder.display()));
        }
        if let Some(error) = &self.error {
            ui.colored_label(
                Color32::from_rgb(200, 40, 40),
                format!("Reading the store failed: {error}"),
            );
        }
    }

    fn run_list(&mut self, ui: &mut egui::Ui) {
        ui.heading("Runs");
        ui.horizontal(|ui| {
            let label = ui.label("Filter");
            ui.add(egui::TextEdit::singleline(&mut self.filter).hint_text("name, id or status"))
                .labelled_by(label.id);
        });
        let needle = self.filter.to_lowercase();
        let mut toggled = Vec::new();
        egui::ScrollArea::vertical().show(ui, |ui| {
            for run in self.follower.runs().values().rev() {
                let words =
                    format!("{} {}", run.title(), run.summary.status.as_str()).to_lowercase();
                if !needle.is_empty() && !words.contains(&needle) {
                    continue;
                }
                let id = run.summary.id;
                ui.horizontal(|ui| {
                    let mut on = self.drawn.contains(&id);
                    if ui.checkbox(&mut on, run.title()).changed() {
                        toggled.push((id, on));
                    }
                    status_label(ui, run);
                });
            }
        });
        for (id, on) in toggled {
            if on {
                self.drawn.insert(id);
                self.focused = Some(id);
            } else {
                self.drawn.remove(&id);
                if self.focused == Some(id) {
                    self.focused = self.drawn.iter().next_back().copied();
                }
            }
        }
    }

    fn episode_browser(&mut self, ui: &mut egui::Ui) {
        let Some(run) = self.focused.and_then(|id| self.follower.run(id)) else {
            ui.label("Tick a run to browse its episodes.");
            return;
        };
        let (id, title) = (run.summary.id, run.title());
        ui.horizontal(|ui| {
            ui.heading(format!("Episodes of {title}"));
            if ui.button("Reload").clicked() {
                self.episodes = None;
            }
        });
        if self.episodes.as_ref().is_none_or(|e| e.run != id) {
            self.opened = None;
            self.opened_calls.clear();
            match Episodes::load(&mut self.follower, id) {
                Ok(episodes) => self.episodes = Some(episodes),
                Err(error) => {
                    // Closed, so that the failed read is not tried again on every frame.
                    self.error = Some(format!("Reading the episodes failed: {error}"));
                    self.episodes_open = false;
                    return;
                }
            }
        }
        let Some(episodes) = &self.episodes else {
            return;
        };
        if episodes.list.is_empty() {
            ui.label("This run has recorded no episode.");
            return;
        }
        let mut opened = self.opened;
        egui::ScrollArea::vertical()
            .id_salt("episode-list")
            .max_height(180.0)
            .show(ui, |ui| {
                for episode in &episodes.list {
                    let key = (episode.step, episode.episode_idx);
                    if ui
                        .selectable_label(opened == Some(key), episode.label())
                        .clicked()
                    {
                        opened = Some(key);
                    }
                }
            });
        if opened != self.opened {
            self.opened_calls = opened.map_or_else(Vec::new, |(step, episode_idx)| {
                episodes.calls(step, episode_idx)
            });
            self.opened = opened;
        }
        ui.separator();
        if opened.is_none() {
            ui.label("Open an episode to compare its rehearsed and real responses.");
            return;
        }
        let calls = &self.opened_calls;
        if calls.is_empty() {
            ui.label("No tool response was rehearsed in this episode.");
            return;
        }
        let differ = Color32::from_rgb(200, 40, 40);
        egui::ScrollArea::vertical()
            .id_salt("episode-calls")
            .show(ui, |ui| {
                for (n, call) in calls.iter().enumerate() {
                    let pair = &call.pair;
                    ui.label(
                        RichText::new(format!(
                            "turn {} · call {} · {}",
                            pair.turn_idx, pair.call_idx, pair.tool
                        ))
                        .strong(),
                    );
                    ui.label(
                        RichText::new(pair.arguments.to_string())
                            .small()
                            .monospace(),
                    );
                    let n_differ = call.leaves.iter().filter(|l| l.differs).count();
                    ui.label(format!(
                        "{n_differ} of {} leaves differ · value accuracy {:.2}{}",
                        call.leaves.len(),
                        pair.value_accuracy,
                        if pair.exact_match {
                            " · exact match"
                        } else {
                            ""
                        }
                    ));
                    egui::Grid::new(("leaves", n))
                        .striped(true)
                        .num_columns(3)
                        .show(ui, |ui| {
                            ui.label(RichText::new("leaf").weak());
                            ui.label(RichText::new("rehearsed").weak());
                            ui.label(RichText::new("real").weak());
                            ui.end_row();
                            for leaf in &call.leaves {
                                let text = |v: &Option<serde_json::Value>| {
                                    v.as_ref()
                                        .map_or_else(|| "(missing)".to_owned(), ToString::to_string)
                                };
                                let cell = |s: String| {
                                    let t = RichText::new(s).monospace();
                                    if leaf.differs { t.color(differ) } else { t }
                                };
                                ui.label(cell(leaf.path.clone()));
                                ui.label(cell(text(&leaf.rehearsed)));
                                ui.label(cell(text(&leaf.real)));
                                ui.end_row();
                            }
                        });
                    ui.separator();
                }
            });
    }

    fn status_bar(&mut self, ui: &mut egui::Ui) {
        let Some(run) = self.focused.and_then(|id| self.follower.run(id)) else {
            ui.label("No run chosen: tick one in the list.");
            return;
        };
        ui.horizontal(|ui| {
            ui.label(RichText::new(run.title()).strong());
            status_label(ui, run);
            if let Some(step) = run.summary.last_step {
                ui.label(format!("step {step}"));
            }
            ui.label(format!("{} rows", run.n_rows));
            if let Some(event) = &run.last_event {
                ui.separator();
                ui.label(format!("{}: {}", event.level, event.message));
            }
        });
    }

    /// Shapes the drawn runs' visible lines that changed since they were last shaped, and
    /// forgets the lines of runs no longer drawn.
    fn reshape(&mut self, groups: &[(String, Vec<String>)]) {
        let drawn = &self.drawn;
        self.shaped
            .retain(|(run, key), _| drawn.contains(run) && !self.hidden.contains(key));
        for (_, keys) in groups {
            let visible: Vec<&String> = keys.iter().filter(|k| !self.hidden.contains(*k)).collect();
            let budget = self.line_budget(self.drawn.len() * visible.len());
            for id in &self.drawn {
                let Some(run) = self.follower.run(*id) else {
                    continue;
                };
                for key in &visible {
                    let Some(points) = run.series.get(*key) else {
                        continue;
                    };
                    let fresh = |s: &Shaped| {
                        s.n_points == points.len()
                            && s.resumes == run.summary.resumes
                            && s.axis == self.x_axis
                            && s.smoothing == self.smoothing
                            && s.max_points == budget
                    };
                    let entry = self.shaped.get(&(*id, (*key).clone()));
                    if entry.is_some_and(fresh) {
                        continue;
                    }
                    let xy = shape(points, self.x_axis, self.smoothing, budget);
                    self.shaped.insert(
                        (*id, (*key).clone()),
                        Shaped {
                            n_points: points.len(),
                            resumes: run.summary.resumes,
                            axis: self.x_axis,
                            smoothing: self.smoothing,
                            max_points: budget,
                            xy,
                        },
                    );
                }
            }
        }
    }

    /// Points each of `n_lines` lines of one chart draws: about [`POINTS_PER_PIXEL`] per pixel
    /// column of the chart shared among them, at least [`MIN_LINE_POINTS`] and at most the
    /// set maximum (`usize::MAX`: every point). The frame's cost grows with the points drawn,
    /// and more than a few per pixel column adds nothing to see.
    fn line_budget(&self, n_lines: usize) -> usize {
        if self.max_points == usize::MAX {
            return usize::MAX;
        }
        let shared = (POINTS_PER_PIXEL * self.chart_width.max(100.0)) as usize / n_lines.max(1);
        shared.clamp(MIN_LINE_POINTS, self.max_points.max(MIN_LINE_POINTS))
    }

    /// The drawn runs in their seed groups (each run alone unless seeds are grouped), each
    /// group in id order. The grouping compares whole configs, so it is computed again only
    /// when the drawn runs change.
    fn groups(&mut self) -> Vec<Vec<RunId>> {
        let drawn: Vec<&RunData> = self
            .drawn
            .iter()
            .filter_map(|id| self.follower.run(*id))
            .collect();
        if !self.group_seeds {
            return drawn.iter().map(|r| vec![r.summary.id]).collect();
        }
        if let Some((of, arms)) = &self.arms
            && *of == self.drawn
        {
            return arms.clone();
        }
        let configs: Vec<(RunId, Option<envace::config::ExperimentConfig>)> = drawn
            .iter()
            .map(|r| (r.summary.id, r.config.clone()))
            .collect();
        let mut by_arm: BTreeMap<RunId, Vec<RunId>> = BTreeMap::new();
        for ((id, _), arm) in configs.iter().zip(envace::config::seed_arms(&configs)) {
            by_arm.entry(arm).or_default().push(*id);
        }
        let arms: Vec<Vec<RunId>> = by_arm.into_values().collect();
        self.arms = Some((self.drawn.clone(), arms.clone()));
        arms
    }

    /// Computes the bands of seed groups whose members changed since they were last computed.
    fn rebuild_bands(&mut self, groups: &[(String, Vec<String>)], arms: &[Vec<RunId>]) {
        let wanted: BTreeSet<(RunId, String)> = arms
            .iter()
            .filter(|arm| arm.len() >= 2)
            .flat_map(|arm| {
                groups
                    .iter()
                    .flat_map(|(_, keys)| keys)
                    .filter(|key| !self.hidden.contains(*key))
                    .map(move |key| (arm[0], key.clone()))
            })
            .collect();
        self.bands.retain(|k, _| wanted.contains(k));
        // Each band and its mean share the points of one line, as many lines as bands.
        let budget = self
            .line_budget(2 * wanted.len())
            .min(self.max_points / 2)
            .max(2);
        for arm in arms.iter().filter(|arm| arm.len() >= 2) {
            let runs: Vec<&RunData> = arm.iter().filter_map(|id| self.follower.run(*id)).collect();
            for (_, key) in wanted.iter().filter(|(first, _)| *first == arm[0]) {
                let members: Vec<(RunId, usize, u32)> = runs
                    .iter()
                    .map(|r| {
                        let n = r.series.get(key).map_or(0, Vec::len);
                        (r.summary.id, n, r.summary.resumes)
                    })
                    .collect();
                let cached = self.bands.get(&(arm[0], key.clone()));
                if cached.is_some_and(|c| {
                    c.members == members && c.axis == self.x_axis && c.points == budget
                }) {
                    continue;
                }
                let series: Vec<&[crate::follow::Point]> = runs
                    .iter()
                    .filter_map(|r| r.series.get(key).map(Vec::as_slice))
                    .collect();
                let band = seed_band(&series, self.x_axis, budget);
                self.bands.insert(
                    (arm[0], key.clone()),
                    CachedBand {
                        members,
                        axis: self.x_axis,
                        points: budget,
                        band,
                    },
                );
            }
        }
    }

    fn charts(&mut self, ui: &mut egui::Ui) {
        if self.drawn.is_empty() {
            ui.label("Tick runs in the list to draw their curves.");
            return;
        }
        let groups = self.chart_groups();
        let drawn: Vec<RunId> = self.drawn.iter().copied().collect();
        let has_evals = drawn
            .iter()
            .filter_map(|id| self.follower.run(*id))
            .any(|r| !r.evals.is_empty());
        if groups.is_empty() && !has_evals {
            ui.label("The chosen runs have recorded no metric yet.");
            return;
        }
        // Shapes change only when the width does by more than a few points (a scroll bar
        // coming and going does not reshape every line).
        let width = ui.available_width();
        if (width - self.chart_width).abs() > 24.0 {
            self.chart_width = width;
        }
        self.reshape(&groups);
        let arms = self.groups();
        self.rebuild_bands(&groups, &arms);
        let heatmap_title = envace::metrics::CHARTS
            .iter()
            .find(|c| c.id == "fidelity-tool")
            .map(|c| c.title);
        let mut toggles = Vec::new();
        let mut save = None;
        let mut rects: Vec<(String, Rect)> = Vec::new();
        let view = ChartView {
            follower: &self.follower,
            shaped: &self.shaped,
            bands: &self.bands,
            hidden: &self.hidden,
            axis: self.x_axis,
            arms: &arms,
        };
        egui::ScrollArea::vertical().show(ui, |ui| {
            let mut section = |ui: &mut egui::Ui, title: &str, keys: &[String]| {
                egui::CollapsingHeader::new(RichText::new(title).strong())
                    .id_salt(title)
                    .default_open(true)
                    .show(ui, |ui| {
                        ui.horizontal_wrapped(|ui| {
                            for key in keys {
                                let mut on = !view.hidden.contains(key);
                                if ui.checkbox(&mut on, key).changed() {
                                    toggles.push((key.clone(), on));
                                }
                            }
                            if ui
                                .button("Save PNG")
                                .on_hover_text("Save this chart as a PNG file")
                                .clicked()
                            {
                                save = Some(title.to_owned());
                            }
                        });
                        let rect = if Some(title) == heatmap_title {
                            view.heatmaps(ui, keys)
                        } else if title == EVAL_CHART {
                            view.eval_plot(ui)
                        } else {
                            view.plot(ui, title, keys)
                        };
                        rects.push((title.to_owned(), rect));
                    });
            };
            for (title, keys) in &groups {
                section(ui, title, keys);
            }
            if has_evals {
                section(ui, EVAL_CHART, &[]);
            }
        });
        for (key, on) in toggles {
            if on {
                self.hidden.remove(&key);
            } else {
                self.hidden.insert(key);
            }
        }
        if let Some(title) = save {
            match rects.iter().find(|(t, _)| *t == title) {
                Some((_, rect)) => {
                    let ids: Vec<i64> = drawn.iter().map(|id| id.0).collect();
                    let path = export::free_path(&self.export_dir, &title, &ids);
                    self.notice = Some("Saving the chart…".to_owned());
                    export::request(ui.ctx(), *rect, path, self.export_outcome.clone());
                }
                None => self.notice = Some(format!("Open the chart {title:?} to save it")),
            }
        }
    }
}

/// What one frame's charts read.
struct ChartView<'a> {
    follower: &'a Follower,
    shaped: &'a HashMap<(RunId, String), Shaped>,
    bands: &'a HashMap<(RunId, String), CachedBand>,
    hidden: &'a BTreeSet<String>,
    axis: XAxis,
    arms: &'a [Vec<RunId>],
}

impl ChartView<'_> {
    /// A line chart of `keys`: each run alone as its lines, each seed group as its mean with
    /// a band.
    fn plot(&self, ui: &mut egui::Ui, title: &str, keys: &[String]) -> Rect {
        let response = Plot::new(title)
            .height(200.0)
            .legend(Legend::default())
            .x_axis_label(self.axis.label())
            .show(ui, |plot| {
                for arm in self.arms {
                    let color = run_color(arm[0]);
                    for (key_idx, key) in keys.iter().enumerate() {
                        if self.hidden.contains(key) {
                            continue;
                        }
                        let style = match key_idx % 3 {
                            0 => LineStyle::Solid,
                            1 => LineStyle::dashed_loose(),
                            _ => LineStyle::dotted_dense(),
                        };
                        if arm.len() >= 2 {
                            let Some(cached) = self.bands.get(&(arm[0], key.clone())) else {
                                continue;
                            };
                            let band = &cached.band;
                            let name = match self.follower.run(arm[0]) {
                                Some(run) => format!(
                                    "{} + {} more seed{} (mean ± se) · {key}",
                                    run.title(),
                                    arm.len() - 1,
                                    if arm.len() == 2 { "" } else { "s" }
                                ),
                                None => key.clone(),
                            };
                            let low: Vec<f64> =
                                band.mean.iter().zip(&band.se).map(|(m, s)| m - s).collect();
                            let high: Vec<f64> =
                                band.mean.iter().zip(&band.se).map(|(m, s)| m + s).collect();
                            plot.add(
                                FilledArea::new(name.clone(), &band.x, &low, &high)
                                    .fill_color(color.gamma_multiply(0.3)),
                            );
                            let xy: Vec<[f64; 2]> = band
                                .x
                                .iter()
                                .zip(&band.mean)
                                .map(|(x, m)| [*x, *m])
                                .collect();
                            plot.line(
                                Line::new(name, PlotPoints::from(xy))
                                    .color(color)
                                    .style(style),
                            );
                            continue;
                        }
                        let Some(run) = self.follower.run(arm[0]) else {
                            continue;
                        };
                        let Some(line) = self.shaped.get(&(arm[0], key.clone())) else {
                            continue;
                        };
                        plot.line(
                            Line::new(
                                format!("{} · {key}", run.title()),
                                PlotPoints::from(line.xy.clone()),
                            )
                            .color(color)
                            .style(style),
                        );
                    }
                }
            });
        response.response.rect
    }

    /// The held-out and benchmark scores of every drawn run over steps, each value with a bar
    /// of ± its stored standard error.
    fn eval_plot(&self, ui: &mut egui::Ui) -> Rect {
        let response = Plot::new(EVAL_CHART)
            .height(200.0)
            .legend(Legend::default())
            .x_axis_label("step")
            .show(ui, |plot| {
                for id in self.arms.iter().flatten() {
                    let Some(run) = self.follower.run(*id) else {
                        continue;
                    };
                    let color = run_color(*id);
                    for (n, line) in eval_lines(run).into_iter().enumerate() {
                        let name = format!("{} · {}", run.title(), line.name);
                        let style = if n % 2 == 0 {
                            LineStyle::Solid
                        } else {
                            LineStyle::dashed_loose()
                        };
                        let xy: Vec<[f64; 2]> =
                            line.points.iter().map(|(x, y, _)| [*x, *y]).collect();
                        plot.line(
                            Line::new(name.clone(), PlotPoints::from(xy.clone()))
                                .color(color)
                                .style(style),
                        );
                        plot.points(
                            Points::new(name.clone(), PlotPoints::from(xy))
                                .color(color)
                                .radius(3.0),
                        );
                        for (x, y, se) in &line.points {
                            if let Some(se) = se.filter(|s| s.is_finite()) {
                                plot.line(
                                    Line::new(
                                        name.clone(),
                                        PlotPoints::from(vec![[*x, y - se], [*x, y + se]]),
                                    )
                                    .color(color),
                                );
                            }
                        }
                    }
                }
            });
        response.response.rect
    }

    /// One fidelity heatmap per drawn run (rows: tools, columns: steps).
    fn heatmaps(&self, ui: &mut egui::Ui, keys: &[String]) -> Rect {
        let visible: Vec<&str> = keys
            .iter()
            .filter(|k| !self.hidden.contains(*k))
            .map(String::as_str)
            .collect();
        let mut rect = Rect::NOTHING;
        for id in self.arms.iter().flatten() {
            let Some(run) = self.follower.run(*id) else {
                continue;
            };
            let label = ui.label(RichText::new(run.title()).color(run_color(*id)));
            rect = rect.union(label.rect);
            rect = rect.union(heatmap(ui, run, &visible));
        }
        rect
    }
}

/// The colour of run `id`'s lines.
fn run_color(id: RunId) -> Color32 {
    let n = PALETTE.len() as i64;
    PALETTE[usize::try_from((id.0 - 1).rem_euclid(n)).unwrap_or(0)]
}

/// A run's status; a live run's in green after a dot.
fn status_label(ui: &mut egui::Ui, run: &RunData) {
    if run.summary.status == RunStatus::Running {
        let green = Color32::from_rgb(40, 160, 70);
        let (rect, _) = ui.allocate_exact_size(egui::vec2(8.0, 8.0), egui::Sense::hover());
        ui.painter().circle_filled(rect.center(), 4.0, green);
        ui.label(RichText::new("live").color(green));
    } else {
        ui.label(RichText::new(run.summary.status.as_str()).weak());
    }
}

impl eframe::App for MonitorApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        MonitorApp::ui(self, ui);
        ui.ctx().request_repaint_after(self.poll_every);
    }
}
