//! Hugging Face checkpoints (`config.json` + `*.safetensors` shards in F32, F16 or BF16)
//! turned in memory into the GGUF that `Model::load` reads, optionally quantizing the weight
//! matrices to one of the engine's formats on the way. Tensor names, metadata keys and layouts
//! follow llama.cpp's `convert_hf_to_gguf.py`, so both routes load the same tensors.
//!
//! Only architectures whose GGUF keeps the checkpoint's layout are accepted: `qwen3`.
//! (llama-arch GGUFs permute the Q/K rows, which a llama checkpoint would need first.)
//! The GGUF is built in memory: loading briefly holds the converted weights twice.

use lilypad_gguf::{GgmlType, GgufWriter, Value, dequantize, quantize};
use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;

use crate::error::{EngineError, Result};

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
    #[serde(default)]
    tie_word_embeddings: bool,
}

#[derive(Deserialize)]
struct RopeParameters {
    rope_theta: Option<f32>,
    #[serde(alias = "type")]
    rope_type: Option<String>,
}

fn bad(detail: impl std::fmt::Display) -> EngineError {
    EngineError::Checkpoint(detail.to_string())
}

/// The GGUF name of a checkpoint tensor of a Llama-family decoder.
fn gguf_name(hf: &str) -> Option<String> {
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
    let gguf = match rest.strip_suffix(".weight")? {
        "input_layernorm" => "attn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
        "post_attention_layernorm" => "ffn_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        _ => return None,
    };
    Some(format!("blk.{layer}.{gguf}.weight"))
}

/// Builds a GGUF from `config.json` and the checkpoint's safetensors shards. With
/// `quantize_to`, 2-D weights whose rows hold whole blocks of that type are quantized to it
/// (the rest, and all norms, keep their checkpoint type).
pub fn to_gguf(
    config_json: &[u8],
    shards: &[&[u8]],
    quantize_to: Option<GgmlType>,
) -> Result<Vec<u8>> {
    let cfg: HfConfig =
        serde_json::from_slice(config_json).map_err(|e| bad(format!("config.json: {e}")))?;
    if cfg.model_type != "qwen3" {
        return Err(EngineError::UnsupportedArchitecture(format!(
            "{} (from a Hugging Face checkpoint)",
            cfg.model_type
        )));
    }
    if let Some(q) = quantize_to
        && !(crate::weights::supported(q) && lilypad_gguf::can_convert(q))
    {
        return Err(EngineError::UnsupportedType {
            tensor: "(quantization target)".into(),
            ty: q.name(),
            context: "conversion on load",
        });
    }
    let rope = cfg.rope_parameters.as_ref().or(cfg.rope_scaling.as_ref());
    if let Some(kind) = rope.and_then(|r| r.rope_type.as_deref())
        && kind != "default"
    {
        return Err(bad(format!("RoPE type {kind:?} is not supported")));
    }
    let rope_theta = cfg
        .rope_parameters
        .as_ref()
        .and_then(|r| r.rope_theta)
        .or(cfg.rope_theta)
        .unwrap_or(10_000.0);
    if cfg.num_attention_heads == 0 {
        return Err(bad("num_attention_heads is 0"));
    }
    let head_dim = cfg
        .head_dim
        .unwrap_or(cfg.hidden_size / cfg.num_attention_heads);

    let arch = cfg.model_type.as_str();
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", Value::String(arch.into()));
    let n_kv = cfg.num_key_value_heads.unwrap_or(cfg.num_attention_heads);
    for (key, v) in [
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
    ] {
        w.metadata(&format!("{arch}.{key}"), Value::U32(v));
    }
    for (key, v) in [
        ("attention.layer_norm_rms_epsilon", cfg.rms_norm_eps),
        ("rope.freq_base", rope_theta),
    ] {
        w.metadata(&format!("{arch}.{key}"), Value::F32(v));
    }

    for shard in shards {
        let st = SafeTensors::deserialize(shard).map_err(|e| bad(format!("safetensors: {e}")))?;
        for (name, view) in st.iter() {
            let gguf = gguf_name(name).ok_or_else(|| bad(format!("unexpected tensor {name}")))?;
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
            let dims: Vec<u64> = view.shape().iter().rev().map(|&d| d as u64).collect();
            let (ty, bytes) = match quantize_to {
                Some(q) if dims.len() == 2 && dims[0].is_multiple_of(q.block_size()) && q != ty => {
                    let mut x = vec![0f32; view.data().len() / ty.type_size() as usize];
                    dequantize(ty, view.data(), &mut x)?;
                    (q, quantize(q, &x)?)
                }
                _ => (ty, view.data().to_vec()),
            };
            w.tensor(&gguf, &dims, ty, bytes)?;
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
            assert_eq!(gguf_name(hf).as_deref(), Some(gguf), "{hf}");
        }
        for hf in [
            "model.layers.x.mlp.up_proj.weight",
            "model.layers.1.mlp.up_proj.bias",
            "model.layers.1.self_attn.rotary_emb.inv_freq",
            "visual.blocks.0.weight",
        ] {
            assert_eq!(gguf_name(hf), None, "{hf}");
        }
    }
}
