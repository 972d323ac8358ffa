/** Models offered in the chooser. `path` URLs resolve against the page (scripts/web.sh serves models/). */
export interface Preset {
  id: string;
  label: string;
  url: string;
}

export const PRESETS: Preset[] = [
  {
    id: 'smollm2-135m',
    label: 'SmolLM2-135M-Instruct Q4_1 (98 MB, served with this page)',
    url: '/models/SmolLM2-135M-Instruct.Q4_1.gguf',
  },
  {
    id: 'frognano-4b',
    label: 'FrogNano-4B Q4_K_M (Hugging Face, ~2.7 GB)',
    url: 'https://huggingface.co/lilypad-ai/FrogNano-4B-GGUF/resolve/main/FrogNano-4B-Q4_K_M.gguf',
  },
  { id: 'custom', label: 'Another URL…', url: '' },
];
