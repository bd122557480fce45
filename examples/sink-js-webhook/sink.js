// sink-js-webhook: POSTs each batch's rows as JSON to `url`, in JavaScript.
// Each row carries an id that stays the same when it is delivered again
// (changefeed/schema.table/txn/seq), so a receiver can drop replays.
import { sink, host, checkKeys, ConfigError } from '../../sdk/js/src/index.js';
import { post } from '../../sdk/js/src/http.js';

export const sinkApi = sink({
  validate(config) {
    checkKeys(config, ['url', 'bearer-token', 'timeout-ms']);
    if (typeof config.url !== 'string') throw new ConfigError('url must be the receiver\'s URL');
  },
  open(config) {
    const feed = host.changefeed();
    return {
      write(tables) {
        const events = [];
        for (const t of tables) {
          const name = `${t.schema.schemaName}.${t.schema.tableName}`;
          for (const row of t.rows()) {
            events.push({
              id: `${feed}/${name}/${row.txnId}/${row.seq}`,
              op: row.op, replay: row.replay, before: row.before, after: row.after,
            });
          }
        }
        if (events.length === 0) return;
        const body = JSON.stringify({ events }, (_, v) => (typeof v === 'bigint' ? v.toString()
          : v instanceof Uint8Array ? btoa(String.fromCharCode(...v)) : v));
        post(config.url, body, {
          headers: { 'content-type': 'application/json' },
          bearer: config['bearer-token'],
          timeoutMs: config['timeout-ms'] ?? 5000,
        });
      },
      flush() {}, // each write is acknowledged by its 2xx
    };
  },
});
