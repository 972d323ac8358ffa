//! One long-lived GPU context: adapter choice, device, queue, and the async read-back
//! that works the same natively and in the browser.

use std::sync::{Arc, Mutex};

use wgpu::util::DeviceExt;

use crate::error::{EngineError, Result};

/// How to pick the adapter. `name` matches a substring of the adapter name (case-insensitive),
/// or an index into the enumerated adapters ("0", "1", …) natively.
#[derive(Clone, Debug, Default)]
pub struct AdapterOptions {
    pub name: Option<String>,
    pub backends: Option<wgpu::Backends>,
    /// The machine's memory in bytes, where the embedder knows it better than the engine (the
    /// browser's `navigator.deviceMemory`); natively the engine reads it itself.
    pub host_memory: Option<u64>,
    /// What to call an adapter the backend gives no name (the browser's WebGPU, whose page
    /// knows its vendor and architecture).
    pub fallback_name: Option<String>,
}

impl AdapterOptions {
    /// Reads `LILYPAD_ADAPTER` (name substring or index) and `LILYPAD_BACKEND`
    /// (vulkan, metal, dx12, gl, webgpu).
    pub fn from_env() -> Self {
        let name = std::env::var("LILYPAD_ADAPTER")
            .ok()
            .filter(|s| !s.is_empty());
        let backends = std::env::var("LILYPAD_BACKEND")
            .ok()
            .map(|b| wgpu::Backends::from_comma_list(&b));
        Self {
            name,
            backends,
            host_memory: None,
            fallback_name: None,
        }
    }
}

/// What the user is told about the adapter in use.
#[derive(Clone, Debug)]
pub struct AdapterSummary {
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub max_storage_binding: u64,
    pub max_buffer: u64,
    pub subgroups: bool,
    pub shader_f16: bool,
    /// The largest device-local memory heap, where the adapter says (Vulkan, natively); a CPU
    /// adapter's is nominal (lavapipe: 2 GiB, whatever the machine has).
    pub memory: Option<u64>,
    /// The machine's memory, where known, which is where a CPU adapter's buffers live (natively
    /// MemTotal of /proc/meminfo; in the browser `navigator.deviceMemory`, rounded down).
    pub host_memory: Option<u64>,
}

impl AdapterSummary {
    /// What a model's whole memory plan must fit in: the machine's memory for a CPU adapter,
    /// the device-local heap for a GPU, with the words that name it.
    pub fn memory_budget(&self) -> Option<(u64, &'static str)> {
        if self.device_type == "Cpu" {
            self.host_memory.map(|m| (m, "the machine's memory"))
        } else {
            self.memory.map(|m| (m, "its device memory"))
        }
    }
}

impl std::fmt::Display for AdapterSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}, {}{}), max storage binding {}, max buffer {}",
            self.name,
            self.backend,
            self.device_type,
            if self.driver.is_empty() {
                String::new()
            } else {
                format!(", {}", self.driver)
            },
            crate::error::human_bytes(self.max_storage_binding),
            crate::error::human_bytes(self.max_buffer),
        )?;
        if let Some((memory, _)) = self.memory_budget() {
            let what = if self.device_type == "Cpu" {
                "system memory"
            } else {
                "memory heap"
            };
            write!(f, ", {what} {}", crate::error::human_bytes(memory))?;
        }
        Ok(())
    }
}

/// The size of the adapter's largest device-local heap, from Vulkan; None on other backends
/// and platforms (WebGPU, Metal and DX12 through wgpu do not say).
#[cfg(any(target_os = "linux", target_os = "windows"))]
fn device_local_memory(adapter: &wgpu::Adapter) -> Option<u64> {
    use ash::vk;
    // SAFETY: the raw instance and physical device are only read, while `adapter` (which owns
    // them) is borrowed.
    let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }?;
    let properties = unsafe {
        hal.shared_instance()
            .raw_instance()
            .get_physical_device_memory_properties(hal.raw_physical_device())
    };
    properties
        .memory_heaps_as_slice()
        .iter()
        .filter(|heap| heap.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
        .map(|heap| heap.size)
        .max()
}

#[cfg(not(any(target_os = "linux", target_os = "windows")))]
fn device_local_memory(_adapter: &wgpu::Adapter) -> Option<u64> {
    None
}

/// The machine's memory (MemTotal); None where /proc/meminfo is not (wasm, other systems).
fn system_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

pub struct GpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub adapter: AdapterSummary,
    pub limits: wgpu::Limits,
    pub features: wgpu::Features,
    pub matvec_layout: crate::ops::matvec::MatvecLayout,
    /// The fewest invocations a subgroup can have on this adapter (where it has subgroups).
    pub subgroup_min_size: u32,
    lost: Arc<Mutex<Option<String>>>,
    uncaptured: Arc<Mutex<Option<String>>>,
    pub(crate) kernels: crate::kernels::KernelCache,
}

impl GpuContext {
    pub async fn new(opts: &AdapterOptions) -> Result<Arc<Self>> {
        let backends = opts.backends.unwrap_or(wgpu::Backends::all());
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends,
            ..wgpu::InstanceDescriptor::new_without_display_handle_from_env()
        });
        let adapter = pick_adapter(&instance, opts).await?;
        let mut info = adapter.get_info();
        if info.name.is_empty() {
            info.name = opts
                .fallback_name
                .clone()
                .unwrap_or_else(|| format!("{:?} adapter", info.backend));
        }
        let adapter_limits = adapter.limits();
        let downlevel = adapter.get_downlevel_capabilities();
        if !downlevel
            .flags
            .contains(wgpu::DownlevelFlags::COMPUTE_SHADERS)
        {
            return Err(EngineError::NoAdapter {
                adapter: Some(info.name.clone()),
                reason: "the adapter has no compute shaders".into(),
            });
        }
        // Ask for the adapter's real storage limits: model weights need big bindings.
        let limits = wgpu::Limits {
            max_storage_buffer_binding_size: adapter_limits.max_storage_buffer_binding_size,
            max_buffer_size: adapter_limits.max_buffer_size,
            max_storage_buffers_per_shader_stage: adapter_limits
                .max_storage_buffers_per_shader_stage
                .min(10),
            max_compute_workgroup_storage_size: adapter_limits.max_compute_workgroup_storage_size,
            max_compute_invocations_per_workgroup: adapter_limits
                .max_compute_invocations_per_workgroup,
            max_compute_workgroup_size_x: adapter_limits.max_compute_workgroup_size_x,
            ..wgpu::Limits::downlevel_defaults()
        };
        // Timestamps between dispatches let `Model::profile_step` time every kernel of a
        // real step where the adapter can.
        let features = adapter.features()
            & (wgpu::Features::SHADER_F16
                | wgpu::Features::SUBGROUP
                | wgpu::Features::TIMESTAMP_QUERY
                | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES);
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("lilypad"),
                required_features: features,
                required_limits: limits.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| EngineError::DeviceRequest {
                adapter: info.name.clone(),
                reason: e.to_string(),
            })?;

        let lost = Arc::new(Mutex::new(None));
        let lost_cb = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            *lost_cb.lock().unwrap() = Some(format!("{reason:?}: {message}"));
        });
        let uncaptured = Arc::new(Mutex::new(None));
        let uncaptured_cb = uncaptured.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut slot = uncaptured_cb.lock().unwrap();
            if slot.is_none() {
                *slot = Some(e.to_string());
            }
        }));

        let adapter = AdapterSummary {
            name: info.name.clone(),
            backend: format!("{:?}", info.backend),
            device_type: format!("{:?}", info.device_type),
            driver: [info.driver.as_str(), info.driver_info.as_str()]
                .iter()
                .filter(|s| !s.is_empty())
                .copied()
                .collect::<Vec<_>>()
                .join(" "),
            max_storage_binding: limits.max_storage_buffer_binding_size as u64,
            max_buffer: limits.max_buffer_size,
            subgroups: features.contains(wgpu::Features::SUBGROUP),
            shader_f16: features.contains(wgpu::Features::SHADER_F16),
            memory: device_local_memory(&adapter),
            host_memory: opts.host_memory.or_else(system_memory),
        };
        let matvec_layout = crate::ops::matvec::MatvecLayout::for_adapter(info.device_type);
        Ok(Arc::new(Self {
            matvec_layout,
            subgroup_min_size: info.subgroup_min_size,
            device,
            queue,
            adapter,
            limits,
            features,
            lost,
            uncaptured,
            kernels: Default::default(),
        }))
    }

    /// Destroys the device, as a driver reset would; every later check reports it lost (the
    /// device's own lost callback may come later, or, in a browser, after the failure it
    /// causes).
    pub fn destroy(&self) {
        self.lost
            .lock()
            .unwrap()
            .get_or_insert_with(|| "Destroyed: the device was destroyed".into());
        self.device.destroy();
    }

    /// Errors seen by the device since the last check: a lost device or a validation
    /// error outside an error scope.
    pub fn check(&self) -> Result<()> {
        if let Some(reason) = self.lost.lock().unwrap().clone() {
            return Err(EngineError::DeviceLost(reason));
        }
        if let Some(message) = self.uncaptured.lock().unwrap().take() {
            if message.to_lowercase().contains("out of memory") {
                return Err(EngineError::OutOfMemory(message));
            }
            return Err(EngineError::Validation {
                context: "GPU work".into(),
                message,
            });
        }
        Ok(())
    }

    /// A storage buffer of `size` bytes, checked against the adapter's limits first so
    /// oversized requests fail with a typed error instead of a device error.
    pub fn storage_buffer(
        &self,
        label: &str,
        size: u64,
        extra: wgpu::BufferUsages,
    ) -> Result<wgpu::Buffer> {
        self.check_binding(label, size)?;
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: size.max(4).next_multiple_of(4),
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC
                | extra,
            mapped_at_creation: false,
        }))
    }

    /// A storage buffer filled with `data`.
    pub fn storage_buffer_init(&self, label: &str, data: &[u8]) -> Result<wgpu::Buffer> {
        self.check_binding(label, data.len() as u64)?;
        if !data.len().is_multiple_of(4) || data.is_empty() {
            let mut padded = data.to_vec();
            padded.resize(data.len().max(4).next_multiple_of(4), 0);
            return self.storage_buffer_init(label, &padded);
        }
        Ok(self
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: data,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_DST
                    | wgpu::BufferUsages::COPY_SRC,
            }))
    }

    pub fn uniform_buffer(&self, label: &str, data: &[u8]) -> wgpu::Buffer {
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: data,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            })
    }

    pub fn check_binding(&self, label: &str, size: u64) -> Result<()> {
        let allowed = self.limits.max_storage_buffer_binding_size;
        if size > allowed {
            return Err(EngineError::TooLarge {
                adapter: self.adapter.name.clone(),
                what: "largest storage binding",
                needed: format!("{} for {label}", crate::error::human_bytes(size)),
                allowed: crate::error::human_bytes(allowed),
            });
        }
        Ok(())
    }

    /// Copies `size` bytes of `buffer` from `offset` to the CPU. Natively this polls the
    /// device; in the browser the map callback arrives from the event loop.
    pub async fn read_back(
        &self,
        buffer: &wgpu::Buffer,
        offset: u64,
        size: u64,
    ) -> Result<Vec<u8>> {
        let size = size.next_multiple_of(4);
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("read-back"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = self.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(buffer, offset, &staging, 0, size);
        self.queue.submit([encoder.finish()]);
        let (tx, rx) = flume::bounded(1);
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        #[cfg(not(target_arch = "wasm32"))]
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| EngineError::Readback(e.to_string()))?;
        let mapped = rx
            .recv_async()
            .await
            .map_err(|e| EngineError::Readback(e.to_string()))?;
        self.check()?;
        mapped.map_err(|e| EngineError::Readback(e.to_string()))?;
        let bytes = staging
            .get_mapped_range(..)
            .map_err(|e| EngineError::Readback(e.to_string()))?
            .to_vec();
        staging.unmap();
        Ok(bytes)
    }

    pub async fn read_f32(
        &self,
        buffer: &wgpu::Buffer,
        offset_elems: u64,
        n: u64,
    ) -> Result<Vec<f32>> {
        let bytes = self.read_back(buffer, offset_elems * 4, n * 4).await?;
        Ok(bytemuck::pod_collect_to_vec(&bytes[..(n * 4) as usize]))
    }

    pub async fn read_u32(
        &self,
        buffer: &wgpu::Buffer,
        offset_elems: u64,
        n: u64,
    ) -> Result<Vec<u32>> {
        let bytes = self.read_back(buffer, offset_elems * 4, n * 4).await?;
        Ok(bytemuck::pod_collect_to_vec(&bytes[..(n * 4) as usize]))
    }

    /// Whether kernels may use subgroup operations here: the adapter has them and this is a
    /// native build (browsers need `enable subgroups;` ahead of the generated constants,
    /// which the preprocessor cannot place, and naga rejects it).
    pub fn shader_subgroups(&self) -> bool {
        cfg!(not(target_arch = "wasm32")) && self.features.contains(wgpu::Features::SUBGROUP)
    }

    /// Whether shader loops are cut short on this adapter: llvmpipe (lavapipe) ends every loop
    /// of an invocation after 65535 iterations in all, silently, so kernels that walk long
    /// ranges split them (or refuse) on CPU adapters.
    pub fn loops_limited(&self) -> bool {
        self.adapter.device_type == "Cpu"
    }

    /// Submits `encoder`; the returned handle resolves once the GPU has run it (and all that
    /// was submitted before it), for callers that wait on their own work without a read-back.
    pub fn submit_tracked(&self, encoder: wgpu::CommandEncoder) -> Submitted {
        let index = self.queue.submit([encoder.finish()]);
        // In the browser the queue's work-done promise is the wait. Natively the submission's
        // index is: a work-done callback belongs to the queue's latest submission when it is
        // registered, which another thread sharing the device may have made since, and a
        // poll for our own index need not fire it (it hung tests sharing one device).
        #[cfg(target_arch = "wasm32")]
        let done = {
            let (tx, done) = flume::bounded(1);
            self.queue.on_submitted_work_done(move || {
                let _ = tx.send(());
            });
            done
        };
        Submitted {
            index,
            #[cfg(target_arch = "wasm32")]
            done,
        }
    }

    /// Waits until `work` has run: natively polls the device for that submission only; in the
    /// browser the queue's promise settles from the event loop, which meanwhile serves the
    /// page's other messages (an abort, say).
    pub async fn finished(&self, work: Submitted) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.poll_until(work.index)?;
            self.check()
        }
        #[cfg(target_arch = "wasm32")]
        {
            let done = work.done.recv_async().await;
            self.check()?;
            done.map_err(|e| EngineError::Readback(e.to_string()))
        }
    }

    /// Natively, polls the device until submission `index` has run (not the ones after it),
    /// so its callbacks (a map, a work-done notice) have fired.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn poll_until(&self, index: wgpu::SubmissionIndex) -> Result<()> {
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: None,
            })
            .map(|_| ())
            .or_else(|e| {
                // A lost device fails the submission: say that, not the wait's complaint.
                self.check()?;
                Err(EngineError::Readback(e.to_string()))
            })
    }

    /// Waits for submitted work (natively); used by benchmarks.
    pub fn wait(&self) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| EngineError::Readback(e.to_string()))?;
        self.check()
    }
}

/// Work submitted by [`GpuContext::submit_tracked`], to wait for with
/// [`GpuContext::finished`].
pub struct Submitted {
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    index: wgpu::SubmissionIndex,
    #[cfg(target_arch = "wasm32")]
    done: flume::Receiver<()>,
}

async fn pick_adapter(instance: &wgpu::Instance, opts: &AdapterOptions) -> Result<wgpu::Adapter> {
    #[cfg(not(target_arch = "wasm32"))]
    if let Some(want) = &opts.name {
        let adapters = instance
            .enumerate_adapters(opts.backends.unwrap_or(wgpu::Backends::all()))
            .await;
        let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
        let chosen = match want.parse::<usize>() {
            Ok(i) => adapters.into_iter().nth(i),
            Err(_) => {
                let w = want.to_lowercase();
                adapters
                    .into_iter()
                    .find(|a| a.get_info().name.to_lowercase().contains(&w))
            }
        };
        return chosen.ok_or_else(|| EngineError::NoAdapter {
            adapter: Some(want.clone()),
            reason: if names.is_empty() {
                "no adapters found".into()
            } else {
                format!("available: {}", names.join(", "))
            },
        });
    }
    instance
        .request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
            compatible_surface: None,
            ..Default::default()
        })
        .await
        .map_err(|e| EngineError::NoAdapter {
            adapter: opts.name.clone(),
            reason: format!(
                "{e}. Install a Vulkan, Metal or DX12 driver (on Linux without a GPU: Mesa's lavapipe, package mesa-vulkan-drivers)"
            ),
        })
}

/// Lists the adapters this machine offers (natively).
#[cfg(not(target_arch = "wasm32"))]
pub async fn list_adapters() -> Vec<wgpu::AdapterInfo> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    instance
        .enumerate_adapters(wgpu::Backends::all())
        .await
        .iter()
        .map(|a| a.get_info())
        .collect()
}
