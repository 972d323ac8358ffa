//! What the kernel test files share: the test adapter with buffer and launch helpers, and
//! seeded randomness. Each test file uses part of it.
#![allow(dead_code)]

use std::sync::Arc;

use lilypad_engine::GpuContext;
use lilypad_engine::kernels::{Dispatch, submit};
use lilypad_engine::ops::{self, Step};
use rand::{SeedableRng, rngs::StdRng};

#[path = "../../../../tests/src/gpu.rs"]
mod shared_gpu;

/// The shared context plus buffer and launch helpers.
pub struct Gpu(pub Arc<GpuContext>);

impl Gpu {
    pub fn get() -> Option<Self> {
        shared_gpu::gpu().map(Gpu)
    }

    pub fn upload(&self, data: &[f32]) -> wgpu::Buffer {
        self.0
            .storage_buffer_init("input", bytemuck::cast_slice(data))
            .unwrap()
    }

    pub fn upload_u32(&self, data: &[u32]) -> wgpu::Buffer {
        self.0
            .storage_buffer_init("input", bytemuck::cast_slice(data))
            .unwrap()
    }

    pub fn zeros(&self, n: usize) -> wgpu::Buffer {
        self.0
            .storage_buffer("output", n as u64 * 4, wgpu::BufferUsages::empty())
            .unwrap()
    }

    pub fn step(&self, n_tokens: usize, pos0: usize) -> wgpu::Buffer {
        self.step_of(Step::new(n_tokens as u32, pos0 as u32))
    }

    /// A step buffer holding `s` (tokens of several sequences: `Step::batch`,
    /// `Step::for_sequence`).
    pub fn step_of(&self, s: Step) -> wgpu::Buffer {
        let b = ops::step_buffer(&self.0);
        ops::write_step(&self.0, &b, s);
        b
    }

    pub fn run(&self, ds: &[Dispatch], tokens: usize) {
        submit(&self.0, &ds.iter().collect::<Vec<_>>(), tokens as u32);
    }

    pub fn read(&self, b: &wgpu::Buffer, n: usize) -> Vec<f32> {
        pollster::block_on(self.0.read_f32(b, 0, n as u64)).unwrap()
    }
}

/// The gated delta rule's layouts for `shape` on the test adapter: split (GPUs), and per lane
/// where it can run (CPU adapters with subgroups of 8 or more, as lavapipe; value heads a
/// multiple of 4 wide). Every delta-rule kernel test runs each.
pub fn delta_layouts(
    gpu: &Gpu,
    shape: &ops::delta_net::DeltaNetShape,
) -> Vec<ops::delta_net::DeltaNetLayout> {
    let mut all = vec![ops::delta_net::DeltaNetLayout::Split];
    if ops::delta_net::per_lane_allowed(&gpu.0, shape) {
        all.push(ops::delta_net::DeltaNetLayout::PerLane);
    }
    all
}

/// The test adapter, or return from the test (a failure instead with LILYPAD_REQUIRE_GPU=1).
#[macro_export]
macro_rules! gpu_or_skip {
    () => {
        match common::Gpu::get() {
            Some(g) => g,
            None => return,
        }
    };
}

/// Fresh inputs each run; the seed is printed so a failure can be replayed.
pub fn seeded() -> StdRng {
    let seed = std::env::var("LILYPAD_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("LILYPAD_TEST_SEED={seed}");
    StdRng::seed_from_u64(seed)
}
