/**
 * What this browser's WebGPU offers, in words a user can act on: none, no adapter, a CPU fallback
 * (SwiftShader, lavapipe: it works, slowly) or a GPU. The playground and the VS Code view show
 * the same sentence.
 */
import { formatBytes } from './presets';

export interface WebGpuStatus {
  ok: boolean;
  /** The adapter is a CPU rasterizer standing in for a GPU. */
  cpu: boolean;
  /** Largest storage buffer binding, in bytes (0 without an adapter). */
  maxStorageBinding: number;
  /** One sentence for a browser tab. */
  text: string;
  /** Why there is no WebGPU, in a few words (empty when there is). */
  reason: string;
}

/** A CPU fallback by name (Chromium's SwiftShader, Mesa's llvmpipe/lavapipe) or by the flag. */
export function isCpuAdapter(info: { vendor?: string; architecture?: string; description?: string }, fallback = false): boolean {
  return fallback || /swiftshader|llvmpipe|lavapipe/i.test(`${info.vendor ?? ''} ${info.architecture ?? ''} ${info.description ?? ''}`);
}

export async function probeWebGpu(): Promise<WebGpuStatus> {
  const gpu = (navigator as Navigator & { gpu?: GPU }).gpu;
  const none = (reason: string, text: string): WebGpuStatus => ({ ok: false, cpu: false, maxStorageBinding: 0, text, reason });
  if (!gpu) return none('navigator.gpu is missing', 'This browser has no WebGPU. Use a recent Chrome or Edge (or Safari 26), with hardware acceleration on.');
  let adapter: GPUAdapter | null;
  try {
    adapter = await gpu.requestAdapter();
  } catch (e) {
    const message = String((e as Error).message ?? e);
    return none(message, `WebGPU could not be started: ${message}`);
  }
  if (!adapter) return none('no WebGPU adapter', 'WebGPU is present but offers no adapter: it may be disabled (chrome://gpu) or the GPU blocklisted.');
  const info = adapter.info;
  const limit = adapter.limits.maxStorageBufferBindingSize;
  const cpu = isCpuAdapter(info, (adapter as GPUAdapter & { isFallbackAdapter?: boolean }).isFallbackAdapter === true);
  const name = [info.vendor, info.architecture || info.description].filter(Boolean).join(' ') || 'an adapter';
  const text = `WebGPU: ${name} · max storage binding ${formatBytes(limit)}` +
    (limit < 128 * 2 ** 20 ? ' — below 128 MiB: larger models will not fit' : '') +
    (cpu ? ' — this is a CPU fallback, not a GPU: the 135M model answers at a few tokens per second, 4B models take minutes per reply' : '');
  return { ok: true, cpu, maxStorageBinding: limit, text, reason: '' };
}
