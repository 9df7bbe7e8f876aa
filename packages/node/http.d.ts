import { EnqueueOptions, NewTask, Task, TaskNotFound, TaskTimeout } from './index';

export { EnqueueOptions, NewTask, Task, TaskNotFound, TaskTimeout };

/** The longest wait the server holds one request for, in seconds. */
export const WAIT_MAX: number;
export const ENDED: Set<string>;

/** An error answer of the server. */
export class HttpError extends Error {
  status: number;
  code: string;
}

export interface HttpClientOptions {
  /** A bearer token of the server's ASYNCFLOW_TOKENS. */
  token?: string | null;
  /** Seconds a request may take, beside a wait's own (default 30). */
  timeout?: number;
}

/** The same calls as the pg client, against `asyncflow serve`, each its own transaction there. */
export class HttpClient {
  constructor(url: string, options?: HttpClientOptions);
  url: string;
  enqueue(taskType: string, context?: any, options?: EnqueueOptions): Promise<string>;
  enqueueMany(taskType: string, tasks: NewTask[]): Promise<string[]>;
  getTask(taskId: string): Promise<Task | null>;
  cancel(taskId: string): Promise<boolean>;
  retry(taskId: string): Promise<boolean>;
  sendEvent(eventKey: string, payload?: any): Promise<number>;
  /** The ended task, by long-polls of GET /v1/tasks/{id}?wait=; TaskTimeout after `timeout` seconds. */
  wait(taskId: string, timeout: number): Promise<Task>;
}
