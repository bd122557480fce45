// A sink written in TypeScript against the SDK's types (src/index.d.ts) and
// the contract's types generated from the WIT (types/): `npm test` checks it
// with tsc, then test/typed.test.js runs it.
import { sink, host, checkKeys, ConfigError, type Row, type TableView, type Value } from '../src/index.js';
import type { DdlEvent } from 'sluice:plugin/types@0.2.0';

interface Options {
  /** Only rows of this table are counted. */
  table?: string;
}

/** Sums the numeric values of each counted row's image and counts the rows. */
export const sinkApi = sink<Options>({
  validate(config) {
    checkKeys(config, ['table']);
    if (config.table !== undefined && typeof config.table !== 'string') {
      throw new ConfigError('table must be a string');
    }
  },
  open(config) {
    let rows = 0;
    let sum = 0;
    let ddls = 0;
    const numeric = (v: Value): number => (typeof v === 'number' ? v : typeof v === 'bigint' ? Number(v) : 0);
    const image = (row: Row) => (row.op === 'delete' ? row.before : row.after);
    return {
      write(tables: Iterable<TableView>) {
        for (const t of tables) {
          if (config.table && t.schema.tableName !== config.table) continue;
          for (const row of t.rows()) {
            rows++;
            for (const v of Object.values(image(row) ?? {})) sum += numeric(v);
          }
        }
      },
      flush(_ts: bigint) {
        host.counterAdd('rows', BigInt(rows));
        host.gaugeSet('sum', sum);
        host.counterAdd('ddls', BigInt(ddls));
        rows = 0;
        ddls = 0;
      },
      applyDdl(ddl: DdlEvent) {
        if (ddl.kind.length > 0) ddls++;
      },
    };
  },
});
