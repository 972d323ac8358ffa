//! GRPO updates on the engine: a batch of groups of episodes (each the token sequence the
//! policy saw and wrote, and its reward) becomes one AdamW step of the LoRA adapter, through
//! the engine's own training forward pass, backward kernels and optimizer, so the policy that
//! sampled the episodes is exactly the one being trained. Checkpoints hold everything a run
//! needs to go on exactly where it stopped.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use lilypad_chat::Transcript;
use lilypad_engine::{
    ActivationMode, AdamWConfig, LoraAdamW, LoraGradients, Model, OptimizerState,
};
use lilypad_gguf::GgufFile;
use lilypad_gguf::peft::LoraAdapter;
use serde::{Deserialize, Serialize};

use crate::grpo::{
    AdvantageNorm, ClipRange, RolloutTokens, advantages, clipped_objective, kl_penalty,
};

/// One sampled episode.
#[derive(Clone, Debug, PartialEq)]
pub struct Episode {
    /// Every token of the conversation, and whether the policy wrote it.
    pub transcript: Transcript,
    pub reward: f64,
    /// log p of each token as recorded when it was sampled (`tokens.len()`, aligned with
    /// [`Episode::targets`]); `None` on-policy, where the policy being trained sampled it and
    /// the importance ratio is 1 by construction.
    pub logp_old: Option<Vec<f32>>,
}

impl Episode {
    /// What each position predicts: the next token (the last position predicts nothing).
    pub(crate) fn targets(&self) -> Vec<u32> {
        let t = &self.transcript.tokens;
        t.iter().skip(1).copied().chain([0]).collect()
    }

    /// Whether each position's prediction is trained: the next token is the policy's own.
    pub(crate) fn trained(&self) -> Vec<bool> {
        let g = &self.transcript.generated;
        g.iter().skip(1).copied().chain([false]).collect()
    }
}

/// How a run's learning rate moves: a linear warm-up, then constant or a cosine decay to
/// `min_ratio` of the peak at `total` steps.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    pub lr: f32,
    pub warmup: u32,
    pub total: u32,
    pub cosine: bool,
    pub min_ratio: f32,
}

impl Schedule {
    /// The rate of update `step` (counting from 0).
    pub fn lr(&self, step: u32) -> f32 {
        if step < self.warmup {
            return self.lr * (step + 1) as f32 / self.warmup as f32;
        }
        if !self.cosine || self.total <= self.warmup {
            return self.lr;
        }
        let progress = ((step - self.warmup) as f32 / (self.total - self.warmup) as f32).min(1.0);
        let cosine = 0.5 * (1.0 + (std::f32::consts::PI * progress).cos());
        self.lr * (self.min_ratio + (1.0 - self.min_ratio) * cosine)
    }
}

/// What one update did.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct UpdateStats {
    pub step: u32,
    pub lr: f32,
    pub loss: f64,
    pub episodes: usize,
    pub mean_reward: f64,
    /// Tokens the policy wrote (trained), and those whose clipped term had no gradient.
    pub tokens: usize,
    pub clipped: usize,
    /// Mean −log p of the trained tokens: an entropy estimate of the sampled policy.
    pub neg_logp: f64,
    /// Mean KL divergence per trained token from the adapter-free base model (its k3
    /// estimate), where the objective has a KL term; 0 otherwise.
    pub kl: f64,
    pub grad_norm: f32,
    pub forward_backward_ms: f64,
    pub optimizer_ms: f64,
    /// The gradient held a NaN or an infinity, so the optimizer took no step (the adapter and
    /// its moments are as before); the run goes on.
    pub nonfinite: bool,
}

/// The optimizer, its gradient buffers and the objective's settings.
pub struct Trainer {
    grads: LoraGradients,
    opt: LoraAdamW,
    pub clip: ClipRange,
    pub norm: AdvantageNorm,
    pub mode: ActivationMode,
    /// β of the KL penalty to the adapter-free base model (0: none, the default).
    pub kl: f64,
}

impl Trainer {
    /// A fresh optimizer for the adapter `model` carries.
    pub fn new(model: &mut Model, adamw: AdamWConfig, norm: AdvantageNorm) -> Result<Self> {
        Ok(Self {
            grads: LoraGradients::new(model)?,
            opt: LoraAdamW::new(model, adamw)?,
            clip: ClipRange::default(),
            norm,
            mode: ActivationMode::Keep,
            kl: 0.0,
        })
    }

    /// The optimizer resumed from `state` (which also writes the adapter back into `model`).
    pub fn resume(
        model: &mut Model,
        adamw: AdamWConfig,
        norm: AdvantageNorm,
        state: &OptimizerState,
    ) -> Result<Self> {
        let opt = LoraAdamW::restore(model, adamw, state)?;
        Ok(Self {
            grads: LoraGradients::new(model)?,
            opt,
            clip: ClipRange::default(),
            norm,
            mode: ActivationMode::Keep,
            kl: 0.0,
        })
    }

    pub async fn state(&self, model: &mut Model) -> Result<OptimizerState> {
        Ok(self.opt.state(model).await?)
    }

    /// One GRPO update from `groups` (each a task's episodes): advantages within each group,
    /// the clipped, token-normalised objective over the whole batch, gradients summed episode
    /// by episode on the GPU, then one AdamW step at rate `lr`. Groups without signal (all
    /// rewards equal) contribute nothing; the caller's dynamic sampling should not send them.
    pub async fn update(
        &mut self,
        model: &mut Model,
        groups: &[Vec<Episode>],
        lr: f32,
    ) -> Result<UpdateStats> {
        let started = Instant::now();
        let episodes: Vec<(&Episode, f64)> = groups
            .iter()
            .flat_map(|g| {
                let rewards: Vec<f64> = g.iter().map(|e| e.reward).collect();
                g.iter().zip(advantages(&rewards, self.norm))
            })
            .collect();
        if episodes.is_empty() {
            bail!("an update needs at least one episode");
        }
        // Token-level normalisation over the whole batch (DAPO).
        let total: usize = episodes
            .iter()
            .map(|(e, _)| e.trained().iter().filter(|&&t| t).count())
            .sum();
        let mut stats = UpdateStats {
            step: self.opt.step,
            lr,
            episodes: episodes.len(),
            mean_reward: episodes.iter().map(|(e, _)| e.reward).sum::<f64>()
                / episodes.len() as f64,
            tokens: total,
            ..Default::default()
        };
        let mut neg_logp = 0.0;
        for (episode, advantage) in &episodes {
            let tokens = &episode.transcript.tokens;
            let (targets, trained) = (episode.targets(), episode.trained());
            let n_trained = trained.iter().filter(|&&t| t).count();
            if n_trained == 0 || tokens.is_empty() {
                continue;
            }
            // The reference policy's, first: the pass leaves the base model's state in slot 0,
            // which the training forward pass then replaces.
            let logp_ref = if self.kl > 0.0 {
                model.truncate(0);
                Some(model.base_log_probs(0, tokens, &targets).await?)
            } else {
                None
            };
            // The policy's log-probabilities: from the kept activations, or (checkpointed,
            // where they are not all kept) through the inference path, which gives the same.
            let (fwd, logp) = if self.mode == ActivationMode::Keep {
                let fwd = model.forward_for_training(tokens, self.mode).await?;
                let logp = model.training_log_probs(&fwd, &targets).await?;
                (fwd, logp)
            } else {
                model.truncate(0);
                let logp = model.log_probs(0, tokens, &targets).await?;
                (model.forward_for_training(tokens, self.mode).await?, logp)
            };
            let logp_old = episode.logp_old.as_deref().unwrap_or(&logp);
            if logp_old.len() != logp.len() {
                bail!(
                    "an episode's recorded log-probabilities ({}) do not match its tokens ({})",
                    logp_old.len(),
                    logp.len()
                );
            }
            neg_logp -= logp
                .iter()
                .zip(&trained)
                .filter(|(_, t)| **t)
                .map(|(&lp, _)| lp as f64)
                .sum::<f64>();
            let one = clipped_objective(
                &[RolloutTokens {
                    logp: &logp,
                    logp_old,
                    trained: &trained,
                    advantage: *advantage,
                }],
                self.clip,
            );
            // `one` is normalised by this episode's tokens; the batch's count is `total`.
            let rescale = n_trained as f64 / total as f64;
            stats.loss += one.loss * rescale;
            stats.clipped += one.clipped;
            let mut coef: Vec<f32> = one.coef[0]
                .iter()
                .map(|&c| (c as f64 * rescale) as f32)
                .collect();
            if let Some(logp_ref) = &logp_ref {
                let kl = kl_penalty(&logp, logp_ref, &trained, self.kl, total);
                stats.loss += kl.loss;
                stats.kl += kl.kl_sum / total as f64;
                for (c, k) in coef.iter_mut().zip(&kl.coef) {
                    *c += k;
                }
            }
            if coef.iter().all(|&c| c == 0.0) {
                continue;
            }
            model
                .lora_backward(&fwd, &targets, &coef, &self.grads)
                .await?;
        }
        stats.neg_logp = neg_logp / total.max(1) as f64;
        stats.forward_backward_ms = started.elapsed().as_secs_f64() * 1e3;
        let started = Instant::now();
        match self.opt.step(model, &self.grads, lr).await {
            Ok(step) => stats.grad_norm = step.grad_norm,
            Err(lilypad_engine::EngineError::NonFiniteGradient(norm)) => {
                stats.grad_norm = norm;
                stats.nonfinite = true;
            }
            Err(e) => return Err(e.into()),
        }
        stats.optimizer_ms = started.elapsed().as_secs_f64() * 1e3;
        Ok(stats)
    }
}

/// What a checkpoint records besides the optimizer: where the run stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// Updates taken.
    pub step: u32,
    /// The next task to draw, in the run's task order.
    pub cursor: u64,
    /// Episodes sampled so far (each takes its seed from this count).
    pub episodes: u64,
    /// Each task's hint level, as online calibration left it (agent tasks; empty when
    /// nothing was refined yet, or for reply tasks).
    #[serde(default)]
    pub hint_levels: Vec<u8>,
}

/// `DIR/checkpoint`: the adapter as PEFT files (what `export` and `--lora` read), the
/// optimizer's state (adapter buffers and moments, bit for bit) and the run's state. Written
/// to a fresh folder beside it and swapped in by renames, so a kill at any moment leaves the
/// previous checkpoint or the new one, whole. `adapter`: the model's, as
/// [`Model::lora_adapter`] reads it. `sampling`: earlier adapters an asynchronous run still
/// samples with (`sampling/<updates>/`, PEFT files too, keyed by the updates they had taken).
pub async fn save_checkpoint(
    dir: &Path,
    model: &mut Model,
    adapter: &LoraAdapter,
    base: &GgufFile,
    trainer: &Trainer,
    run: &RunState,
    sampling: &[(u32, &LoraAdapter)],
) -> Result<()> {
    let target = dir.join("checkpoint");
    let old = dir.join("checkpoint.old");
    // A kill between the swap's renames left only `checkpoint.old`: it becomes the checkpoint
    // again before anything else happens. Half-written folders of killed runs go.
    if !target.exists() && old.exists() {
        std::fs::rename(&old, &target)?;
    }
    for entry in std::fs::read_dir(dir)?.flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("checkpoint.new-")
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let fresh = dir.join(format!("checkpoint.new-{}", std::process::id()));
    write_adapter(&fresh.join("adapter"), adapter, base)?;
    let state = trainer.state(model).await?;
    write_synced(&fresh.join("optimizer.bin"), &encode_optimizer(&state))?;
    write_synced(&fresh.join("run.json"), &serde_json::to_vec_pretty(run)?)?;
    for (updates, adapter) in sampling {
        write_adapter(&fresh.join(format!("sampling/{updates}")), adapter, base)?;
    }
    // Swap: the old checkpoint moves aside first, so a kill between the renames leaves
    // `checkpoint.old` (which `load_checkpoint` falls back to) and the new one whole.
    let _ = std::fs::remove_dir_all(&old);
    if target.exists() {
        std::fs::rename(&target, &old)?;
    }
    std::fs::rename(&fresh, &target)?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(())
}

/// `adapter` as PEFT files in a new folder `dir` (what `lilypad_cli::lora::read` reads).
fn write_adapter(dir: &Path, adapter: &LoraAdapter, base: &GgufFile) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let peft = adapter.to_peft(base)?;
    write_synced(&dir.join("adapter_config.json"), &peft.config)?;
    write_synced(&dir.join("adapter_model.safetensors"), &peft.safetensors)
}

/// Writes `data` to `path` and flushes it to the disk, so a renamed checkpoint survives a crash
/// of the machine too.
fn write_synced(path: &Path, data: &[u8]) -> Result<()> {
    let mut f =
        std::fs::File::create(path).with_context(|| format!("writing {}", path.display()))?;
    std::io::Write::write_all(&mut f, data)?;
    f.sync_all()?;
    Ok(())
}

/// The adapter after `updates` updates that `checkpoint` keeps for sampling
/// ([`save_checkpoint`]'s `sampling`).
pub fn sampling_adapter(checkpoint: &Path, updates: u32, base: &GgufFile) -> Result<LoraAdapter> {
    lilypad_cli::lora::read(&checkpoint.join(format!("sampling/{updates}")), base).with_context(
        || {
            format!(
                "{} has no adapter of update {updates} to sample with (was the run's staleness changed?)",
                checkpoint.display()
            )
        },
    )
}

/// The checkpoint in `dir`, if any: the optimizer state and the run's state.
pub fn load_checkpoint(dir: &Path) -> Result<Option<(OptimizerState, RunState, PathBuf)>> {
    for name in ["checkpoint", "checkpoint.old"] {
        let path = dir.join(name);
        let (Ok(optimizer), Ok(run)) = (
            std::fs::read(path.join("optimizer.bin")),
            std::fs::read(path.join("run.json")),
        ) else {
            continue;
        };
        let state = decode_optimizer(&optimizer)
            .with_context(|| format!("reading {}", path.join("optimizer.bin").display()))?;
        let run = serde_json::from_slice(&run)
            .with_context(|| format!("reading {}", path.join("run.json").display()))?;
        return Ok(Some((state, run, path)));
    }
    Ok(None)
}

const OPTIMIZER_MAGIC: &[u8; 8] = b"LPADAMW1";

/// The optimizer's state as bytes: magic, step, then per linear its name and six f32 arrays,
/// every length a little-endian u64.
fn encode_optimizer(state: &OptimizerState) -> Vec<u8> {
    let mut out = OPTIMIZER_MAGIC.to_vec();
    out.extend(state.step.to_le_bytes());
    out.extend((state.tensors.len() as u64).to_le_bytes());
    for (name, arrays) in &state.tensors {
        out.extend((name.len() as u64).to_le_bytes());
        out.extend(name.as_bytes());
        for a in arrays {
            out.extend((a.len() as u64).to_le_bytes());
            out.extend(bytemuck::cast_slice::<f32, u8>(a));
        }
    }
    out
}

fn decode_optimizer(bytes: &[u8]) -> Result<OptimizerState> {
    let mut rest = bytes
        .strip_prefix(OPTIMIZER_MAGIC)
        .context("not an optimizer state (bad magic)")?;
    let mut take = |n: usize| -> Result<&[u8]> {
        if rest.len() < n {
            bail!("the optimizer state is truncated");
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    let step = u32::from_le_bytes(take(4)?.try_into()?);
    let count = u64::from_le_bytes(take(8)?.try_into()?);
    let mut tensors = Vec::new();
    for _ in 0..count {
        let len = u64::from_le_bytes(take(8)?.try_into()?) as usize;
        let name = String::from_utf8(take(len)?.to_vec())?;
        let mut arrays: [Vec<f32>; 6] = Default::default();
        for a in &mut arrays {
            let len = u64::from_le_bytes(take(8)?.try_into()?) as usize;
            let bytes = take(
                len.checked_mul(4)
                    .context("the optimizer state is corrupt")?,
            )?;
            *a = bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
        }
        tensors.push((name, arrays));
    }
    Ok(OptimizerState { step, tensors })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_warms_up_then_decays_to_its_floor() {
        let s = Schedule {
            lr: 1e-4,
            warmup: 4,
            total: 14,
            cosine: true,
            min_ratio: 0.1,
        };
        assert_eq!(s.lr(0), 2.5e-5);
        assert_eq!(s.lr(3), 1e-4);
        assert!((s.lr(4) - 1e-4).abs() < 1e-12);
        assert!((s.lr(9) - 0.55e-4).abs() < 1e-9, "{}", s.lr(9));
        assert!((s.lr(14) - 1e-5).abs() < 1e-12);
        assert!((s.lr(100) - 1e-5).abs() < 1e-12);
        let flat = Schedule { cosine: false, ..s };
        assert_eq!(flat.lr(50), 1e-4);
    }

    #[test]
    fn optimizer_states_round_trip_and_truncation_is_an_error() {
        let state = OptimizerState {
            step: 7,
            tensors: vec![(
                "blk.0.attn_q.weight".into(),
                [
                    vec![1.0, -2.5],
                    vec![3.0],
                    vec![f32::MIN_POSITIVE],
                    vec![],
                    vec![0.25; 3],
                    vec![-0.0],
                ],
            )],
        };
        let bytes = encode_optimizer(&state);
        let back = decode_optimizer(&bytes).unwrap();
        assert_eq!(back, state);
        assert!(back.tensors[0].1[5][0].is_sign_negative());
        for cut in [3, 12, bytes.len() - 1] {
            assert!(decode_optimizer(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn positions_predict_the_next_token_and_train_on_the_policys_own() {
        let e = Episode {
            transcript: Transcript {
                tokens: vec![10, 11, 12, 13],
                generated: vec![false, false, true, true],
            },
            reward: 1.0,
            logp_old: None,
        };
        assert_eq!(e.targets(), [11, 12, 13, 0]);
        assert_eq!(e.trained(), [false, true, true, false]);
    }

    /// With a KL coefficient and no advantage (a group whose rewards are equal), an update
    /// only pulls the policy toward the adapter-free base model: the measured KL falls.
    /// Without one, the same update has no gradient at all.
    #[test]
    fn the_kl_term_pulls_the_policy_toward_the_base_model() {
        let Some(mut session) = crate::testing::tiny_llama_session(64) else {
            return;
        };
        let model = session.model_mut();
        let targets = model.lora_targets();
        let mut adapter = crate::run::initial_adapter(&targets, 4, 8.0, 5);
        // A non-zero B, so the adapted policy starts away from the base.
        for (i, t) in adapter.tensors.iter_mut().enumerate() {
            for (j, b) in t.b.iter_mut().enumerate() {
                *b = (((i * 31 + j * 17) % 13) as f32 / 13.0 - 0.5) * 0.1;
            }
        }
        model.set_lora(Some(&adapter)).unwrap();
        let tokens: Vec<u32> = (0..24).map(|i| (i * 29 + 3) % 500).collect();
        let episode = |reward| Episode {
            transcript: lilypad_chat::Transcript {
                tokens: tokens.clone(),
                generated: (0..24).map(|i| i >= 8).collect(),
            },
            reward,
            logp_old: None,
        };
        let groups = [vec![episode(1.0), episode(1.0)]];
        let trained = groups[0][0].trained();
        let kl = |model: &mut Model| -> f64 {
            let t = groups[0][0].targets();
            model.truncate(0);
            let base = pollster::block_on(model.base_log_probs(0, &tokens, &t)).unwrap();
            model.truncate(0);
            let lp = pollster::block_on(model.log_probs(0, &tokens, &t)).unwrap();
            let n = trained.iter().filter(|&&t| t).count();
            crate::grpo::kl_penalty(&lp, &base, &trained, 1.0, n).loss
        };
        let mut plain = Trainer::new(model, Default::default(), AdvantageNorm::GroupStd).unwrap();
        let stats = pollster::block_on(plain.update(model, &groups, 1e-2)).unwrap();
        assert_eq!(
            stats.grad_norm, 0.0,
            "no advantage, no KL: no gradient ({stats:?})"
        );
        assert_eq!(stats.kl, 0.0);

        let mut trainer = Trainer::new(model, Default::default(), AdvantageNorm::GroupStd).unwrap();
        trainer.kl = 0.5;
        let before = kl(model);
        // A small step: Adam's first moves every parameter by about the rate, which at 1e-2
        // overshoots far past the base on this tiny model.
        let stats = pollster::block_on(trainer.update(model, &groups, 1e-4)).unwrap();
        let after = kl(model);
        eprintln!("{stats:?}\nKL to the base: {before:.5} -> {after:.5}");
        assert!(before > 1e-3, "the adapter moves the policy: {before}");
        assert!(
            (stats.kl - before).abs() < 1e-4 * before.max(1.0),
            "the update measured the KL it started from: {} vs {before}",
            stats.kl
        );
        assert!((stats.loss - 0.5 * stats.kl).abs() < 1e-9, "{stats:?}");
        assert!(stats.grad_norm > 0.0, "{stats:?}");
        assert!(after < before * 0.9, "{before} -> {after}");
    }
}
