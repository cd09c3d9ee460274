//! The GPU the kernels run on: picking an adapter, the device and queue, compiled kernels,
//! buffers in and out, and batches of dispatches submitted as one command buffer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use wgpu::util::DeviceExt;

use crate::{Error, Kernel};

/// Which adapters [`Gpu::open`] takes, best first: a discrete GPU, an integrated one, a virtual
/// one, anything else, and last a CPU implementation such as lavapipe.
fn rank(device_type: wgpu::DeviceType) -> u8 {
    match device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

/// The backends this build of wgpu has for this platform, each with its name.
fn compiled_backends() -> Vec<(wgpu::Backends, &'static str)> {
    let enabled = wgpu::Instance::enabled_backend_features();
    [
        (wgpu::Backends::VULKAN, "vulkan"),
        (wgpu::Backends::METAL, "metal"),
        (wgpu::Backends::DX12, "dx12"),
        (wgpu::Backends::GL, "gl"),
    ]
    .into_iter()
    .filter(|(backend, _)| enabled.contains(*backend))
    .collect()
}

/// A GPU device with its queue and the kernels compiled for it so far. Shared between
/// threads; each [`Batch`] records on its own.
pub struct Gpu {
    info: wgpu::AdapterInfo,
    device: wgpu::Device,
    queue: wgpu::Queue,
    limits: wgpu::Limits,
    pipelines: Mutex<HashMap<Kernel, Arc<wgpu::ComputePipeline>>>,
    /// Errors wgpu reported outside any call that could return them (validation of a
    /// submission); read and cleared after each submission.
    reported: Arc<Mutex<Vec<String>>>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("adapter", &self.describe())
            .finish()
    }
}

impl Gpu {
    /// Opens the best adapter wgpu finds on the backends named by `WGPU_BACKEND` (a comma list
    /// such as `vulkan`), else on every backend it was built with; `name` (case-insensitive
    /// substring of the adapter's name) picks one among several. With none, the error names
    /// every backend tried and what each found.
    pub fn open(name: Option<&str>) -> Result<Gpu, Error> {
        let backends = wgpu::Backends::from_env()
            .unwrap_or(wgpu::Backends::all())
            .intersection(wgpu::Instance::enabled_backend_features());
        let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle();
        descriptor.backends = backends;
        let instance = wgpu::Instance::new(descriptor);
        let mut tried = Vec::new();
        let mut found = Vec::new();
        for (backend, backend_name) in compiled_backends() {
            if !backends.contains(backend) {
                tried.push(format!("{backend_name}: left out by WGPU_BACKEND"));
                continue;
            }
            let adapters = pollster::block_on(instance.enumerate_adapters(backend));
            let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
            tried.push(if names.is_empty() {
                format!("{backend_name}: none")
            } else {
                format!("{backend_name}: {}", names.join(", "))
            });
            found.extend(adapters);
        }
        let any_found = !found.is_empty();
        if let Some(name) = name {
            let wanted = name.to_lowercase();
            found.retain(|a| a.get_info().name.to_lowercase().contains(&wanted));
        }
        found.sort_by_key(|a| rank(a.get_info().device_type));
        let Some(adapter) = found.into_iter().next() else {
            let mut tried = tried.join("; ");
            if let Some(name) = name {
                tried.push_str(&format!(" (none whose name contains `{name}`)"));
            }
            if !any_found && cfg!(target_os = "linux") {
                tried.push_str(
                    ". On Linux without a GPU, Mesa's lavapipe (Debian: mesa-vulkan-drivers) is a \
                     Vulkan adapter on the CPU",
                );
            }
            return Err(Error::NoAdapter { tried });
        };
        Gpu::with_adapter(adapter)
    }

    fn with_adapter(adapter: wgpu::Adapter) -> Result<Gpu, Error> {
        let info = adapter.get_info();
        // Everything the adapter offers: model weights want the largest storage bindings.
        let limits = adapter.limits();
        let descriptor = wgpu::DeviceDescriptor {
            label: Some("envace-gpu"),
            required_features: wgpu::Features::empty(),
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        };
        let (device, queue) =
            pollster::block_on(adapter.request_device(&descriptor)).map_err(|e| Error::Device {
                adapter: format!("{} ({:?})", info.name, info.backend),
                message: e.to_string(),
            })?;
        let reported = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&reported);
        device.on_uncaptured_error(Arc::new(move |error: wgpu::Error| {
            sink.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(error.to_string());
        }));
        Ok(Gpu {
            info,
            device,
            queue,
            limits,
            pipelines: Mutex::new(HashMap::new()),
            reported,
        })
    }

    /// The adapter's name, type and backend, e.g. `llvmpipe (LLVM 15.0.6, 256 bits) (Cpu,
    /// Vulkan)`.
    pub fn describe(&self) -> String {
        format!(
            "{} ({:?}, {:?})",
            self.info.name, self.info.device_type, self.info.backend
        )
    }

    /// The adapter wgpu picked.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    /// Whether the adapter is a CPU implementation (lavapipe, SwiftShader, WARP).
    pub fn is_cpu(&self) -> bool {
        self.info.device_type == wgpu::DeviceType::Cpu
    }

    /// The largest storage buffer one kernel can bind.
    pub fn max_binding_bytes(&self) -> u64 {
        self.limits
            .max_storage_buffer_binding_size
            .min(self.limits.max_buffer_size)
    }

    /// The compiled pipeline of `kernel`, compiled on first use.
    pub(crate) fn pipeline(&self, kernel: Kernel) -> Result<Arc<wgpu::ComputePipeline>, Error> {
        let mut pipelines = self
            .pipelines
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(pipeline) = pipelines.get(&kernel) {
            return Ok(Arc::clone(pipeline));
        }
        let source = kernel.source()?;
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(kernel.file()),
                source: wgpu::ShaderSource::Wgsl(source.into()),
            });
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(kernel.file()),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: wgpu::PipelineCompilationOptions::default(),
                cache: None,
            });
        self.take_reported().map_err(|message| Error::Shader {
            file: kernel.file().to_string(),
            message,
        })?;
        let pipeline = Arc::new(pipeline);
        pipelines.insert(kernel, Arc::clone(&pipeline));
        Ok(pipeline)
    }

    /// Errors wgpu reported since the last call, as one message.
    fn take_reported(&self) -> Result<(), String> {
        let mut reported = self.reported.lock().unwrap_or_else(PoisonError::into_inner);
        if reported.is_empty() {
            return Ok(());
        }
        let message = reported.join("; ");
        reported.clear();
        Err(message)
    }

    fn check_size(&self, what: &str, bytes: u64) -> Result<(), Error> {
        let limit = self.max_binding_bytes();
        if bytes > limit {
            return Err(Error::TooLarge {
                what: what.to_string(),
                bytes,
                limit,
            });
        }
        Ok(())
    }

    /// A buffer holding `values` (f32 or u32 words), named `what` in errors.
    pub fn upload<T: bytemuck::Pod>(&self, what: &str, values: &[T]) -> Result<Buf, Error> {
        let bytes: &[u8] = bytemuck::cast_slice(values);
        self.check_size(what, bytes.len() as u64)?;
        // wgpu binds no empty buffer: an empty one holds one unused word.
        let contents: &[u8] = if bytes.is_empty() { &[0; 4] } else { bytes };
        let buffer = self
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(what),
                contents,
                usage: Buf::USAGE,
            });
        Ok(Buf {
            buffer,
            bytes: bytes.len() as u64,
            what: what.to_string(),
        })
    }

    /// A buffer of `words` zeroed 4-byte words, named `what` in errors.
    pub fn zeros(&self, what: &str, words: usize) -> Result<Buf, Error> {
        let bytes = 4 * words as u64;
        self.check_size(what, bytes)?;
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(what),
            size: bytes.max(4),
            usage: Buf::USAGE,
            mapped_at_creation: false,
        });
        Ok(Buf {
            buffer,
            bytes,
            what: what.to_string(),
        })
    }

    /// Overwrites the start of `buf` with `values` (4-byte words).
    pub fn write<T: bytemuck::Pod>(&self, buf: &Buf, values: &[T]) -> Result<(), Error> {
        self.write_at(buf, 0, values)
    }

    /// Overwrites `buf` from word `first` on with `values` (4-byte words); seen by every batch
    /// submitted after.
    pub fn write_at<T: bytemuck::Pod>(
        &self,
        buf: &Buf,
        first: usize,
        values: &[T],
    ) -> Result<(), Error> {
        let bytes: &[u8] = bytemuck::cast_slice(values);
        let start = 4 * first as u64;
        if start + bytes.len() as u64 > buf.bytes || !bytes.len().is_multiple_of(4) {
            return Err(Error::Shape {
                kernel: "write",
                message: format!(
                    "{} bytes from byte {start} do not fit in {} ({} bytes)",
                    bytes.len(),
                    buf.what,
                    buf.bytes
                ),
            });
        }
        if !bytes.is_empty() {
            self.queue.write_buffer(&buf.buffer, start, bytes);
        }
        Ok(())
    }

    /// Starts a batch of dispatches.
    pub fn batch(&self) -> Batch<'_> {
        Batch {
            gpu: self,
            encoder: self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("envace-gpu batch"),
                }),
            n_dispatches: 0,
        }
    }

    /// Runs a batch's dispatches in order and waits for them.
    pub fn submit(&self, batch: Batch<'_>) -> Result<(), Error> {
        let index = self.queue.submit([batch.encoder.finish()]);
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: None,
            })
            .map_err(|e| Error::Run(e.to_string()))?;
        self.take_reported().map_err(Error::Run)
    }

    /// The words of `buf` read back (after everything submitted so far).
    pub fn read<T: bytemuck::Pod>(&self, buf: &Buf) -> Result<Vec<T>, Error> {
        let size = std::mem::size_of::<T>() as u64;
        let n = (buf.bytes / size.max(1)) as usize;
        if n == 0 {
            return Ok(Vec::new());
        }
        let bytes = n as u64 * size;
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("envace-gpu readback"),
            size: bytes.next_multiple_of(4),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("envace-gpu readback"),
            });
        encoder.copy_buffer_to_buffer(&buf.buffer, 0, &staging, 0, bytes.next_multiple_of(4));
        let index = self.queue.submit([encoder.finish()]);
        let (sender, receiver) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |result| {
            // The receiver waits below; a send can only fail if it is gone.
            let _ = sender.send(result);
        });
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: None,
            })
            .map_err(|e| Error::Run(e.to_string()))?;
        receiver
            .recv()
            .map_err(|e| Error::Run(format!("reading {} back: {e}", buf.what)))?
            .map_err(|e| Error::Run(format!("reading {} back: {e}", buf.what)))?;
        let view = staging
            .get_mapped_range(..)
            .map_err(|e| Error::Run(format!("reading {} back: {e}", buf.what)))?;
        let values = bytemuck::pod_collect_to_vec(&view[..bytes as usize]);
        drop(view);
        staging.unmap();
        self.take_reported().map_err(Error::Run)?;
        Ok(values)
    }
}

/// A storage buffer on the GPU with its size and a name for errors.
#[derive(Debug)]
pub struct Buf {
    pub(crate) buffer: wgpu::Buffer,
    bytes: u64,
    what: String,
}

impl Buf {
    const USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
        .union(wgpu::BufferUsages::COPY_SRC)
        .union(wgpu::BufferUsages::COPY_DST);

    /// Its size in 4-byte words.
    pub fn words(&self) -> usize {
        (self.bytes / 4) as usize
    }

    /// The name errors give it.
    pub fn name(&self) -> &str {
        &self.what
    }
}

/// Dispatches recorded in order, run by [`Gpu::submit`]; each sees the writes of the ones
/// before it.
pub struct Batch<'g> {
    gpu: &'g Gpu,
    encoder: wgpu::CommandEncoder,
    n_dispatches: usize,
}

impl std::fmt::Debug for Batch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("n_dispatches", &self.n_dispatches)
            .finish()
    }
}

impl Batch<'_> {
    /// How many dispatches are recorded.
    pub fn len(&self) -> usize {
        self.n_dispatches
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.n_dispatches == 0
    }

    /// Records `kernel` over `groups` workgroups with its parameters (binding 0, as 4-byte
    /// words) and `buffers` (bindings 1, 2, …).
    pub(crate) fn dispatch(
        &mut self,
        kernel: Kernel,
        params: &[u32],
        buffers: &[&Buf],
        groups: [u32; 3],
    ) -> Result<(), Error> {
        let max = self.gpu.limits.max_compute_workgroups_per_dimension;
        if groups.iter().any(|&g| g > max) {
            return Err(Error::Shape {
                kernel: kernel.file(),
                message: format!("{groups:?} workgroups exceed this GPU's {max} per dimension"),
            });
        }
        if groups.contains(&0) {
            return Ok(());
        }
        let pipeline = self.gpu.pipeline(kernel)?;
        // Uniform buffers are read in 16-byte rows.
        let mut words = params.to_vec();
        words.resize(params.len().next_multiple_of(4).max(4), 0);
        let uniform = self
            .gpu
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(kernel.file()),
                contents: bytemuck::cast_slice(&words),
                usage: wgpu::BufferUsages::UNIFORM,
            });
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: uniform.as_entire_binding(),
        }];
        for (idx, buf) in buffers.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry {
                binding: idx as u32 + 1,
                resource: buf.buffer.as_entire_binding(),
            });
        }
        let bind_group = self
            .gpu
            .device
            .create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(kernel.file()),
                layout: &pipeline.get_bind_group_layout(0),
                entries: &entries,
            });
        let mut pass = self
            .encoder
            .begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(kernel.file()),
                timestamp_writes: None,
            });
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
        drop(pass);
        self.n_dispatches += 1;
        Ok(())
    }
}
