//! wgpu compute kernels for rehearsal inference: the WGSL shaders of `shaders/`, the GPU they
//! run on, and a CPU reference of every kernel that the parity tests hold them to.
//!
//! The crate knows nothing of candle or of the engine's models: it takes weights as f32 slices
//! or GGUF blocks and activations as buffers, so that the engine can place a role's generation
//! on any GPU that wgpu reaches (Vulkan, Metal, DX12; lavapipe on a machine without one) while
//! training stays on candle.
//!
//! - [`Gpu`]: adapter selection (the error names every backend tried when none works), the
//!   device, compiled kernels, buffers, and [`Batch`]es of dispatches submitted together.
//! - [`shaders`]: the kernels' sources, fragments of `shaders/lib/` pasted in.
//! - [`kernels`]: one typed call per kernel on a [`Batch`], each checking that its buffers
//!   hold what the shapes say before anything is dispatched.
//! - [`model`]: a Qwen3 or Llama model on those kernels: upload and refresh by Hugging Face
//!   name, the batched prompt pass and decode step with left padding, sampling.
//! - [`reference`]: the same computations as plain loops on the CPU.

pub mod context;
pub mod kernels;
pub mod model;
pub mod reference;
pub mod shaders;

pub use context::{Batch, Buf, Gpu};
pub use kernels::{Heads, Rows, SampleParams, Weight, WeightFormat};
pub use model::{Dims, GpuModel, HostTensor, Sampling, Session};
pub use shaders::Kernel;

/// What can go wrong on the GPU side, each naming the kernel, buffer or value at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No adapter on any backend wgpu was built with.
    #[error("no GPU adapter found; tried {tried}")]
    NoAdapter {
        /// Each backend tried and what it gave, e.g. `vulkan: none`.
        tried: String,
    },
    /// The adapter refused a device.
    #[error("the adapter {adapter} refused a device: {message}")]
    Device {
        /// The adapter's name and backend.
        adapter: String,
        /// wgpu's reason.
        message: String,
    },
    /// A shader that does not compile (include resolution or wgpu's validation).
    #[error("shader {file}: {message}")]
    Shader {
        /// The file in `shaders/`.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// A kernel call whose shapes and buffers disagree, caught before dispatch.
    #[error("kernel {kernel}: {message}")]
    Shape {
        /// The kernel's file.
        kernel: &'static str,
        /// Which buffer or size is wrong.
        message: String,
    },
    /// A buffer larger than the device allows.
    #[error("{what} needs {bytes} bytes, more than this GPU allows in one buffer ({limit})")]
    TooLarge {
        /// The buffer.
        what: String,
        /// Its size.
        bytes: u64,
        /// The device's limit.
        limit: u64,
    },
    /// A model weight that is missing or does not fit the model's sizes.
    #[error("weight {name}: {message}")]
    Weights {
        /// Its Hugging Face name (or `config`).
        name: String,
        /// What is wrong.
        message: String,
    },
    /// The GPU reported an error while running submitted work or reading a buffer back.
    #[error("GPU: {0}")]
    Run(String),
}
