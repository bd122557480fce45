// What `wasi:http/*` imports are in Node tests (bin/test.mjs): no network.
// A test gives src/http.js a fake transport with testing.js `mockHttp`.
const none = () => {
  throw new Error('no network in Node tests: give the plugin a mock with mockHttp() from testing.js');
};
export const handle = none;
export class Fields { static fromList() { none(); } }
export class OutgoingRequest { constructor() { none(); } }
export class OutgoingBody { static finish() { none(); } }
export class RequestOptions { constructor() { none(); } }
