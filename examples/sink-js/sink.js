// sink-js: a JavaScript sink that decodes every value of every row and
// reports what it read as counters: `rows`, `values` (non-NULL values) and
// `chars` (characters of text values). Built with sdk/js (README.md there).
//
// Options: `read = "rows"` (default) reads each row's images as objects;
// `read = "columns"` reads each column's values as one array (TableView.column),
// the same values without an object per row. `fail-on-table` fails a write.
import { sink, host, checkKeys, ConfigError } from '../../sdk/js/src/index.js';

export const sinkApi = sink({
  validate(config) {
    checkKeys(config, ['fail-on-table', 'read']);
    if (config['fail-on-table'] !== undefined && typeof config['fail-on-table'] !== 'string') {
      throw new ConfigError('fail-on-table must be a table name');
    }
    if (config.read !== undefined && config.read !== 'rows' && config.read !== 'columns') {
      throw new ConfigError(`read must be "rows" or "columns", not ${JSON.stringify(config.read)}`);
    }
  },
  open(config) {
    const byColumn = config.read === 'columns';
    let rows = 0;
    let values = 0;
    let chars = 0;
    const count = (image) => {
      for (const name in image) {
        const v = image[name];
        if (v === null) continue;
        values++;
        if (typeof v === 'string') chars += v.length;
      }
    };
    const countColumn = (column) => {
      for (let i = 0; i < column.length; i++) {
        const v = column[i];
        if (v === null) continue;
        values++;
        if (typeof v === 'string') chars += v.length;
      }
    };
    return {
      write(tables) {
        for (const table of tables) {
          if (table.schema.tableName === config['fail-on-table']) {
            throw new Error(`told to fail on ${table.schema.tableName}`);
          }
          if (byColumn) {
            rows += table.length;
            for (let c = 0; c < table.schema.columns.length; c++) {
              countColumn(table.column(c, 'before'));
              countColumn(table.column(c, 'after'));
            }
            continue;
          }
          for (const row of table.rows()) {
            rows++;
            if (row.before) count(row.before);
            if (row.after) count(row.after);
          }
        }
      },
      flush() {
        host.counterAdd('rows', BigInt(rows));
        host.counterAdd('values', BigInt(values));
        host.counterAdd('chars', BigInt(chars));
        rows = values = chars = 0;
      },
    };
  },
});
