//! Weights on the GPU: GGUF blocks repacked (losslessly) so every block starts on a u32,
//! and split by rows across several buffers when a tensor exceeds one storage binding.

use lilypad_gguf::GgmlType;

use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;

/// Weight formats the kernels decode (`shaders/common/quant.wgsl`).
pub const SUPPORTED: &[GgmlType] = &[
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q8_0,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::F32,
];

/// Whether the kernels decode `ty` (one of [`SUPPORTED`]).
pub fn supported(ty: GgmlType) -> bool {
    SUPPORTED.contains(&ty)
}

/// The shader macro selecting the decoder for `ty`.
pub fn type_macro(ty: GgmlType) -> &'static str {
    match ty {
        GgmlType::Q4_0 => "Q4_0",
        GgmlType::Q4_1 => "Q4_1",
        GgmlType::Q8_0 => "Q8_0",
        GgmlType::Q4K => "Q4_K",
        GgmlType::Q5K => "Q5_K",
        GgmlType::Q6K => "Q6_K",
        GgmlType::F16 => "F16",
        GgmlType::BF16 => "BF16",
        _ => "F32",
    }
}

/// Words of packed data and of scales for `rows` rows of `cols` weights.
#[derive(Debug, Default, PartialEq)]
pub struct Repacked {
    pub q: Vec<u32>,
    pub s: Vec<u32>,
}

fn f16_bits(b: &[u8]) -> u32 {
    u16::from_le_bytes([b[0], b[1]]) as u32
}

fn word(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Repacks GGUF row-major `bytes` (`rows` × `cols` of `ty`).
pub fn repack(name: &str, ty: GgmlType, rows: u64, cols: u64, bytes: &[u8]) -> Result<Repacked> {
    let unsupported = || EngineError::UnsupportedType {
        tensor: name.to_string(),
        ty: ty.name(),
        context: "the GPU kernels",
    };
    if !supported(ty) {
        return Err(unsupported());
    }
    // Kernels decode 8 weights at a time and never straddle a block (256 for k-quants).
    let col_multiple = ty.block_size().max(8);
    if !cols.is_multiple_of(col_multiple) {
        return Err(EngineError::Shape {
            op: "weight upload",
            detail: format!(
                "{name}: {cols} columns; the kernels need a multiple of {col_multiple} for {}",
                ty.name()
            ),
        });
    }
    let expected = ty.row_bytes(cols)? * rows;
    if bytes.len() as u64 != expected {
        return Err(EngineError::Shape {
            op: "weight upload",
            detail: format!(
                "{name}: {} bytes for {rows}x{cols} {}, expected {expected}",
                bytes.len(),
                ty.name()
            ),
        });
    }
    let mut out = Repacked::default();
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            out.q = bytes.chunks_exact(4).map(word).collect();
            out.s = vec![0];
        }
        GgmlType::Q4_0 | GgmlType::Q8_0 => {
            let bs = ty.type_size() as usize;
            let n_blocks = bytes.len() / bs;
            out.q.reserve(n_blocks * (bs - 2) / 4);
            out.s = vec![0; n_blocks.div_ceil(2)];
            for (b, block) in bytes.chunks_exact(bs).enumerate() {
                out.s[b / 2] |= f16_bits(block) << (16 * (b % 2));
                out.q.extend(block[2..].chunks_exact(4).map(word));
            }
        }
        GgmlType::Q4_1 => {
            let n_blocks = bytes.len() / 20;
            out.q.reserve(n_blocks * 4);
            out.s.reserve(n_blocks);
            for block in bytes.chunks_exact(20) {
                out.s.push(f16_bits(block) | (f16_bits(&block[2..]) << 16));
                out.q.extend(block[4..].chunks_exact(4).map(word));
            }
        }
        GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K => {
            // Byte ranges of one block that go to w_q and to w_s, in order (layouts in
            // shaders/common/quant.wgsl), then Q5_K's and Q6_K's high bits regrouped. Only
            // Q6_K's trailing f16 `d` fills part of a word.
            type Parts = &'static [(usize, usize)];
            let (q_parts, s_parts): (Parts, Parts) = match ty {
                GgmlType::Q4K => (&[(16, 144)], &[(0, 16)]),
                GgmlType::Q5K => (&[(48, 176)], &[(0, 16)]),
                _ => (&[(0, 128)], &[(192, 210)]),
            };
            let bs = ty.type_size() as usize;
            for block in bytes.chunks_exact(bs) {
                for &(lo, hi) in q_parts {
                    out.q.extend(block[lo..hi].chunks_exact(4).map(word));
                }
                match ty {
                    GgmlType::Q5K => out.q.extend(q5k_high_bits(&block[16..48])),
                    GgmlType::Q6K => out.q.extend(q6k_high_bits(&block[128..192])),
                    _ => {}
                }
                for &(lo, hi) in s_parts {
                    out.s.extend(
                        block[lo..hi]
                            .chunks(4)
                            .map(|c| c.iter().rev().fold(0u32, |w, &b| (w << 8) | b as u32)),
                    );
                }
            }
        }
        _ => return Err(unsupported()),
    }
    Ok(out)
}

/// Q5_K's fifth bits regrouped so that a 64-weight chunk's are in two words, lined up with
/// the byte lanes of its qs words: chunk c's qs word j (bytes of weights l = 4j + i, i the
/// lane, of sub-blocks 2c and 2c + 1) finds the fifth bits of its low and high nibbles at bits
/// 2(j % 4) and 2(j % 4) + 1 of byte i of word 2c + j / 4. (llama.cpp keeps them as bit s of
/// qh[l] for sub-block s, so a chunk's 64 bits are spread over all 32 bytes.)
fn q5k_high_bits(qh: &[u8]) -> [u32; 8] {
    let mut out = [0u32; 8];
    for c in 0..4 {
        for j in 0..8 {
            for i in 0..4 {
                let b = qh[4 * j + i] as u32;
                let (lo, hi) = ((b >> (2 * c)) & 1, (b >> (2 * c + 1)) & 1);
                out[2 * c + j / 4] |= (lo | hi << 1) << (8 * i + 2 * (j % 4));
            }
        }
    }
    out
}

/// Q6_K's top two bits regrouped so that one 64-weight step's are in four words, lined up
/// with the byte lanes of its ql words: in half h, part p (ql words 16h + 8p + j, low nibbles
/// weights 128h + 32p + l, high nibbles 64 on, l = 4j + i), byte i of word 8h + 4p + j / 2
/// holds, from bit 4(j % 2), the low nibble's two bits then the high nibble's. (llama.cpp
/// keeps them at bits 2p and 2p + 4 of qh[32h + l].)
fn q6k_high_bits(qh: &[u8]) -> [u32; 16] {
    let mut out = [0u32; 16];
    for h in 0..2 {
        for p in 0..2 {
            for j in 0..8 {
                for i in 0..4 {
                    let b = qh[32 * h + 4 * j + i] as u32;
                    let (lo, hi) = ((b >> (2 * p)) & 3, (b >> (2 * p + 4)) & 3);
                    out[8 * h + 4 * p + j / 2] |= (lo | hi << 2) << (8 * i + 4 * (j % 2));
                }
            }
        }
    }
    out
}

pub struct WeightChunk {
    pub q: wgpu::Buffer,
    pub s: wgpu::Buffer,
    pub row_start: u32,
    pub rows: u32,
}

/// A 2-D weight matrix (`rows` outputs × `cols` inputs) resident on the GPU.
pub struct GpuWeight {
    pub name: String,
    pub ty: GgmlType,
    pub rows: u64,
    pub cols: u64,
    pub chunks: Vec<WeightChunk>,
}

impl GpuWeight {
    /// Uploads GGUF bytes. `max_chunk_bytes` caps one buffer (defaults to the adapter's
    /// storage binding limit); tests lower it to exercise splitting.
    pub fn upload(
        ctx: &GpuContext,
        name: &str,
        ty: GgmlType,
        rows: u64,
        cols: u64,
        bytes: &[u8],
        max_chunk_bytes: Option<u64>,
    ) -> Result<Self> {
        let limit = max_chunk_bytes
            .unwrap_or(ctx.limits.max_storage_buffer_binding_size)
            .min(ctx.limits.max_storage_buffer_binding_size);
        let row_bytes = ty.row_bytes(cols)?;
        let rows_per_chunk = (limit / row_bytes.max(1)).min(rows).max(1);
        // Q4_0/Q8_0 pack two blocks' scales per word: keep chunks at an even block count.
        let rows_per_chunk = if rows_per_chunk < rows && (cols / 32) % 2 == 1 {
            (rows_per_chunk & !1).max(2)
        } else {
            rows_per_chunk
        };
        if rows_per_chunk * row_bytes > limit && rows_per_chunk > 1 || row_bytes > limit {
            ctx.check_binding(name, row_bytes)?;
        }
        let mut chunks = Vec::new();
        let mut r0 = 0;
        while r0 < rows {
            let n = rows_per_chunk.min(rows - r0);
            let part = &bytes[(r0 * row_bytes) as usize..((r0 + n) * row_bytes) as usize];
            let packed = repack(name, ty, n, cols, part)?;
            chunks.push(WeightChunk {
                q: ctx.storage_buffer_init(name, bytemuck::cast_slice(&packed.q))?,
                s: ctx.storage_buffer_init(name, bytemuck::cast_slice(&packed.s))?,
                row_start: r0 as u32,
                rows: n as u32,
            });
            r0 += n;
        }
        Ok(Self {
            name: name.to_string(),
            ty,
            rows,
            cols,
            chunks,
        })
    }

    /// Bytes this weight occupies on the GPU.
    pub fn gpu_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.q.size() + c.s.size()).sum()
    }
}
