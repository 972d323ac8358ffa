//! Hugging Face checkpoints (`config.json` + `*.safetensors` shards in F32, F16 or BF16)
//! turned in memory into the GGUF that `Model::load` reads, optionally quantizing the weight
//! matrices to one of the engine's formats on the way. Tensor names, metadata keys and layouts
//! follow llama.cpp's `convert_hf_to_gguf.py`, so both routes load the same tensors.
//!
//! Architectures: `llama`, whose GGUF permutes the rows of q_proj and k_proj within each
//! head (the converter's `permute`, so that RoPE rotates adjacent pairs); `qwen3`, whose GGUF
//! keeps the checkpoint's layout; and Qwen3.5 text models (`qwen3_5_text`, or the text part
//! of a `qwen3_5` checkpoint), whose GGUF differs in three ways the conversion reproduces
//! (tests/fixtures/qwen/README.md, "Layout rules"): zero-centred norm weights are stored as
//! 1 + w, `A_log` as −exp(A_log), and DeltaNet value heads move from grouped to tiled order.
//! A Qwen3.5 checkpoint's vision tower and multi-token-prediction weights are not converted.
//! The GGUF is built in memory: loading briefly holds the converted weights twice.
//!
//! The same layout rules apply to LoRA adapters trained on the checkpoint ([`crate::peft`]):
//! [`Layout`] moves a linear's output rows and input columns as the conversion moves its
//! weight's.

use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;

use crate::{GgmlType, GgufError, GgufWriter, Result, Value, dequantize, quantize};

/// The `config.json` fields the conversion reads.
#[derive(Deserialize)]
struct HfConfig {
    model_type: String,
    hidden_size: u32,
    intermediate_size: u32,
    num_hidden_layers: u32,
    num_attention_heads: u32,
    num_key_value_heads: Option<u32>,
    head_dim: Option<u32>,
    rms_norm_eps: f32,
    max_position_embeddings: Option<u32>,
    /// transformers < 5 keeps θ and scaling at the top level, ≥ 5 in `rope_parameters`.
    rope_theta: Option<f32>,
    rope_scaling: Option<RopeParameters>,
    rope_parameters: Option<RopeParameters>,
    partial_rotary_factor: Option<f32>,
    #[serde(default)]
    tie_word_embeddings: bool,
    // Qwen3.5's hybrid layers.
    layer_types: Option<Vec<String>>,
    full_attention_interval: Option<u32>,
    linear_conv_kernel_dim: Option<u32>,
    linear_key_head_dim: Option<u32>,
    linear_value_head_dim: Option<u32>,
    linear_num_key_heads: Option<u32>,
    linear_num_value_heads: Option<u32>,
}

#[derive(Deserialize)]
struct RopeParameters {
    rope_theta: Option<f32>,
    #[serde(alias = "type")]
    rope_type: Option<String>,
    partial_rotary_factor: Option<f32>,
    mrope_section: Option<Vec<u32>>,
}

fn bad(detail: impl std::fmt::Display) -> GgufError {
    GgufError::Checkpoint(detail.to_string())
}

/// Qwen3.5's DeltaNet head layout.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct LinearHeads {
    pub n_k: usize,
    pub n_v: usize,
    pub d_k: usize,
    pub d_v: usize,
    pub kernel: u32,
}

impl LinearHeads {
    fn from_config(cfg: &HfConfig) -> Result<Self> {
        let get = |v: Option<u32>, name: &str| {
            v.filter(|&v| v > 0)
                .map(|v| v as usize)
                .ok_or_else(|| bad(format!("config.json: {name} is missing or 0")))
        };
        let h = Self {
            n_k: get(cfg.linear_num_key_heads, "linear_num_key_heads")?,
            n_v: get(cfg.linear_num_value_heads, "linear_num_value_heads")?,
            d_k: get(cfg.linear_key_head_dim, "linear_key_head_dim")?,
            d_v: get(cfg.linear_value_head_dim, "linear_value_head_dim")?,
            kernel: get(cfg.linear_conv_kernel_dim, "linear_conv_kernel_dim")? as u32,
        };
        if !h.n_v.is_multiple_of(h.n_k) {
            return Err(bad(format!(
                "{} value heads are not a multiple of {} key heads",
                h.n_v, h.n_k
            )));
        }
        Ok(h)
    }

    /// Moves value heads from grouped order (key head k owns heads k·r … k·r + r − 1) to
    /// tiled order (slot j·n_k + k holds head k·r + j) in `data`, n_v units of equal size.
    pub(crate) fn tile(&self, data: &[u8]) -> Result<Vec<u8>> {
        if !data.len().is_multiple_of(self.n_v) {
            return Err(bad("a DeltaNet tensor does not split into value heads"));
        }
        let unit = data.len() / self.n_v;
        let r = self.n_v / self.n_k;
        let mut out = Vec::with_capacity(data.len());
        for j in 0..r {
            for k in 0..self.n_k {
                let head = k * r + j;
                out.extend_from_slice(&data[head * unit..][..unit]);
            }
        }
        Ok(out)
    }
}

/// Which conversion rules apply.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Arch {
    /// Query and KV head counts, for the Q/K row permutation.
    Llama {
        n_head: usize,
        n_kv: usize,
    },
    Qwen3,
    Qwen35(LinearHeads),
}

impl Arch {
    fn gguf(&self) -> &'static str {
        match self {
            Arch::Llama { .. } => "llama",
            Arch::Qwen3 => "qwen3",
            Arch::Qwen35(_) => "qwen35",
        }
    }
}

/// Moves the rows of a llama q_proj or k_proj (`heads` heads of row-major rows of
/// `row_bytes` bytes) as llama.cpp's converter does: within each head, the row of pair
/// element `half` ∈ {0, 1} at offset i moves from `half · d/2 + i` to `2i + half`, so RoPE
/// rotates adjacent rows.
pub(crate) fn llama_permute_rows(data: &[u8], heads: usize, row_bytes: usize) -> Result<Vec<u8>> {
    let rows = data.len() / row_bytes.max(1);
    if heads == 0
        || row_bytes == 0
        || !data.len().is_multiple_of(row_bytes)
        || !rows.is_multiple_of(2 * heads)
    {
        return Err(bad(format!(
            "{rows} rows of a query/key projection do not split into {heads} heads of pairs"
        )));
    }
    let d = rows / heads;
    let mut out = Vec::with_capacity(data.len());
    for h in 0..heads {
        for i in 0..d / 2 {
            for half in 0..2 {
                let src = h * d + half * (d / 2) + i;
                out.extend_from_slice(&data[src * row_bytes..][..row_bytes]);
            }
        }
    }
    Ok(out)
}

/// The GGUF name of a checkpoint tensor (names as in a text-only checkpoint), or None when
/// it is not part of the model.
pub(crate) fn gguf_name(hf: &str, qwen35: bool) -> Option<String> {
    let fixed = match hf {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        "lm_head.weight" => Some("output.weight"),
        _ => None,
    };
    if let Some(n) = fixed {
        return Some(n.to_string());
    }
    let (layer, rest) = hf.strip_prefix("model.layers.")?.split_once('.')?;
    let layer: u32 = layer.parse().ok()?;
    let gguf = match rest {
        "input_layernorm.weight" => "attn_norm.weight",
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "self_attn.q_norm.weight" => "attn_q_norm.weight",
        "self_attn.k_norm.weight" => "attn_k_norm.weight",
        "post_attention_layernorm.weight" if qwen35 => "post_attention_norm.weight",
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        "mlp.down_proj.weight" => "ffn_down.weight",
        "linear_attn.in_proj_qkv.weight" if qwen35 => "attn_qkv.weight",
        "linear_attn.in_proj_z.weight" if qwen35 => "attn_gate.weight",
        "linear_attn.in_proj_a.weight" if qwen35 => "ssm_alpha.weight",
        "linear_attn.in_proj_b.weight" if qwen35 => "ssm_beta.weight",
        "linear_attn.conv1d.weight" if qwen35 => "ssm_conv1d.weight",
        "linear_attn.dt_bias" if qwen35 => "ssm_dt.bias",
        "linear_attn.A_log" if qwen35 => "ssm_a",
        "linear_attn.norm.weight" if qwen35 => "ssm_norm.weight",
        "linear_attn.out_proj.weight" if qwen35 => "ssm_out.weight",
        _ => return None,
    };
    Some(format!("blk.{layer}.{gguf}"))
}

/// The Hugging Face module a decoder layer's GGUF linear came from (`blk.3.attn_q.weight` →
/// `model.layers.3.self_attn.q_proj`): [`gguf_name`] read backwards, for linears only.
pub(crate) fn hf_linear_module(gguf: &str, qwen35: bool) -> Option<String> {
    const LINEARS: [&str; 12] = [
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.down_proj",
        "linear_attn.in_proj_qkv",
        "linear_attn.in_proj_z",
        "linear_attn.in_proj_a",
        "linear_attn.in_proj_b",
        "linear_attn.out_proj",
    ];
    let layer: u32 = gguf.strip_prefix("blk.")?.split_once('.')?.0.parse().ok()?;
    LINEARS.iter().find_map(|module| {
        let hf = format!("model.layers.{layer}.{module}");
        (gguf_name(&format!("{hf}.weight"), qwen35).as_deref() == Some(gguf)).then_some(hf)
    })
}

/// A tensor on its way into the GGUF.
struct Tensor {
    /// ggml order (ne[0] contiguous).
    dims: Vec<u64>,
    ty: GgmlType,
    data: Vec<u8>,
}

impl Tensor {
    fn to_f32(&self) -> Result<Vec<f32>> {
        let mut x = vec![0f32; self.data.len() / self.ty.type_size() as usize];
        dequantize(self.ty, &self.data, &mut x)?;
        Ok(x)
    }

    fn map_f32(&self, f: impl Fn(f32) -> f32) -> Result<Self> {
        let x: Vec<f32> = self.to_f32()?.into_iter().map(f).collect();
        Ok(Self {
            dims: self.dims.clone(),
            ty: GgmlType::F32,
            data: bytemuck::cast_slice(&x).to_vec(),
        })
    }

    fn row_bytes(&self) -> usize {
        self.dims[0] as usize * self.ty.type_size() as usize
    }
}

/// Qwen3.5's layout rules for one tensor (`gguf` is its GGUF name).
fn qwen35_layout(gguf: &str, t: Tensor, h: &LinearHeads) -> Result<Tensor> {
    // Zero-centred RMSNorm weights multiply as 1 + w; the gated DeltaNet norm is stored as is.
    if gguf.ends_with("norm.weight") && !gguf.ends_with("ssm_norm.weight") {
        return t.map_f32(|w| 1.0 + w);
    }
    let qk_rows = 2 * h.n_k * h.d_k;
    let mut t = t;
    if gguf.ends_with("ssm_conv1d.weight") {
        // [channels, 1, kernel] → ne [kernel, channels].
        if t.dims.len() == 3 && t.dims[1] == 1 {
            t.dims.remove(1);
        }
        if t.dims.len() != 2 || t.dims[0] != h.kernel as u64 {
            return Err(bad(format!("{gguf}: shape {:?}", t.dims)));
        }
    }
    let tiled = if gguf.ends_with("attn_qkv.weight") || gguf.ends_with("ssm_conv1d.weight") {
        // Only the v channels move: rows after the q and k heads.
        let split = (qk_rows * t.row_bytes()).min(t.data.len());
        let mut data = t.data[..split].to_vec();
        data.extend(h.tile(&t.data[split..])?);
        data
    } else if [
        "attn_gate.weight",
        "ssm_alpha.weight",
        "ssm_beta.weight",
        "ssm_dt.bias",
        "ssm_a",
    ]
    .iter()
    .any(|n| gguf.ends_with(n))
    {
        h.tile(&t.data)?
    } else if gguf.ends_with("ssm_out.weight") {
        // The input columns move: every row holds the n_v value heads.
        let mut data = Vec::with_capacity(t.data.len());
        for row in t.data.chunks_exact(t.row_bytes()) {
            data.extend(h.tile(row)?);
        }
        data
    } else {
        return Ok(t);
    };
    t.data = tiled;
    if gguf.ends_with("ssm_a") {
        return t.map_f32(|a| -a.exp());
    }
    Ok(t)
}

/// The GGUF name after dropping a multimodal checkpoint's `model.language_model.` prefix, or
/// None for tensors of other parts (vision tower, multi-token prediction).
pub(crate) fn text_model_name(name: &str) -> Option<std::borrow::Cow<'_, str>> {
    if let Some(rest) = name.strip_prefix("model.language_model.") {
        return Some(format!("model.{rest}").into());
    }
    let skipped = ["model.visual.", "visual.", "mtp.", "model.mtp."];
    (!skipped.iter().any(|p| name.starts_with(p))).then_some(name.into())
}

/// Reads `config.json` (a multimodal Qwen3.5 checkpoint's `text_config` stands for it).
fn parse_config(config_json: &[u8]) -> Result<HfConfig> {
    let mut json: serde_json::Value =
        serde_json::from_slice(config_json).map_err(|e| bad(format!("config.json: {e}")))?;
    if json["model_type"] == "qwen3_5"
        && let Some(text) = json.get_mut("text_config")
    {
        let mut text = text.take();
        if text.get("tie_word_embeddings").is_none() {
            text["tie_word_embeddings"] = json["tie_word_embeddings"].clone();
        }
        json = text;
    }
    serde_json::from_value(json).map_err(|e| bad(format!("config.json: {e}")))
}

impl HfConfig {
    fn arch(&self) -> Result<Arch> {
        Ok(match self.model_type.as_str() {
            "llama" => Arch::Llama {
                n_head: self.num_attention_heads as usize,
                n_kv: self.num_key_value_heads.unwrap_or(self.num_attention_heads) as usize,
            },
            "qwen3" => Arch::Qwen3,
            "qwen3_5_text" | "qwen3_5" => Arch::Qwen35(LinearHeads::from_config(self)?),
            other => {
                return Err(bad(format!(
                    "model type {other:?} is not supported (llama, qwen3, qwen3_5_text, qwen3_5)"
                )));
            }
        })
    }
}

/// Where a linear's output rows and input columns go when its weight is converted: what a
/// LoRA adapter's B (rows) and A (columns) need so that they add onto the converted weight.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    arch: Arch,
}

impl Layout {
    pub(crate) fn new(arch: Arch) -> Self {
        Self { arch }
    }

    /// Heads whose rows llama's converter permutes in the weight named `gguf`, if any.
    fn llama_heads(&self, gguf: &str) -> Option<usize> {
        let Arch::Llama { n_head, n_kv } = self.arch else {
            return None;
        };
        if gguf.ends_with(".attn_q.weight") {
            Some(n_head)
        } else if gguf.ends_with(".attn_k.weight") {
            Some(n_kv)
        } else {
            None
        }
    }

    /// `data`, row-major rows of `row_bytes` bytes, one per output of the linear `gguf`,
    /// reordered as the conversion reorders that weight's rows.
    pub(crate) fn output_rows(&self, gguf: &str, data: &[u8], row_bytes: usize) -> Result<Vec<u8>> {
        if let Some(heads) = self.llama_heads(gguf) {
            return llama_permute_rows(data, heads, row_bytes);
        }
        let Arch::Qwen35(h) = &self.arch else {
            return Ok(data.to_vec());
        };
        if gguf.ends_with("attn_qkv.weight") {
            let split = (2 * h.n_k * h.d_k * row_bytes).min(data.len());
            let mut out = data[..split].to_vec();
            out.extend(h.tile(&data[split..])?);
            Ok(out)
        } else if ["attn_gate.weight", "ssm_alpha.weight", "ssm_beta.weight"]
            .iter()
            .any(|n| gguf.ends_with(n))
        {
            h.tile(data)
        } else {
            Ok(data.to_vec())
        }
    }

    /// `data`, row-major rows of `row_bytes` bytes each holding one value per input of the
    /// linear `gguf`, with each row's values reordered as the conversion reorders that
    /// weight's columns.
    pub(crate) fn input_columns(
        &self,
        gguf: &str,
        data: &[u8],
        row_bytes: usize,
    ) -> Result<Vec<u8>> {
        match &self.arch {
            Arch::Qwen35(h) if gguf.ends_with("ssm_out.weight") => {
                let mut out = Vec::with_capacity(data.len());
                for row in data.chunks_exact(row_bytes.max(1)) {
                    out.extend(h.tile(row)?);
                }
                Ok(out)
            }
            _ => Ok(data.to_vec()),
        }
    }
}

/// Builds a GGUF from `config.json` and the checkpoint's safetensors shards. With
/// `quantize_to`, 2-D weights whose rows hold whole blocks of that type are quantized to it
/// (the rest, and all norms, keep their checkpoint type).
pub fn to_gguf(
    config_json: &[u8],
    shards: &[&[u8]],
    quantize_to: Option<GgmlType>,
) -> Result<Vec<u8>> {
    let cfg = parse_config(config_json)?;
    let arch = cfg.arch()?;
    if let Some(q) = quantize_to
        && !crate::can_convert(q)
    {
        return Err(GgufError::UnsupportedType {
            ty: q,
            op: "conversion of a checkpoint",
        });
    }
    let rope = cfg.rope_parameters.as_ref().or(cfg.rope_scaling.as_ref());
    if let Some(kind) = rope.and_then(|r| r.rope_type.as_deref())
        && kind != "default"
    {
        return Err(bad(format!("RoPE type {kind:?} is not supported")));
    }
    let rope_theta = rope
        .and_then(|r| r.rope_theta)
        .or(cfg.rope_theta)
        .unwrap_or(10_000.0);
    if cfg.num_attention_heads == 0 {
        return Err(bad("num_attention_heads is 0"));
    }
    let head_dim = cfg
        .head_dim
        .unwrap_or(cfg.hidden_size / cfg.num_attention_heads);

    let prefix = arch.gguf();
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", Value::String(prefix.into()));
    let n_kv = cfg.num_key_value_heads.unwrap_or(cfg.num_attention_heads);
    let mut u32s = vec![
        ("block_count", cfg.num_hidden_layers),
        (
            "context_length",
            cfg.max_position_embeddings.unwrap_or(2048),
        ),
        ("embedding_length", cfg.hidden_size),
        ("feed_forward_length", cfg.intermediate_size),
        ("attention.head_count", cfg.num_attention_heads),
        ("attention.head_count_kv", n_kv),
        ("attention.key_length", head_dim),
        ("attention.value_length", head_dim),
    ];
    if let Arch::Qwen35(h) = &arch {
        let factor = rope
            .and_then(|r| r.partial_rotary_factor)
            .or(cfg.partial_rotary_factor)
            .unwrap_or(0.25);
        let interval = cfg.full_attention_interval.unwrap_or(4).max(1);
        u32s.extend([
            ("rope.dimension_count", (head_dim as f32 * factor) as u32),
            ("full_attention_interval", interval),
            ("ssm.conv_kernel", h.kernel),
            ("ssm.state_size", h.d_k as u32),
            ("ssm.group_count", h.n_k as u32),
            ("ssm.time_step_rank", h.n_v as u32),
            ("ssm.inner_size", (h.n_v * h.d_v) as u32),
        ]);
        let recurrent: Vec<Value> = match &cfg.layer_types {
            Some(types) => types
                .iter()
                .map(|t| Value::Bool(t == "linear_attention"))
                .collect(),
            None => (0..cfg.num_hidden_layers)
                .map(|i| Value::Bool((i + 1) % interval != 0))
                .collect(),
        };
        w.metadata(
            &format!("{prefix}.attention.recurrent_layers"),
            Value::Array(recurrent),
        );
        let mut sections = rope
            .and_then(|r| r.mrope_section.clone())
            .unwrap_or_else(|| vec![11, 11, 10]);
        sections.resize(4, 0);
        w.metadata(
            &format!("{prefix}.rope.dimension_sections"),
            Value::Array(sections.into_iter().map(|s| Value::I32(s as i32)).collect()),
        );
    }
    for (key, v) in u32s {
        w.metadata(&format!("{prefix}.{key}"), Value::U32(v));
    }
    for (key, v) in [
        ("attention.layer_norm_rms_epsilon", cfg.rms_norm_eps),
        ("rope.freq_base", rope_theta),
    ] {
        w.metadata(&format!("{prefix}.{key}"), Value::F32(v));
    }

    for shard in shards {
        let st = SafeTensors::deserialize(shard).map_err(|e| bad(format!("safetensors: {e}")))?;
        for (name, view) in st.iter() {
            let Some(text_name) = text_model_name(name) else {
                continue;
            };
            let gguf = gguf_name(&text_name, matches!(arch, Arch::Qwen35(_)))
                .ok_or_else(|| bad(format!("unexpected tensor {name}")))?;
            // A tied head is the embedding; llama.cpp's converter drops the copy too.
            if gguf == "output.weight" && cfg.tie_word_embeddings {
                continue;
            }
            let ty = match view.dtype() {
                Dtype::F32 => GgmlType::F32,
                Dtype::F16 => GgmlType::F16,
                Dtype::BF16 => GgmlType::BF16,
                d => return Err(bad(format!("{name}: dtype {d:?} (F32, F16 or BF16 only)"))),
            };
            // PyTorch's [out, in] is ggml's ne [in, out]: the same bytes.
            let mut t = Tensor {
                dims: view.shape().iter().rev().map(|&d| d as u64).collect(),
                ty,
                data: view.data().to_vec(),
            };
            match &arch {
                Arch::Qwen35(h) => t = qwen35_layout(&gguf, t, h)?,
                Arch::Llama { .. } => {
                    if let Some(heads) = Layout::new(arch).llama_heads(&gguf) {
                        t.data = llama_permute_rows(&t.data, heads, t.row_bytes())?;
                    }
                }
                Arch::Qwen3 => {}
            }
            let (ty, bytes) = match quantize_to {
                Some(q)
                    if t.dims.len() == 2
                        && t.dims[0].is_multiple_of(q.block_size())
                        && q != t.ty =>
                {
                    (q, quantize(q, &t.to_f32()?)?)
                }
                _ => (t.ty, t.data),
            };
            w.tensor(&gguf, &t.dims, ty, bytes)?;
        }
    }
    Ok(w.to_bytes())
}

#[cfg(test)]
mod tests {
    use super::gguf_name;

    #[test]
    fn checkpoint_names_map_to_gguf() {
        for (hf, gguf) in [
            ("model.embed_tokens.weight", "token_embd.weight"),
            ("lm_head.weight", "output.weight"),
            (
                "model.layers.0.self_attn.q_norm.weight",
                "blk.0.attn_q_norm.weight",
            ),
            (
                "model.layers.17.mlp.down_proj.weight",
                "blk.17.ffn_down.weight",
            ),
            (
                "model.layers.3.post_attention_layernorm.weight",
                "blk.3.ffn_norm.weight",
            ),
        ] {
            assert_eq!(gguf_name(hf, false).as_deref(), Some(gguf), "{hf}");
        }
        for hf in [
            "model.layers.x.mlp.up_proj.weight",
            "model.layers.1.mlp.up_proj.bias",
            "model.layers.1.self_attn.rotary_emb.inv_freq",
            "visual.blocks.0.weight",
        ] {
            assert_eq!(gguf_name(hf, false), None, "{hf}");
        }
    }
}
