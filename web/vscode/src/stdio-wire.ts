// Generated from the Rust types in crates/cli/src/stdio_protocol.rs: do not edit.
// LILYPAD_UPDATE_TS=1 cargo test -p lilypad-tests --test typescript writes this file again.
import type { Exit, Trajectory } from '../../src/agent/wire';

export type FileSpec = {
  path: string;
  text: string;
};

export type RepoSpec =
  | { "folder": string }
  | { "files": Array<FileSpec> };

export type ModelSpec =
  | { "gguf": { path: string, context?: number, adapter?: string, lora?: string, draft?: string } }
  | { "scripted": string };

/**
 * Every field may be left out (the defaults are the agent's).
 */
export type Settings = {
  max_steps?: number;
  max_tokens_per_step?: number;
  thinking?: boolean;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  seed?: number;
  /**
   * Let `python`/`pytest` run with the real Python in a scratch copy of the snapshot. Off by
   * default: the code runs on the user's machine, so the editor asks for it explicitly.
   */
  python?: boolean;
  /**
   * Run that Python in the bubblewrap sandbox (no network, only its scratch copy writable,
   * limits). On by default; without bwrap a request with `python` fails unless this is off.
   */
  sandbox?: boolean;
};

/**
 * The one request a process serves.
 */
export type Request = {
  "type": "solve";
  task: string;
  model: ModelSpec;
  repo: RepoSpec;
  /**
   * The folder the model is told it works in.
   */
  root?: string;
  settings?: Settings;
};

export type FileResult = {
  path: string;
  change: 'added' | 'modified' | 'deleted';
  /**
   * The new contents; `None` for a deleted file, one that is not UTF-8 text, or one too
   * large to send (`too_large`).
   */
  text: string | null;
  /**
   * The contents were left out for their size: the change is named, not carried.
   */
  too_large?: boolean;
};

export type ErrorCode = "bad_request" | "repo" | "model" | "agent";

/**
 * One line on stdout.
 */
export type Event =
  | { "type": "started"; repo_root: string; files: number }
  | { "type": "load_progress"; done_bytes: number; total_bytes: number; tensor: string }
  | { "type": "model_ready"; model: string; lora?: string }
  | { "type": "step_started"; index: number }
  | { "type": "text"; text: string }
  | { "type": "tool_started"; name: string; arguments: unknown }
  | { "type": "tool_finished"; name: string | null; observation: string; is_error: boolean; duration_ms: number }
  | { "type": "step_finished"; index: number; prompt_tokens: number; prefilled_tokens: number; generated_tokens: number; prefill_ms: number; decode_ms: number; prefill_tokens_per_s: number; decode_tokens_per_s: number }
  | { "type": "done"; exit: Exit | null; patch: string; changes: Array<FileResult>; trajectory: Trajectory }
  | { "type": "error"; code: ErrorCode; message: string };
