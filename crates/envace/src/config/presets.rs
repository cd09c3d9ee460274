//! The preset experiments shipped with the studio, embedded from `assets/configs/`.

use crate::error::Error;

/// A named preset experiment config.
#[derive(Debug, Clone, Copy)]
pub struct Preset {
    /// Name used by `envace config init --preset NAME` and the studio's preset menu.
    pub name: &'static str,
    /// One line on what the preset is for.
    pub summary: &'static str,
    /// The TOML text, with comments.
    pub toml: &'static str,
}

/// Every preset; the first is the default experiment (`quickstart`).
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "quickstart",
        summary: "Tiny model from scratch on generated tasks: SFT, then EnvACE RL, on a laptop CPU",
        toml: include_str!("../../../../assets/configs/quickstart.toml"),
    },
    Preset {
        name: "real-env-baseline",
        summary: "The quickstart trained against the real environment instead of rehearsal",
        toml: include_str!("../../../../assets/configs/real-env-baseline.toml"),
    },
    Preset {
        name: "caller-frozen",
        summary: "The quickstart with the act role frozen: only the rehearse role trains",
        toml: include_str!("../../../../assets/configs/caller-frozen.toml"),
    },
    Preset {
        name: "envace-qwen3-8b",
        summary: "The paper's reference run: Qwen3-8B, lr 1e-6, 16 prompts × group 4, on CUDA",
        toml: include_str!("../../../../assets/configs/envace-qwen3-8b.toml"),
    },
];

/// The preset called `name`.
pub fn preset(name: &str) -> Result<&'static Preset, Error> {
    PRESETS
        .iter()
        .find(|preset| preset.name == name)
        .ok_or_else(|| Error::UnknownPreset {
            name: name.to_string(),
            available: preset_names().join(", "),
        })
}

/// The names of every preset, default first.
pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|preset| preset.name).collect()
}
