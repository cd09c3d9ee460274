//! The editor's "Check device": where a config's training runs and which GPU its wgpu
//! generation would use, found as a job finds them at its start (read from `[backend]` alone,
//! so that an error elsewhere in the config does not hide the answer).

use envace::config::{BackendConfig, GenerationPlacement};

use crate::contract::{DeviceCheck, StudioError};

const WHAT: &str = "Cannot check the device";

/// `[backend]` of the config text (defaults when the table is absent).
fn backend_of(toml: &str) -> Result<BackendConfig, StudioError> {
    let values: serde_json::Value = toml::from_str(toml).map_err(|err| {
        StudioError::new(
            WHAT,
            format!("the config is not valid TOML: {}", err.message()),
        )
    })?;
    match values.get("backend") {
        None => Ok(BackendConfig::default()),
        Some(table) => serde_json::from_value(table.clone()).map_err(|err| {
            let mut out = StudioError::new(WHAT, format!("[backend]: {err}"));
            out.field = Some("backend".to_owned());
            out
        }),
    }
}

/// Which roles a placement list puts on wgpu, in words.
fn roles_on_wgpu(backend: &BackendConfig) -> String {
    let roles: Vec<&str> = [
        ("acting", backend.act_placement()),
        ("rehearsal", backend.rehearse_placement()),
    ]
    .into_iter()
    .filter(|(_, placement)| *placement == GenerationPlacement::Wgpu)
    .map(|(role, _)| role)
    .collect();
    roles.join(" and ")
}

/// Opens the training device and, when a role generates on wgpu, the adapter; a device that
/// does not open is a result (`ok: false`) naming why, not an error.
pub fn check(toml: &str) -> Result<DeviceCheck, StudioError> {
    let backend = backend_of(toml)?;
    let training = match envace::model::resolve_device(backend.device, backend.cuda_device_index) {
        Ok(device) if device.is_cpu() => "the CPU".to_owned(),
        Ok(_) => format!("CUDA device {}", backend.cuda_device_index),
        Err(err) => {
            return Ok(DeviceCheck {
                ok: false,
                training: None,
                adapter: None,
                summary: format!("Training device: {err}"),
            });
        }
    };
    if !backend.uses_wgpu() {
        return Ok(DeviceCheck {
            ok: true,
            summary: format!("Training on {training}; acting and rehearsal generate there too"),
            training: Some(training),
            adapter: None,
        });
    }
    let wanted = (!backend.wgpu_adapter.is_empty()).then_some(backend.wgpu_adapter.as_str());
    Ok(match envace::model::wgpu::open_gpu(wanted) {
        Ok(gpu) => {
            let adapter = gpu.describe();
            let note = if gpu.is_cpu() {
                " (a CPU implementation: correct but slower than the CPU path)"
            } else {
                ""
            };
            DeviceCheck {
                ok: true,
                summary: format!(
                    "Training on {training}; {} on {adapter}{note}",
                    match (backend.act_placement(), backend.rehearse_placement()) {
                        (GenerationPlacement::Wgpu, GenerationPlacement::Wgpu) =>
                            "acting and rehearsal generate",
                        (GenerationPlacement::Wgpu, _) => "acting generates",
                        _ => "rehearsal generates",
                    }
                ),
                training: Some(training),
                adapter: Some(adapter),
            }
        }
        Err(err) => DeviceCheck {
            ok: false,
            summary: format!("{} on wgpu: {err}", roles_on_wgpu(&backend)),
            training: Some(training),
            adapter: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn device_wgpu_trains_on_the_cpu_and_places_rehearsal_on_the_adapter() {
        let result = check("[backend]\ndevice = \"wgpu\"\n").expect("a valid [backend]");
        assert!(result.ok, "{result:?}");
        assert_eq!(result.training.as_deref(), Some("the CPU"));
        let adapter = result.adapter.clone().expect("an adapter is named");
        assert!(
            result.summary.starts_with(&format!(
                "Training on the CPU; rehearsal generates on {adapter}"
            )),
            "{result:?}"
        );
        let missing = check("[backend]\ndevice = \"wgpu\"\nwgpu_adapter = \"no such adapter\"\n")
            .expect("a valid [backend]");
        assert!(!missing.ok, "{missing:?}");
        assert!(
            missing.summary.starts_with("rehearsal on wgpu: ")
                && missing.summary.contains("no such adapter"),
            "{missing:?}"
        );
    }
}
