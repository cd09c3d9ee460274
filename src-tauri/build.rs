//! Build script: lets Tauri embed the front end and the app's capabilities.

fn main() {
    tauri_build::build();
}
