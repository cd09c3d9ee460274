//! A chart saved as a PNG file: the window's next frame is captured (egui's screenshot command),
//! cut to the chart's rectangle and written atomically under a name that never replaces an
//! earlier export.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use egui::{ColorImage, Rect};

/// What became of the last export, for the window to show.
pub type Outcome = Arc<Mutex<Option<Result<PathBuf, String>>>>;

/// A file name for `title` in `dir` that no file has yet: `<slug>-runs-<ids>.png`, then
/// `-2`, `-3`, … when taken.
pub fn free_path(dir: &Path, title: &str, runs: &[i64]) -> PathBuf {
    let slug: String = title
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect::<String>()
        .split('-')
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    let ids: Vec<String> = runs.iter().map(ToString::to_string).collect();
    let stem = format!("{slug}-runs-{}", ids.join("-"));
    let mut path = dir.join(format!("{stem}.png"));
    let mut n = 2;
    while path.exists() {
        path = dir.join(format!("{stem}-{n}.png"));
        n += 1;
    }
    path
}

/// Asks for a screenshot of the frame being drawn and, when it arrives, writes the part in
/// `rect` (points, at `pixels_per_point`) to `path`; the result lands in `outcome`.
pub fn request(ctx: &egui::Context, rect: Rect, path: PathBuf, outcome: Outcome) {
    let pixels_per_point = ctx.pixels_per_point();
    let repaint = ctx.clone();
    let callback = egui::ScreenshotCallback::new(move |image: Arc<ColorImage>| {
        let result = write_region(&image, rect, pixels_per_point, &path).map(|()| path);
        if let Ok(mut slot) = outcome.lock() {
            *slot = Some(result);
        }
        repaint.request_repaint();
    });
    ctx.send_viewport_cmd(egui::ViewportCommand::Screenshot(callback));
}

/// Cuts `rect` out of `image` and writes it to `path` as PNG.
pub fn write_region(
    image: &ColorImage,
    rect: Rect,
    pixels_per_point: f32,
    path: &Path,
) -> Result<(), String> {
    let window = Rect::from_min_size(
        egui::Pos2::ZERO,
        egui::vec2(image.width() as f32, image.height() as f32) / pixels_per_point,
    );
    let rect = rect.intersect(window);
    if !rect.is_positive() {
        return Err("the chart is not on screen; scroll to it and save again".to_owned());
    }
    let region = image.region(&rect, Some(pixels_per_point));
    let [w, h] = region.size;
    let bytes: Vec<u8> = region
        .pixels
        .iter()
        .flat_map(|c| c.to_srgba_unmultiplied())
        .collect();
    let mut png = Vec::new();
    let encoder = image::codecs::png::PngEncoder::new(&mut png);
    image::ImageEncoder::write_image(
        encoder,
        &bytes,
        u32::try_from(w).map_err(|e| e.to_string())?,
        u32::try_from(h).map_err(|e| e.to_string())?,
        image::ExtendedColorType::Rgba8,
    )
    .map_err(|e| format!("cannot encode the PNG: {e}"))?;
    envace::fsutil::write_atomically(path, &png).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_names_never_replace_an_earlier_file() {
        let dir = tempfile::tempdir().unwrap();
        let first = free_path(dir.path(), "KL to the reference", &[1, 3]);
        assert_eq!(
            first.file_name().unwrap(),
            "kl-to-the-reference-runs-1-3.png"
        );
        std::fs::write(&first, b"x").unwrap();
        let second = free_path(dir.path(), "KL to the reference", &[1, 3]);
        assert_eq!(
            second.file_name().unwrap(),
            "kl-to-the-reference-runs-1-3-2.png"
        );
    }

    #[test]
    fn a_region_is_cut_out_and_written_as_png() {
        let dir = tempfile::tempdir().unwrap();
        let mut image = ColorImage::filled([40, 30], egui::Color32::BLACK);
        image.pixels[10 * 40 + 20] = egui::Color32::RED;
        let path = dir.path().join("cut.png");
        // Points at 2 pixels per point: the rect (10, 5)-(15, 10) is pixels (20, 10)-(30, 20).
        let rect = Rect::from_min_max(egui::pos2(10.0, 5.0), egui::pos2(15.0, 10.0));
        write_region(&image, rect, 2.0, &path).unwrap();
        let png = image::open(&path).unwrap().to_rgba8();
        assert_eq!(png.dimensions(), (10, 10));
        assert_eq!(png.get_pixel(0, 0).0, [255, 0, 0, 255]);
        assert_eq!(png.get_pixel(1, 0).0, [0, 0, 0, 255]);
        let off = Rect::from_min_max(egui::pos2(100.0, 100.0), egui::pos2(120.0, 120.0));
        assert!(
            write_region(&image, off, 2.0, &path)
                .unwrap_err()
                .contains("not on screen")
        );
    }
}
