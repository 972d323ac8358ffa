/**
 * Models offered in the chooser, each with the sampling it is meant to be used with. `path`
 * URLs resolve against the page (scripts/web.sh serves models/).
 */
export interface Preset {
  id: string;
  label: string;
  url: string;
  /** Sampling defaults put into the form when the preset is chosen. */
  sampling?: { temperature: number; top_p: number; top_k: number };
  /** Why those defaults, shown under the chooser. */
  note?: string;
}

export const PRESETS: Preset[] = [
  {
    id: 'smollm2-135m',
    label: 'SmolLM2-135M-Instruct Q4_1 (94 MiB, served with this page)',
    url: '/models/SmolLM2-135M-Instruct.Q4_1.gguf',
    sampling: { temperature: 0, top_p: 1, top_k: 0 },
    note: 'A 135M model drifts into nonsense when sampled, so it answers greedily (temperature 0).',
  },
  {
    id: 'qwen3.5-4b',
    label: "Qwen3.5-4B Q4_K_M, FrogNano-4B's base (Unsloth on Hugging Face, 2.6 GB)",
    url: 'https://huggingface.co/unsloth/Qwen3.5-4B-GGUF/resolve/main/Qwen3.5-4B-Q4_K_M.gguf',
    sampling: { temperature: 0.7, top_p: 0.8, top_k: 20 },
    note: "Qwen's recommended sampling without thinking. 2.6 GB to download once; needs a GPU to be usable.",
  },
  {
    id: 'qwen3-4b',
    label: 'Qwen3-4B-Instruct-2507 Q4_K_M (Unsloth on Hugging Face, 2.5 GB)',
    url: 'https://huggingface.co/unsloth/Qwen3-4B-Instruct-2507-GGUF/resolve/main/Qwen3-4B-Instruct-2507-Q4_K_M.gguf',
    sampling: { temperature: 0.7, top_p: 0.8, top_k: 20 },
    note: "Qwen's recommended sampling. 2.5 GB to download once; needs a GPU to be usable.",
  },
  { id: 'custom', label: 'Another URL…', url: '' },
];
