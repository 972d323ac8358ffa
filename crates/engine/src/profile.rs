//! Kernel timing: what each recorded dispatch costs on the device, summed per kernel.
//! Where the adapter writes timestamps inside compute passes, the dispatches run as they
//! normally do with a timestamp between each; elsewhere each is submitted and waited for on
//! its own (which adds a submission's cost to every kernel). Native only: it blocks on the
//! device.

use std::collections::BTreeMap;

#[cfg(not(target_arch = "wasm32"))]
use crate::error::Result;
use crate::gpu::GpuContext;
#[cfg(not(target_arch = "wasm32"))]
use crate::kernels::Dispatch;

/// Seconds and dispatch counts per kernel label.
#[derive(Clone, Debug, Default)]
pub struct KernelTimes {
    kernels: BTreeMap<&'static str, (f64, u32)>,
    /// Timed by GPU timestamps between dispatches (else each dispatch alone, from the host).
    pub timestamps: bool,
}

impl KernelTimes {
    pub fn add(&mut self, label: &'static str, seconds: f64) {
        let e = self.kernels.entry(label).or_default();
        e.0 += seconds;
        e.1 += 1;
    }

    pub fn total(&self) -> f64 {
        self.kernels.values().map(|k| k.0).sum()
    }

    /// How many dispatches were timed.
    pub fn dispatches(&self) -> u32 {
        self.kernels.values().map(|k| k.1).sum()
    }

    /// (label, seconds, dispatches), slowest first.
    pub fn slowest_first(&self) -> Vec<(&'static str, f64, u32)> {
        let mut v: Vec<_> = self.kernels.iter().map(|(k, t)| (*k, t.0, t.1)).collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        v
    }

    /// Adds every kernel of `other` into this.
    pub fn merge(&mut self, other: &KernelTimes) {
        for (k, (t, n)) in &other.kernels {
            let e = self.kernels.entry(k).or_default();
            e.0 += t;
            e.1 += n;
        }
        self.timestamps |= other.timestamps;
    }
}

/// The total, then each kernel's share, slowest first, one per line.
impl std::fmt::Display for KernelTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let total = self.total();
        let how = if self.timestamps {
            "GPU timestamps between dispatches"
        } else {
            "each dispatch submitted and waited for alone, so submission costs are included"
        };
        writeln!(f, "{:.1} ms of kernels ({how})", total * 1e3)?;
        for (kernel, t, n) in self.slowest_first() {
            writeln!(
                f,
                "  {kernel:24} {:10.2} ms {:5.1} %  ({n} dispatches)",
                t * 1e3,
                100.0 * t / total.max(f64::MIN_POSITIVE)
            )?;
        }
        Ok(())
    }
}

/// Whether `ctx`'s device can write timestamps between the dispatches of one pass.
pub fn has_pass_timestamps(ctx: &GpuContext) -> bool {
    let in_pass = wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
    ctx.device.features().contains(in_pass)
}

/// Submits `encoder` (what it already holds runs first, untimed), then runs `steps` (each
/// dispatch with its step's token count) in one compute pass and adds each one's time to
/// `times`. Returns once they have all run.
#[cfg(not(target_arch = "wasm32"))]
pub async fn run_timed(
    ctx: &GpuContext,
    mut encoder: wgpu::CommandEncoder,
    steps: &[(&Dispatch, u32)],
    times: &mut KernelTimes,
) -> Result<()> {
    if steps.is_empty() {
        ctx.queue.submit([encoder.finish()]);
        return Ok(());
    }
    if has_pass_timestamps(ctx) {
        let count = steps.len() as u32 + 1;
        let queries = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("profile"),
            ty: wgpu::QueryType::Timestamp,
            count,
        });
        let resolved = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("profile ticks"),
            size: count as u64 * 8,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.write_timestamp(&queries, 0);
            for (i, (d, rows)) in steps.iter().enumerate() {
                d.record(&mut pass, *rows);
                pass.write_timestamp(&queries, i as u32 + 1);
            }
        }
        encoder.resolve_query_set(&queries, 0..count, &resolved, 0);
        ctx.queue.submit([encoder.finish()]);
        let bytes = ctx.read_back(&resolved, 0, count as u64 * 8).await?;
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&bytes);
        let period = ctx.queue.get_timestamp_period() as f64 * 1e-9;
        for (i, (d, _)) in steps.iter().enumerate() {
            times.add(
                d.label,
                ticks[i + 1].saturating_sub(ticks[i]) as f64 * period,
            );
        }
        times.timestamps = true;
    } else {
        ctx.queue.submit([encoder.finish()]);
        wait(ctx)?;
        for (d, rows) in steps {
            let t = std::time::Instant::now();
            let mut encoder = ctx.device.create_command_encoder(&Default::default());
            {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                d.record(&mut pass, *rows);
            }
            ctx.queue.submit([encoder.finish()]);
            wait(ctx)?;
            times.add(d.label, t.elapsed().as_secs_f64());
        }
    }
    ctx.check()
}

#[cfg(not(target_arch = "wasm32"))]
fn wait(ctx: &GpuContext) -> Result<()> {
    let _ = ctx.device.poll(wgpu::PollType::wait_indefinitely());
    ctx.check()
}
