//! GRPO's objective as FrogNano was trained with it, with the options the field uses:
//! advantages relative to the task's group of rollouts (scaled by the group's standard
//! deviation, or not: Dr. GRPO), the importance ratio against the log-probabilities recorded
//! when the rollout was sampled, clipped asymmetrically (DAPO's ε_low 0.2, ε_high 0.28),
//! token-level normalisation over the batch (DAPO), and dynamic sampling's test for a group
//! that carries any signal. No KL term by default; optionally one to the adapter-free base
//! model ([`kl_penalty`]).
//!
//! The engine differentiates L = Σ_t coef[t] · log p(token t) (`Model::lora_backward`); this
//! module turns a batch of scored rollouts into the loss and those per-token weights,
//! coef = ∂L/∂log p.

/// How a group's advantages are scaled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AdvantageNorm {
    /// (r − mean) / std: GRPO.
    GroupStd,
    /// r − mean: Dr. GRPO (no per-group rescaling).
    None,
}

/// The rewards' deviations from their group's mean, scaled per `norm`. A group whose rewards
/// are all equal gets zeros (and carries no signal: [`carries_signal`]).
pub fn advantages(rewards: &[f64], norm: AdvantageNorm) -> Vec<f64> {
    let n = rewards.len().max(1) as f64;
    let mean = rewards.iter().sum::<f64>() / n;
    let std = (rewards.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n).sqrt();
    rewards
        .iter()
        .map(|r| match norm {
            AdvantageNorm::GroupStd if std > 1e-12 => (r - mean) / std,
            AdvantageNorm::GroupStd => 0.0,
            AdvantageNorm::None => r - mean,
        })
        .collect()
}

/// Whether a group's rewards differ at all: a group that all failed or all succeeded has zero
/// advantages, so dynamic sampling skips it and draws another task.
pub fn carries_signal(rewards: &[f64]) -> bool {
    rewards.windows(2).any(|w| w[0] != w[1])
}

/// The clip range of the importance ratio: [1 − low, 1 + high].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClipRange {
    pub low: f64,
    pub high: f64,
}

impl Default for ClipRange {
    fn default() -> Self {
        Self {
            low: 0.2,
            high: 0.28,
        }
    }
}

/// One rollout's tokens as the objective sees them.
pub struct RolloutTokens<'a> {
    /// log p of each token under the policy being trained, and as recorded when sampled.
    pub logp: &'a [f32],
    pub logp_old: &'a [f32],
    /// The tokens the policy wrote (true) rather than prompts and tool output (false).
    pub trained: &'a [bool],
    pub advantage: f64,
}

/// The batch's loss and what the backward pass needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Objective {
    /// L = −(1/N) Σ_rollouts Σ_trained t min(r_t·A, clip(r_t)·A), N the trained tokens of the
    /// whole batch, r_t = exp(logp − logp_old).
    pub loss: f64,
    /// Per rollout and token, ∂L/∂logp (0 for untrained and clipped tokens).
    pub coef: Vec<Vec<f32>>,
    /// Trained tokens, and those whose clipped term was the smaller (no gradient).
    pub tokens: usize,
    pub clipped: usize,
}

/// The clipped, token-normalised policy-gradient objective over a batch (module docs).
pub fn clipped_objective(rollouts: &[RolloutTokens], clip: ClipRange) -> Objective {
    let tokens: usize = rollouts
        .iter()
        .map(|r| r.trained.iter().filter(|&&t| t).count())
        .sum();
    let n = tokens.max(1) as f64;
    let (mut loss, mut clipped) = (0.0, 0);
    let coef = rollouts
        .iter()
        .map(|r| {
            r.logp
                .iter()
                .zip(r.logp_old)
                .zip(r.trained)
                .map(|((&lp, &old), &trained)| {
                    if !trained {
                        return 0.0;
                    }
                    let ratio = (lp as f64 - old as f64).exp();
                    let a = r.advantage;
                    let unclipped = ratio * a;
                    let bounded = ratio.clamp(1.0 - clip.low, 1.0 + clip.high) * a;
                    loss -= unclipped.min(bounded) / n;
                    if unclipped <= bounded {
                        // d(r·A)/dlogp = r·A.
                        (-unclipped / n) as f32
                    } else {
                        clipped += 1;
                        0.0
                    }
                })
                .collect()
        })
        .collect();
    Objective {
        loss,
        coef,
        tokens,
        clipped,
    }
}

/// A KL penalty's share of the loss over one rollout, and its per-token weights.
#[derive(Clone, Debug, PartialEq)]
pub struct KlPenalty {
    /// β · (1/N) Σ_trained t KL_t.
    pub loss: f64,
    /// Σ_trained t KL_t (for the batch's mean KL).
    pub kl_sum: f64,
    /// ∂loss/∂logp per token (0 for untrained tokens).
    pub coef: Vec<f32>,
}

/// β times the KL divergence from the reference policy (the base model without the adapter),
/// estimated per trained token as GRPO does (the "k3" estimator, unbiased and never negative):
/// KL_t = exp(ref − logp) − (ref − logp) − 1, normalised by the batch's N trained tokens like
/// the policy term. Its gradient: ∂KL_t/∂logp = 1 − exp(ref − logp).
pub fn kl_penalty(
    logp: &[f32],
    logp_ref: &[f32],
    trained: &[bool],
    beta: f64,
    n: usize,
) -> KlPenalty {
    let n = n.max(1) as f64;
    let mut kl_sum = 0.0;
    let coef = logp
        .iter()
        .zip(logp_ref)
        .zip(trained)
        .map(|((&lp, &rf), &trained)| {
            if !trained {
                return 0.0;
            }
            let d = rf as f64 - lp as f64;
            kl_sum += d.exp() - d - 1.0;
            (beta / n * (1.0 - d.exp())) as f32
        })
        .collect();
    KlPenalty {
        loss: beta * kl_sum / n,
        kl_sum,
        coef,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advantages_are_relative_to_the_group() {
        let r = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0];
        let a = advantages(&r, AdvantageNorm::GroupStd);
        let mean = a.iter().sum::<f64>() / 8.0;
        let var = a.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 8.0;
        assert!(mean.abs() < 1e-12 && (var - 1.0).abs() < 1e-12, "{a:?}");
        assert!(a[0] > 0.0 && a[1] < 0.0);
        let dr = advantages(&r, AdvantageNorm::None);
        assert_eq!(
            dr,
            vec![0.625, -0.375, -0.375, 0.625, 0.625, -0.375, -0.375, -0.375]
        );
        assert_eq!(advantages(&[1.0; 8], AdvantageNorm::GroupStd), vec![0.0; 8]);
        assert!(carries_signal(&r));
        assert!(!carries_signal(&[0.0; 8]) && !carries_signal(&[1.0; 8]));
    }

    /// coef is the loss's derivative: against central differences at every token, with
    /// ratios inside and outside the clip range and advantages of both signs.
    #[test]
    fn coef_is_the_derivative_of_the_loss() {
        let logp_old = [-1.0f32, -2.0, -0.5, -3.0, -1.5, -0.7];
        // Ratios e^0, e^0.1, e^-0.4 (below 0.8), e^0.35 (above 1.28), e^-0.1, e^0.05.
        let logp = [-1.0f32, -1.9, -0.9, -2.65, -1.6, -0.65];
        let trained = [true, true, true, true, false, true];
        let batch = |lp: &[f32], a: f64| {
            let r = RolloutTokens {
                logp: lp,
                logp_old: &logp_old,
                trained: &trained,
                advantage: a,
            };
            clipped_objective(&[r], ClipRange::default())
        };
        for a in [1.3, -0.8] {
            let o = batch(&logp, a);
            assert_eq!(o.tokens, 5);
            // Clipped: A > 0 above 1 + high (token 3); A < 0 below 1 − low (token 2).
            assert_eq!(o.clipped, 1, "advantage {a}");
            let h = 1e-3f32;
            for t in 0..logp.len() {
                let mut up = logp;
                up[t] += h;
                let mut down = logp;
                down[t] -= h;
                let fd = (batch(&up, a).loss - batch(&down, a).loss) / (2.0 * h as f64);
                let c = o.coef[0][t] as f64;
                assert!(
                    (fd - c).abs() < 1e-4 * (1.0 + c.abs()),
                    "token {t}, A {a}: {c} vs {fd}"
                );
            }
        }
    }

    /// Token-level normalisation: every trained token of the batch weighs the same, however
    /// long its rollout.
    #[test]
    fn tokens_weigh_the_same_across_rollouts() {
        let (short, long) = ([-1.0f32; 2], [-1.0f32; 6]);
        let rollouts = [
            RolloutTokens {
                logp: &short,
                logp_old: &short,
                trained: &[true; 2],
                advantage: 1.0,
            },
            RolloutTokens {
                logp: &long,
                logp_old: &long,
                trained: &[true; 6],
                advantage: 1.0,
            },
        ];
        let o = clipped_objective(&rollouts, ClipRange::default());
        assert!(
            o.coef
                .iter()
                .flatten()
                .all(|&c| (c + 1.0 / 8.0).abs() < 1e-7),
            "{o:?}"
        );
        assert!((o.loss + 1.0).abs() < 1e-12);
    }

    /// The KL term is zero where the policy equals the reference, positive elsewhere, and its
    /// weights are the loss's derivative (central differences at every trained token).
    #[test]
    fn kl_penalty_is_the_derivative_of_its_loss() {
        let logp = [-1.2f32, -0.3, -2.5, -0.9];
        let reference = [-1.0f32, -0.3, -3.1, -0.2];
        let trained = [true, true, false, true];
        let (beta, n) = (0.04, 7);
        let same = kl_penalty(&logp, &logp, &trained, beta, n);
        assert_eq!(same.loss, 0.0);
        assert!(same.coef.iter().all(|&c| c == 0.0));
        let k = kl_penalty(&logp, &reference, &trained, beta, n);
        assert!(k.loss > 0.0 && k.kl_sum > 0.0);
        assert_eq!(k.coef[2], 0.0, "an untrained token has no weight");
        let h = 1e-3f32;
        for t in [0usize, 1, 3] {
            let moved = |d: f32| {
                let mut lp = logp;
                lp[t] += d;
                kl_penalty(&lp, &reference, &trained, beta, n).loss
            };
            let slope = (moved(h) - moved(-h)) / (2.0 * h as f64);
            assert!(
                (slope - k.coef[t] as f64).abs() < 1e-6,
                "token {t}: {slope} vs {}",
                k.coef[t]
            );
        }
    }
}
