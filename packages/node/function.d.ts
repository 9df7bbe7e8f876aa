/** The stage call a function receives (see functions/README.md). */
export interface StageCall {
  task_id: string;
  type: string;
  stage: string;
  context: any;
  attempt: number;
  priority: number;
  user_id: string | null;
  deadline: string;
  queue_key?: string;
  claim_seq?: number;
  traceparent?: string;
  /** After a wait: the event that ended it, or null when it timed out. */
  event?: { key: string; payload: any; sent_at: string } | null;
  /** After a wait: whether it ended by its timeout. */
  timed_out?: boolean;
  /** After a spawn's join: the children's outcomes in spawn order (a result past 4096 bytes is
   * null with result_left_out: read it with get_task). */
  children?: {
    id: string;
    type: string;
    status: 'succeeded' | 'failed' | 'cancelled';
    result: any;
    error: string | null;
    result_left_out?: boolean;
  }[];
  [field: string]: unknown;
}

/** One reply: go on, succeed, fail, call again later, wait for an event, or spawn children. */
export type StageReply =
  | { next_stage: string; context?: any }
  | { result: any }
  | { error: string; retry?: boolean }
  | { later: number; context?: any }
  | { wait: { event: string; timeout: number }; next_stage: string; context?: any }
  | { spawn: ({ type: string; context?: any } & Record<string, unknown>)[]; next_stage: string; context?: any };

/** `signal` is aborted when the worker cancels the call (timeout, task cancelled). */
export type Handler = (call: StageCall, options: { signal: AbortSignal }) => StageReply | Promise<StageReply>;

/** Serves calls from stdin until it closes (warm) or after the one call. */
export function run(handle: Handler): void;
/** The loop on any line stream; resolves with the exit status once input ends and calls answered. */
export function serve(handle: Handler, input: NodeJS.ReadableStream, write: (reply: object) => Promise<void>): Promise<number>;
/** One call through the handler, a throw made a failure with retry. */
export function callHandle(handle: Handler, call: StageCall, signal?: AbortSignal): Promise<StageReply>;
/** Reports the running call's progress (a JSON value of at most 4096 bytes). */
export function progress(value: unknown): void;
export const PROGRESS_BYTES_MAX: number;
/**
 * Saves the running call's context without ending the call: the task's whole context becomes
 * `context`, and a retry of the stage starts from it. Resolves once the line is written (warm mode).
 */
export function checkpoint(context: Record<string, any>): Promise<void>;
/**
 * Runs `fn` once per task: its result is kept in the context (under `STEPS_KEY`) and
 * checkpointed; a retry resolves to the kept result without calling `fn` again.
 */
export function step<T>(name: string, fn: () => T | Promise<T>): Promise<T>;
/** Where `step` keeps its results in the context: "_steps". */
export const STEPS_KEY: string;
