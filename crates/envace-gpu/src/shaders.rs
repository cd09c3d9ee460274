//! The WGSL kernels of `shaders/`, compiled into the crate: one [`Kernel`] per file, with the
//! shared fragments of `shaders/lib/` pasted in where a kernel names them.
//!
//! WGSL has no include directive; a kernel names a fragment on a line of its own,
//! `//#include lib/NAME.wgsl`, and [`source`] replaces that line with the fragment's text.

use crate::Error;

/// One compute kernel: a file of `shaders/` with one entry point, `main`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kernel {
    /// `embed.wgsl`: embedding rows gathered by token id.
    Embed,
    /// `rms_norm.wgsl`: RMSNorm of rows, with a row stride and offset on the input.
    RmsNorm,
    /// `rope.wgsl`: rotary embedding in place, optionally after a per-head RMSNorm.
    Rope,
    /// `matmul.wgsl`: activations times f32 weights.
    Matmul,
    /// `matmul_q4_1.wgsl`: activations times GGUF Q4_1 weights.
    MatmulQ4_1,
    /// `matmul_q8_0.wgsl`: activations times GGUF Q8_0 weights.
    MatmulQ8_0,
    /// `kv_write.wgsl`: new keys and values into a batch's KV cache.
    KvWrite,
    /// `attention.wgsl`: attention over the KV cache with causal and padding masks.
    Attention,
    /// `silu_mul.wgsl`: the SwiGLU gate.
    SiluMul,
    /// `add.wgsl`: the residual connection.
    Add,
    /// `sample.wgsl`: softmax, token picking and log-probabilities.
    Sample,
}

impl Kernel {
    /// Every kernel.
    pub const ALL: [Kernel; 11] = [
        Kernel::Embed,
        Kernel::RmsNorm,
        Kernel::Rope,
        Kernel::Matmul,
        Kernel::MatmulQ4_1,
        Kernel::MatmulQ8_0,
        Kernel::KvWrite,
        Kernel::Attention,
        Kernel::SiluMul,
        Kernel::Add,
        Kernel::Sample,
    ];

    /// The kernel's file in `shaders/`.
    pub fn file(self) -> &'static str {
        match self {
            Kernel::Embed => "embed.wgsl",
            Kernel::RmsNorm => "rms_norm.wgsl",
            Kernel::Rope => "rope.wgsl",
            Kernel::Matmul => "matmul.wgsl",
            Kernel::MatmulQ4_1 => "matmul_q4_1.wgsl",
            Kernel::MatmulQ8_0 => "matmul_q8_0.wgsl",
            Kernel::KvWrite => "kv_write.wgsl",
            Kernel::Attention => "attention.wgsl",
            Kernel::SiluMul => "silu_mul.wgsl",
            Kernel::Add => "add.wgsl",
            Kernel::Sample => "sample.wgsl",
        }
    }

    /// The file's text as written (fragments not yet pasted in).
    pub fn raw_source(self) -> &'static str {
        match self {
            Kernel::Embed => include_str!("../../../shaders/embed.wgsl"),
            Kernel::RmsNorm => include_str!("../../../shaders/rms_norm.wgsl"),
            Kernel::Rope => include_str!("../../../shaders/rope.wgsl"),
            Kernel::Matmul => include_str!("../../../shaders/matmul.wgsl"),
            Kernel::MatmulQ4_1 => include_str!("../../../shaders/matmul_q4_1.wgsl"),
            Kernel::MatmulQ8_0 => include_str!("../../../shaders/matmul_q8_0.wgsl"),
            Kernel::KvWrite => include_str!("../../../shaders/kv_write.wgsl"),
            Kernel::Attention => include_str!("../../../shaders/attention.wgsl"),
            Kernel::SiluMul => include_str!("../../../shaders/silu_mul.wgsl"),
            Kernel::Add => include_str!("../../../shaders/add.wgsl"),
            Kernel::Sample => include_str!("../../../shaders/sample.wgsl"),
        }
    }

    /// The kernel's complete WGSL, fragments pasted in.
    pub fn source(self) -> Result<String, Error> {
        source(self.file(), self.raw_source())
    }
}

/// The shared fragments of `shaders/lib/`, by the path a kernel names them with.
pub const FRAGMENTS: [(&str, &str); 4] = [
    (
        "lib/reduce.wgsl",
        include_str!("../../../shaders/lib/reduce.wgsl"),
    ),
    (
        "lib/rng.wgsl",
        include_str!("../../../shaders/lib/rng.wgsl"),
    ),
    (
        "lib/quant.wgsl",
        include_str!("../../../shaders/lib/quant.wgsl"),
    ),
    (
        "lib/matmul.wgsl",
        include_str!("../../../shaders/lib/matmul.wgsl"),
    ),
];

const INCLUDE: &str = "//#include ";

/// `text` (the file `file`) with every `//#include lib/NAME.wgsl` line replaced by that
/// fragment; an unknown fragment is an error naming the file and the fragment.
pub fn source(file: &str, text: &str) -> Result<String, Error> {
    let mut out = String::with_capacity(text.len() * 2);
    for line in text.lines() {
        match line.trim().strip_prefix(INCLUDE) {
            Some(name) => {
                let name = name.trim();
                let Some((_, fragment)) = FRAGMENTS.iter().find(|(path, _)| *path == name) else {
                    return Err(Error::Shader {
                        file: file.to_string(),
                        message: format!(
                            "includes `{name}`, which is not one of the fragments in shaders/lib ({})",
                            FRAGMENTS.map(|(path, _)| path).join(", ")
                        ),
                    });
                };
                out.push_str(&format!("// ---- {name} ----\n"));
                out.push_str(fragment);
                out.push_str(&format!("// ---- end of {name} ----\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    Ok(out)
}
