//! LoRA adapters in PEFT's format (`adapter_config.json` + `adapter_model.safetensors`), as
//! Hugging Face trainers save them, mapped onto a GGUF base model: every `lora_A`/`lora_B`
//! pair of a decoder layer's linear projection becomes a [`LoraTensor`] named after the GGUF
//! weight it adds to, with its rows and columns moved as the checkpoint conversion moves that
//! weight's (llama's Q/K permutation, Qwen3.5's tiled value heads: [`crate::hf`]), so that
//! y = W·x + scale · B·(A·x) holds in the GGUF's own layout.
//!
//! Supported: plain LoRA on any of attention q/k/v/o, the SwiGLU MLP and Qwen3.5's DeltaNet
//! projections (qkv, z, alpha/a, beta/b, out), with `lora_alpha / r` or rsLoRA's
//! `lora_alpha / √r` scaling. Anything that would change the result in ways the engine does
//! not implement (DoRA, trained biases, per-module rank or alpha patterns, fully trained
//! modules, fan-in/fan-out storage) is refused with a [`GgufError::Adapter`] naming it.

use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;

use crate::hf::{Arch, Layout, LinearHeads, gguf_name, hf_linear_module, text_model_name};
use crate::{GgmlType, GgufError, GgufFile, GgufWriter, Result, dequantize};

fn bad(detail: impl std::fmt::Display) -> GgufError {
    GgufError::Adapter(detail.to_string())
}

/// The `adapter_config.json` fields that decide the arithmetic.
#[derive(Deserialize)]
struct PeftConfig {
    #[serde(default)]
    peft_type: Option<String>,
    r: usize,
    lora_alpha: f32,
    #[serde(default)]
    use_rslora: bool,
    #[serde(default)]
    use_dora: bool,
    #[serde(default)]
    fan_in_fan_out: bool,
    #[serde(default)]
    bias: Option<String>,
    #[serde(default)]
    modules_to_save: Option<Vec<String>>,
    #[serde(default)]
    rank_pattern: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    alpha_pattern: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    base_model_name_or_path: Option<String>,
}

/// One adapted linear: y += scale · B·(A·x).
#[derive(Clone, Debug, PartialEq)]
pub struct LoraTensor {
    /// The GGUF weight it adds to (`blk.3.attn_q.weight`).
    pub target: String,
    pub rank: usize,
    /// Inputs and outputs of the linear (the weight's columns and rows).
    pub n_in: usize,
    pub n_out: usize,
    /// A, row-major [rank, n_in], columns in the GGUF's input order.
    pub a: Vec<f32>,
    /// B, row-major [n_out, rank], rows in the GGUF's output order; not scaled.
    pub b: Vec<f32>,
}

/// A LoRA adapter ready for a GGUF base model.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraAdapter {
    pub rank: usize,
    pub alpha: f32,
    /// What B·A is multiplied by: alpha / rank, or alpha / √rank with rsLoRA.
    pub scale: f32,
    /// `base_model_name_or_path` as the trainer recorded it.
    pub base_model: Option<String>,
    /// Sorted by target name.
    pub tensors: Vec<LoraTensor>,
}

/// How [`LoraAdapter::merge_as`] stores the weights it changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergedType {
    F32,
    /// The base weight's own type.
    Base,
    Type(GgmlType),
}

/// A merged model and how much of the adapter's change its stored weights hold.
#[derive(Clone, Debug)]
pub struct Merged {
    /// The GGUF file.
    pub bytes: Vec<u8>,
    /// Of the change Δ = scale · B·A the adapter makes to its weights, the share the stored
    /// weights keep along Δ: ⟨stored − base, Δ⟩ / ⟨Δ, Δ⟩ over all adapted weights (base
    /// as stored in the base model). 1 for F32; re-quantization rounds small changes away.
    pub kept: f64,
    /// ‖stored − base − Δ‖ / ‖Δ‖ over all adapted weights: 0 for F32.
    pub error: f64,
}

/// The two files of a PEFT adapter folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeftFiles {
    /// `adapter_config.json`.
    pub config: Vec<u8>,
    /// `adapter_model.safetensors`.
    pub safetensors: Vec<u8>,
}

/// `0, 1, …, n-1` as little-endian f32 (exact below 2^24), one per row.
fn indices(n: usize) -> Vec<u8> {
    (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect()
}

/// The f32 indices of [`indices`] after a reordering: entry j says where value j came from.
fn index_map(bytes: &[u8]) -> Vec<usize> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .collect()
}

/// The conversion rules of a GGUF base model's architecture.
fn layout_of(base: &GgufFile) -> Result<(Layout, bool)> {
    let md = &base.metadata;
    let arch = md.architecture()?;
    let key = |k: &str| format!("{arch}.{k}");
    let layout = match arch {
        // llama.cpp's converter permutes Q/K rows for these (its LlamaModel).
        "llama" | "mistral" | "smollm" => {
            let n_head = md.u32(&key("attention.head_count"))? as usize;
            Arch::Llama {
                n_head,
                n_kv: md
                    .u32(&key("attention.head_count_kv"))
                    .map_or(n_head, |v| v as usize),
            }
        }
        "qwen3" => Arch::Qwen3,
        "qwen35" => {
            let n_v = md.u32(&key("ssm.time_step_rank"))? as usize;
            Arch::Qwen35(LinearHeads {
                n_k: md.u32(&key("ssm.group_count"))? as usize,
                n_v,
                d_k: md.u32(&key("ssm.state_size"))? as usize,
                d_v: (md.u32(&key("ssm.inner_size"))? as usize)
                    .checked_div(n_v)
                    .unwrap_or(0),
                kernel: md.u32(&key("ssm.conv_kernel"))?,
            })
        }
        other => {
            return Err(bad(format!(
                "base architecture {other:?} has no LoRA mapping"
            )));
        }
    };
    Ok((Layout::new(layout), arch == "qwen35"))
}

/// The module path and the factor (`A` or `B`) of a PEFT tensor key.
fn split_key(key: &str) -> Result<(&str, char)> {
    let key = key.strip_prefix("base_model.model.").unwrap_or(key);
    for (suffix, which) in [
        (".lora_A.weight", 'A'),
        (".lora_B.weight", 'B'),
        (".lora_A.default.weight", 'A'),
        (".lora_B.default.weight", 'B'),
    ] {
        if let Some(module) = key.strip_suffix(suffix) {
            return Ok((module, which));
        }
    }
    Err(bad(format!(
        "tensor {key:?} is not a LoRA factor (lora_A/lora_B weight): DoRA magnitudes, \
         embeddings and trained biases are not supported"
    )))
}

fn f32s(name: &str, view: &safetensors::tensor::TensorView) -> Result<Vec<f32>> {
    let ty = match view.dtype() {
        Dtype::F32 => GgmlType::F32,
        Dtype::F16 => GgmlType::F16,
        Dtype::BF16 => GgmlType::BF16,
        d => return Err(bad(format!("{name}: dtype {d:?} (F32, F16 or BF16 only)"))),
    };
    let mut v = vec![0f32; view.shape().iter().product()];
    dequantize(ty, view.data(), &mut v)?;
    Ok(v)
}

impl LoraAdapter {
    /// Reads a PEFT adapter for `base`, checking every factor's shape against the weight it
    /// adapts.
    pub fn from_peft(config_json: &[u8], safetensors: &[u8], base: &GgufFile) -> Result<Self> {
        let cfg: PeftConfig = serde_json::from_slice(config_json)
            .map_err(|e| bad(format!("adapter_config.json: {e}")))?;
        if let Some(t) = cfg.peft_type.as_deref()
            && t != "LORA"
        {
            return Err(bad(format!(
                "peft_type {t:?}: only LORA adapters are supported"
            )));
        }
        let refuse = |what: &str| Err(bad(format!("{what} is not supported")));
        if cfg.use_dora {
            return refuse("DoRA (use_dora)");
        }
        if cfg.fan_in_fan_out {
            return refuse("fan_in_fan_out (Conv1D-style storage)");
        }
        if cfg.bias.as_deref().is_some_and(|b| b != "none") {
            return refuse("a trained bias (bias other than \"none\")");
        }
        if cfg.modules_to_save.as_ref().is_some_and(|m| !m.is_empty()) {
            return refuse("modules_to_save (fully trained modules)");
        }
        for (name, pattern) in [
            ("rank_pattern", &cfg.rank_pattern),
            ("alpha_pattern", &cfg.alpha_pattern),
        ] {
            if pattern.as_ref().is_some_and(|p| !p.is_empty()) {
                return refuse(name);
            }
        }
        if cfg.r == 0 || !cfg.lora_alpha.is_finite() {
            return Err(bad(format!(
                "r = {}, lora_alpha = {}",
                cfg.r, cfg.lora_alpha
            )));
        }
        let scale = if cfg.use_rslora {
            cfg.lora_alpha / (cfg.r as f32).sqrt()
        } else {
            cfg.lora_alpha / cfg.r as f32
        };

        let (layout, qwen35) = layout_of(base)?;
        let st = SafeTensors::deserialize(safetensors)
            .map_err(|e| bad(format!("adapter_model.safetensors: {e}")))?;
        // module → (A, B), each with its shape.
        type Factor = (Vec<usize>, Vec<f32>);
        let mut pairs: std::collections::BTreeMap<String, (Option<Factor>, Option<Factor>)> =
            Default::default();
        for (key, view) in st.iter() {
            let (module, which) = split_key(key)?;
            let hf_weight = format!("{module}.weight");
            let target = text_model_name(&hf_weight)
                .and_then(|n| gguf_name(&n, qwen35))
                .ok_or_else(|| bad(format!("{key}: no GGUF weight for module {module:?}")))?;
            let Some(info) = base.tensor(&target) else {
                return Err(bad(format!(
                    "{key}: the base model has no {target} (an adapter for another base model?)"
                )));
            };
            let is_linear = info.dims.len() == 2
                && info.rows() > 1
                && !["token_embd.weight", "output.weight"].contains(&target.as_str())
                && !target.ends_with("norm.weight")
                && !target.ends_with("conv1d.weight");
            if !is_linear {
                return Err(bad(format!(
                    "{key}: {target} is not a decoder layer's linear projection in the base \
                     model (LoRA is supported on attention, MLP and DeltaNet projections)"
                )));
            }
            let factor = (view.shape().to_vec(), f32s(key, &view)?);
            let slot = pairs.entry(target).or_default();
            let dup = match which {
                'A' => slot.0.replace(factor).is_some(),
                _ => slot.1.replace(factor).is_some(),
            };
            if dup {
                return Err(bad(format!("{key}: the factor appears twice")));
            }
        }
        if pairs.is_empty() {
            return Err(bad("adapter_model.safetensors holds no LoRA factors"));
        }

        let mut tensors = Vec::with_capacity(pairs.len());
        for (target, pair) in pairs {
            let (Some((a_shape, a)), Some((b_shape, b))) = pair else {
                return Err(bad(format!("{target}: lora_A or lora_B is missing")));
            };
            let t = base.tensor(&target).expect("checked above");
            let (n_out, n_in) = (t.rows() as usize, t.cols() as usize);
            let rank = cfg.r;
            if a_shape != [rank, n_in] || b_shape != [n_out, rank] {
                return Err(bad(format!(
                    "{target}: lora_A {a_shape:?} and lora_B {b_shape:?} do not fit a rank-{rank} \
                     adapter of the base weight [{n_out} outputs, {n_in} inputs] (another base model?)"
                )));
            }
            let bytes = |v: &[f32]| bytemuck::cast_slice::<f32, u8>(v).to_vec();
            let to_f32s = |v: Vec<u8>| -> Vec<f32> {
                v.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect()
            };
            let a = to_f32s(layout.input_columns(&target, &bytes(&a), n_in * 4)?);
            let b = to_f32s(layout.output_rows(&target, &bytes(&b), rank * 4)?);
            if a.iter().chain(&b).any(|v| !v.is_finite()) {
                return Err(bad(format!("{target}: non-finite values")));
            }
            tensors.push(LoraTensor {
                target,
                rank,
                n_in,
                n_out,
                a,
                b,
            });
        }
        Ok(Self {
            rank: cfg.r,
            alpha: cfg.lora_alpha,
            scale,
            base_model: cfg.base_model_name_or_path,
            tensors,
        })
    }

    /// The adapter as PEFT saves it for `base`'s Hugging Face checkpoint: `adapter_config.json`
    /// and `adapter_model.safetensors` (F32, `base_model.model.<module>.lora_A/B.weight`), with
    /// every factor's rows and columns put back where the checkpoint has them, so that
    /// [`LoraAdapter::from_peft`] reads back exactly this adapter and peft loads it onto the
    /// checkpoint.
    pub fn to_peft(&self, base: &GgufFile) -> Result<PeftFiles> {
        let (layout, qwen35) = layout_of(base)?;
        // The scale came from one of the two rules; rsLoRA's is the one it is nearer to.
        let plain = self.alpha / self.rank as f32;
        let rs = self.alpha / (self.rank as f32).sqrt();
        let rslora = (self.scale - rs).abs() < (self.scale - plain).abs();
        let expected = if rslora { rs } else { plain };
        if (self.scale - expected).abs() > 1e-6 * expected.abs() {
            return Err(bad(format!(
                "scale {} is neither lora_alpha / r ({plain}) nor lora_alpha / √r ({rs}): PEFT \
                 cannot express it",
                self.scale
            )));
        }
        let mut factors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
        let mut modules = std::collections::BTreeSet::new();
        for t in &self.tensors {
            let module = hf_linear_module(&t.target, qwen35)
                .ok_or_else(|| bad(format!("{}: no Hugging Face module maps to it", t.target)))?;
            modules.insert(module.rsplit('.').next().unwrap_or(&module).to_string());
            // Where each GGUF row and column came from: the conversion applied to indices.
            let rows_from = index_map(&layout.output_rows(&t.target, &indices(t.n_out), 4)?);
            let cols_from =
                index_map(&layout.input_columns(&t.target, &indices(t.n_in), t.n_in * 4)?);
            let mut a = vec![0f32; t.a.len()];
            for k in 0..t.rank {
                for (j, &i) in cols_from.iter().enumerate() {
                    a[k * t.n_in + i] = t.a[k * t.n_in + j];
                }
            }
            let mut b = vec![0f32; t.b.len()];
            for (j, &i) in rows_from.iter().enumerate() {
                b[i * t.rank..][..t.rank].copy_from_slice(&t.b[j * t.rank..][..t.rank]);
            }
            let key = |which: char| format!("base_model.model.{module}.lora_{which}.weight");
            factors.push((
                key('A'),
                vec![t.rank, t.n_in],
                bytemuck::cast_slice(&a).to_vec(),
            ));
            factors.push((
                key('B'),
                vec![t.n_out, t.rank],
                bytemuck::cast_slice(&b).to_vec(),
            ));
        }
        let views = factors
            .iter()
            .map(|(name, shape, data)| {
                safetensors::tensor::TensorView::new(Dtype::F32, shape.clone(), data)
                    .map(|view| (name.clone(), view))
                    .map_err(|e| bad(format!("{name}: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        let safetensors = safetensors::serialize(views, None)
            .map_err(|e| bad(format!("adapter_model.safetensors: {e}")))?;
        let config = serde_json::json!({
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "base_model_name_or_path": self.base_model,
            "r": self.rank,
            // An integer where it is one, as PEFT's own configs have it.
            "lora_alpha": if self.alpha.fract() == 0.0 && self.alpha.abs() < 1e9 {
                serde_json::json!(self.alpha as i64)
            } else {
                serde_json::json!(self.alpha)
            },
            "use_rslora": rslora,
            "target_modules": modules,
            "lora_dropout": 0.0,
            "bias": "none",
            "fan_in_fan_out": false,
            "use_dora": false,
            "modules_to_save": null,
            "rank_pattern": {},
            "alpha_pattern": {},
            "init_lora_weights": true,
            "inference_mode": true,
        });
        let config = serde_json::to_vec_pretty(&config)
            .map_err(|e| bad(format!("adapter_config.json: {e}")))?;
        Ok(PeftFiles {
            config,
            safetensors,
        })
    }

    /// The base model with the adapter merged: every adapted weight becomes F32
    /// W + scale · B·A (computed in f64), everything else is copied as is.
    pub fn merge(&self, base: &GgufFile, src: &dyn crate::ByteSource) -> Result<Vec<u8>> {
        Ok(self.merge_as(base, src, MergedType::F32)?.bytes)
    }

    /// [`LoraAdapter::merge`], with the adapted weights stored as `to` says: F32, their base
    /// weight's own type (the merged model is then as large as the base) or one given type,
    /// quantized with the reference quantizers; and how much of the change they keep.
    pub fn merge_as(
        &self,
        base: &GgufFile,
        src: &dyn crate::ByteSource,
        to: MergedType,
    ) -> Result<Merged> {
        let mut w = GgufWriter::new();
        // Σ⟨kept, Δ⟩, Σ⟨Δ, Δ⟩ and Σ‖kept − Δ‖² over the adapted weights.
        let (mut along, mut delta_sq, mut error_sq) = (0f64, 0f64, 0f64);
        for (key, value) in base.metadata.iter() {
            w.metadata(key, value.clone());
        }
        for info in &base.tensors {
            let bytes = base.tensor_bytes(src, info)?.to_vec();
            let Some(lora) = self.tensors.iter().find(|t| t.target == info.name) else {
                w.tensor(&info.name, &info.dims, info.ty, bytes)?;
                continue;
            };
            let mut weight = vec![0f32; info.n_elements() as usize];
            dequantize(info.ty, &bytes, &mut weight)?;
            let before = weight.clone();
            let r = lora.rank;
            for (o, row) in weight.chunks_exact_mut(lora.n_in).enumerate() {
                let b = &lora.b[o * r..][..r];
                for (i, w) in row.iter_mut().enumerate() {
                    let ba: f64 = (0..r)
                        .map(|k| b[k] as f64 * lora.a[k * lora.n_in + i] as f64)
                        .sum();
                    *w = (*w as f64 + self.scale as f64 * ba) as f32;
                }
            }
            let ty = match to {
                MergedType::F32 => GgmlType::F32,
                MergedType::Base => info.ty,
                MergedType::Type(ty) => ty,
            };
            if ty != GgmlType::F32 && (info.dims[0] % ty.block_size()) != 0 {
                return Err(bad(format!(
                    "{}: rows of {} values do not divide into {ty:?} blocks of {}",
                    info.name,
                    info.dims[0],
                    ty.block_size()
                )));
            }
            let data = match ty {
                GgmlType::F32 => bytemuck::cast_slice(&weight).to_vec(),
                ty => crate::quantize(ty, &weight)?,
            };
            let mut stored = vec![0f32; weight.len()];
            dequantize(ty, &data, &mut stored)?;
            for ((b, m), s) in before.iter().zip(&weight).zip(&stored) {
                let (delta, kept) = (*m as f64 - *b as f64, *s as f64 - *b as f64);
                along += kept * delta;
                delta_sq += delta * delta;
                error_sq += (kept - delta) * (kept - delta);
            }
            w.tensor(&info.name, &info.dims, ty, data)?;
        }
        // An adapter that changes nothing (B = 0, as initialised) loses nothing either.
        let (kept, error) = if delta_sq > 0.0 {
            (along / delta_sq, (error_sq / delta_sq).sqrt())
        } else {
            (1.0, 0.0)
        };
        Ok(Merged {
            bytes: w.to_bytes(),
            kept,
            error,
        })
    }
}
