/**
 * The root of FleetClient's class chain (client.ts): how every call is sent (api-transport.ts).
 * The chain (ClientBase → BatchCalls → RunCalls → FleetClient) only keeps each file small; a
 * FleetClient is one object with every call.
 */
import { ApiTransport, type RequestArgs } from "./api-transport.js";

export class ClientBase {
  protected readonly http: ApiTransport;
  private readonly baseUrl: string;

  /**
   * `apiKey`: a key from `fleet keys create`, sent as `Authorization: Bearer KEY`. Without
   * one, only an API in dev mode (no key stored, loopback) answers. A key that header cannot
   * carry (anything but visible ASCII, once surrounding whitespace is dropped) throws a
   * TypeError here that does not repeat it.
   * `maxLimitWaitMs`: a call refused with 429 (a tenant limit; nothing was done) is sent
   * again after the Retry-After the API gives, until this much time was spent waiting
   * (default 30 s; 0: never; NaN or a negative number throws a TypeError here, naming it).
   * `baseUrl`: an http:// or https:// URL, the API's root (a path after the host is kept;
   * a last `/v1`, which every call adds itself, and trailing slashes are dropped); anything else
   * (`"localhost:8080"`, `"ftp://x"`, `""`, a URL with a user name or password) throws a
   * TypeError here, naming it.
   */
  constructor(options: {
    baseUrl: string;
    apiKey?: string | undefined;
    maxLimitWaitMs?: number | undefined;
  }) {
    this.http = new ApiTransport(options);
    this.baseUrl = this.http.baseUrl;
  }

  protected request<T>(...args: RequestArgs): Promise<T> {
    return this.http.request<T>(...args);
  }
}
