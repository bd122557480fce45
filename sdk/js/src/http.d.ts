// Types of src/http.js: blocking HTTP over wasi:http.

export interface RequestOptions {
  /** 'GET' unless given. */
  method?: string;
  headers?: Record<string, string>;
  body?: string | Uint8Array;
  /** Sent as `authorization: Bearer <token>`. */
  bearer?: string;
  /** Connect, first-byte and between-bytes timeout; 30000. */
  timeoutMs?: number;
}

export class Response {
  readonly status: number;
  /** Lower-case names to values. */
  readonly headers: Record<string, string>;
  readonly body: Uint8Array;
  text(): string;
  /** This response when 2xx; else throws RetryableError (5xx, 408, 429) or FatalError. */
  check(): this;
}

/** One request, waited for; any status returns. Transport failures throw the contract's errors. */
export function request(url: string, options?: RequestOptions): Response;

/** A POST whose response must be 2xx. */
export function post(url: string, body: string | Uint8Array, options?: Omit<RequestOptions, 'method' | 'body'>): Response;
