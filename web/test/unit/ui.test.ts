import { describe, expect, it } from 'vitest';
import { PRESETS, formatBytes, presetFor } from '../../src/ui/presets';
import { splitThinking } from '../../src/ui/thinking';
import { isCpuAdapter } from '../../src/ui/webgpu';
import { testSummary } from '../../src/agent/test-summary';

describe('splitThinking', () => {
  it('reads a reply that starts inside the thinking the prompt opened', () => {
    expect(splitThinking('Let me see.\n</think>\n\nParis.')).toEqual({ thinking: 'Let me see.', thought: true, answer: 'Paris.' });
  });
  it('reads a reply that opens its own thinking, before and after it closes', () => {
    expect(splitThinking('<think>\nhmm')).toEqual({ thinking: 'hmm', thought: false, answer: '' });
    expect(splitThinking('<think>\nhmm\n</think>\nIt is 4.')).toEqual({ thinking: 'hmm', thought: true, answer: 'It is 4.' });
  });
  it('leaves a reply without thinking whole, also one that mentions the tag later', () => {
    expect(splitThinking('Paris.')).toEqual({ thought: false, answer: 'Paris.' });
    expect(splitThinking('Use <think> tags')).toEqual({ thought: false, answer: 'Use <think> tags' });
  });
  it('keeps an empty thinking block as thinking', () => {
    expect(splitThinking('<think>\n\n</think>\n\nHi')).toEqual({ thinking: '', thought: true, answer: 'Hi' });
  });
});

describe('presets', () => {
  it('finds a preset by its URL, and a served one by its resolved URL', () => {
    expect(presetFor(PRESETS[1].url)?.id).toBe(PRESETS[1].id);
    expect(presetFor('http://localhost:5173/models/SmolLM2-135M-Instruct.Q4_1.gguf', 'http://localhost:5173/agent.html')?.id).toBe('smollm2-135m');
    expect(presetFor('https://example.com/other.gguf')).toBeUndefined();
  });
  it('greedy for the 135M model, Qwen sampling for the 4B ones', () => {
    expect(PRESETS.find((p) => p.id === 'smollm2-135m')?.sampling?.temperature).toBe(0);
    for (const p of PRESETS.filter((p) => p.id.startsWith('qwen'))) expect(p.sampling).toEqual({ temperature: 0.7, top_p: 0.8, top_k: 20 });
  });
  it('offers only downloadable URLs outside the page', () => {
    for (const p of PRESETS.filter((p) => !p.servedWithPage)) expect(p.url).toMatch(/^https:\/\/huggingface\.co\/.+\.gguf$/);
  });
  it('writes sizes in binary units', () => {
    expect(formatBytes(98_362_432)).toBe('93.8 MiB');
    expect(formatBytes(2.6e9)).toBe('2.4 GiB');
    expect(formatBytes(12 * 2 ** 20)).toBe('12.0 MiB');
    expect(formatBytes(512)).toBe('512 B');
  });
});

describe('isCpuAdapter', () => {
  it('names SwiftShader and Mesa software rasterizers, or the fallback flag', () => {
    expect(isCpuAdapter({ vendor: 'google', architecture: 'swiftshader' })).toBe(true);
    expect(isCpuAdapter({ vendor: 'mesa', description: 'llvmpipe (LLVM 17.0.6, 256 bits)' })).toBe(true);
    expect(isCpuAdapter({ vendor: 'nvidia', architecture: 'ada' })).toBe(false);
    expect(isCpuAdapter({ vendor: 'apple' }, true)).toBe(true);
  });
});

describe('testSummary', () => {
  it("takes pytest's summary line without its rule", () => {
    const out = 'FAILED test_a.py::test_x - assert 1 == 2\n========= 1 failed, 10 passed in 0.12s =========\n';
    expect(testSummary(out, false)).toBe('1 failed, 10 passed in 0.12s');
    expect(testSummary('..........\n11 passed in 0.05s\n', true)).toBe('11 passed in 0.05s');
  });
  it('says what happened when there is no summary', () => {
    expect(testSummary('', true)).toBe('The tests passed.');
    expect(testSummary('bash: pytest: command not found', false)).toBe('bash: pytest: command not found');
    expect(testSummary('no tests ran in 0.01s', false)).toBe('no tests ran in 0.01s');
  });
});
