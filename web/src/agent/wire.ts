// Generated from the Rust types in crates/agent and crates/agent-wasm/src/events.rs: do not edit.
// LILYPAD_UPDATE_TS=1 cargo test -p lilypad-tests --test typescript writes this file again.
import type { FinishReason, Message, Sampling, ToolCall } from '../lib/wire';

/**
 * What a tool answers; the model reads `content` as the tool's reply.
 */
export type Observation = {
  content: string;
  is_error: boolean;
};

export type CallRecord = {
  /**
   * The call as read from the reply; `None` when it could not be read.
   */
  call: ToolCall | null;
  observation: string;
  is_error: boolean;
  duration_ms: number;
};

export type StepRecord = {
  index: number;
  /**
   * The model's text exactly as generated.
   */
  raw_output: string;
  finish: FinishReason;
  prompt_tokens: number;
  prefilled_tokens: number;
  generated_tokens: number;
  prefill_ms: number;
  decode_ms: number;
  /**
   * Generated tokens a draft proposed and the model kept (speculative decoding).
   */
  draft_accepted?: number;
  calls: Array<CallRecord>;
};

/**
 * Why a run ended.
 */
export type Exit =
  | { "reason": "submitted" }
  | { "reason": "step_limit" }
  | { "reason": "context_limit" }
  | { "reason": "format_errors" }
  | { "reason": "aborted" }
  | { "reason": "model_error"; "detail": string };

export type AgentConfig = {
  /**
   * `{root}` is replaced by the repository's root path.
   */
  system_prompt: string;
  max_steps: number;
  max_tokens_per_step: number;
  max_consecutive_format_errors: number;
  sampling: Sampling;
  enable_thinking: boolean;
};

export type Trajectory = {
  format: number;
  task: string;
  model: string;
  repo_root: string;
  config: AgentConfig;
  /**
   * The tool schemas the model was shown.
   */
  tools: unknown[];
  messages: Array<Message>;
  steps: Array<StepRecord>;
  exit: Exit | null;
  /**
   * The repository's changes as a git patch (final once `exit` is set).
   */
  patch: string;
  /**
   * Why the patch could not be brought up to date after the last step (the repository's
   * root became unreadable); `patch` is then the last one taken.
   */
  patch_error?: string;
};

export type AgentEvent =
  | { "type": "step"; index: number }
  | { "type": "text"; text: string }
  | { "type": "tool"; call: ToolCall }
  | { "type": "observation"; record: CallRecord }
  | { "type": "trajectory"; trajectory: Trajectory };
