/**
 * Models offered by the model chooser (the playground, the agent page, the VS Code view and its
 * "lilypad: Choose model" command), each with the sampling it is meant to be used with.
 */
export interface Sampling {
  temperature: number;
  top_p: number;
  top_k: number;
}

export interface Preset {
  id: string;
  label: string;
  /** An http(s) URL, or a path served with the page (`servedWithPage`). */
  url: string;
  /** The URL is a path on the page's own server (scripts/web.sh serves models/): not for VS Code. */
  servedWithPage?: boolean;
  /** Download size in bytes, shown in the label. */
  bytes?: number;
  /** Sampling defaults put into the form when the preset is chosen. */
  sampling?: Sampling;
  /** Why those defaults, and what the model needs, shown under the chooser. */
  note?: string;
}

export const PRESETS: Preset[] = [
  {
    id: 'smollm2-135m',
    label: 'SmolLM2 135M Instruct · Q4_1',
    url: '/models/SmolLM2-135M-Instruct.Q4_1.gguf',
    servedWithPage: true,
    bytes: 98_362_432,
    sampling: { temperature: 0, top_p: 1, top_k: 0 },
    note: 'Served with this page. A 135M model drifts into nonsense when sampled, so it answers greedily (temperature 0).',
  },
  {
    id: 'qwen3.5-4b',
    label: "Qwen3.5 4B · Q4_K_M · FrogNano's base",
    url: 'https://huggingface.co/unsloth/Qwen3.5-4B-GGUF/resolve/main/Qwen3.5-4B-Q4_K_M.gguf',
    bytes: 2.6e9,
    sampling: { temperature: 0.7, top_p: 0.8, top_k: 20 },
    note: "Unsloth's GGUF on Hugging Face, with Qwen's recommended sampling without thinking. Downloaded once, then cached; usable on a GPU, minutes per reply on a CPU fallback.",
  },
  {
    id: 'qwen3-4b',
    label: 'Qwen3 4B Instruct 2507 · Q4_K_M',
    url: 'https://huggingface.co/unsloth/Qwen3-4B-Instruct-2507-GGUF/resolve/main/Qwen3-4B-Instruct-2507-Q4_K_M.gguf',
    bytes: 2.5e9,
    sampling: { temperature: 0.7, top_p: 0.8, top_k: 20 },
    note: "Unsloth's GGUF on Hugging Face, with Qwen's recommended sampling. Downloaded once, then cached; usable on a GPU, minutes per reply on a CPU fallback.",
  },
];

/** The chooser's entry for any other model. */
export const OTHER_URL = 'custom';

/** Sizes in binary units everywhere on the pages: 94 MiB, 2.4 GiB. */
export function formatBytes(n: number): string {
  if (n >= 2 ** 30) return `${(n / 2 ** 30).toFixed(1)} GiB`;
  if (n >= 2 ** 20) return `${(n / 2 ** 20).toFixed(n >= 100 * 2 ** 20 ? 0 : 1)} MiB`;
  if (n >= 2 ** 10) return `${(n / 2 ** 10).toFixed(0)} KiB`;
  return `${n} B`;
}

/** The preset's label with its size. */
export function presetLabel(p: Preset): string {
  return p.bytes ? `${p.label} · ${formatBytes(p.bytes)}` : p.label;
}

/** The preset a model URL belongs to (a served path matches its resolved URL too). */
export function presetFor(url: string, base?: string): Preset | undefined {
  const resolve = (u: string) => {
    try {
      return base ? new URL(u, base).href : u;
    } catch {
      return u;
    }
  };
  const wanted = resolve(url.trim());
  return PRESETS.find((p) => p.url === url.trim() || resolve(p.url) === wanted);
}
