/** Anything with pg's `query(text, values)`: a `pg.Client`, a `pg.PoolClient`, a `pg.Pool`. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

/** A task as get_task shows it, fields in camelCase, times as Dates. */
export interface Task {
  id: string;
  type: string;
  stage: string;
  status: 'pending' | 'running' | 'succeeded' | 'failed' | 'cancelled';
  priority: number;
  attempt: number;
  retryCount: number;
  maxRetryNum: number;
  maxRetryInterval: number;
  claimSeq: number;
  owner: string | null;
  leaseUntil: Date | null;
  orderTime: Date;
  userId: string | null;
  queueKey: string | null;
  idempotencyKey: string | null;
  context: any;
  result: any;
  error: string | null;
  scheduleLog: Array<Record<string, unknown>>;
  createdAt: Date;
  updatedAt: Date;
  finishedAt: Date | null;
  progress: any;
  /** succeeded, failed or cancelled */
  ended: boolean;
  [field: string]: unknown;
}

export interface EnqueueOptions {
  priority?: number;
  runAt?: Date | string;
  stage?: string;
  idempotencyKey?: string;
  userId?: string;
  queueKey?: string;
  uniqueKey?: string;
  uniqueFor?: number;
  traceparent?: string;
  /** Debounce by key within the type, with `debounceFor`. */
  debounceKey?: string;
  /** Seconds from this enqueue to the task's start (more than 0). */
  debounceFor?: number;
}

export interface NewTask {
  context?: any;
  priority?: number;
  runAt?: Date | string;
  stage?: string;
  idempotencyKey?: string;
  userId?: string;
  queueKey?: string;
  traceparent?: string;
  debounceKey?: string;
  debounceFor?: number;
}

export function enqueue(client: Queryable, taskType: string, context?: any, options?: EnqueueOptions): Promise<string>;
export function enqueueMany(client: Queryable, taskType: string, tasks: NewTask[]): Promise<string[]>;
export function getTask(client: Queryable, taskId: string): Promise<Task | null>;
export function cancel(client: Queryable, taskId: string): Promise<boolean>;
export function retry(client: Queryable, taskId: string): Promise<boolean>;
/** How many waiting tasks the event woke; sent in the client's transaction. */
export function sendEvent(client: Queryable, eventKey: string, payload?: any): Promise<number>;

/** A pg client that can LISTEN: a `pg.Client` or a pool's client. */
export interface Listening extends Queryable {
  on(event: 'notification', listener: (n: { channel: string; payload?: string }) => void): unknown;
  removeListener(event: 'notification', listener: (n: { channel: string; payload?: string }) => void): unknown;
}

/** A `pg.Pool`: a client of it is taken for the wait. */
export interface PoolLike {
  idleCount: number;
  connect(): Promise<Listening & { release(): void }>;
}

export interface WaitOptions {
  /** Seconds between two reads of the task when no notification comes (default 5). */
  recheck?: number;
}

/**
 * The ended task, woken by the notification of its end; rejects with TaskTimeout after
 * `timeout` seconds, TaskNotFound when there is none. A client given must be outside a
 * transaction.
 */
export function wait(clientOrUrl: Listening | PoolLike | string, taskId: string, timeout: number,
  options?: WaitOptions): Promise<Task>;

export class TaskTimeout extends Error {
  task: Task;
}
export class TaskNotFound extends Error {
  taskId: string;
}
export const ENDED: Set<string>;
