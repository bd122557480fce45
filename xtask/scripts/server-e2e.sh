#!/usr/bin/env bash
# Whole path through `sluice server`: start a server, upload the plugins, create a
# datagen changefeed of ROWS rows, wait until it is finished, stop the server.
# Time it as a whole process, against another build: each run prints rows/s on stderr.
# Usage: xtask/scripts/server-e2e.sh SLUICE_BIN PLUGIN_DIR ROWS blackhole|file
set -euo pipefail
bin=$1 plugins=$2 rows=$3 kind=$4
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
"$bin" server --data-dir "$dir/data" --addr 127.0.0.1:0 --http-addr 127.0.0.1:0 > "$dir/out" 2> "$dir/err" &
pid=$!
for _ in $(seq 1 200); do grep -q 'ready' "$dir/out" 2>/dev/null && break; sleep 0.05; done
grpc=$(sed -n 's/.*grpc \([^ ]*\).*/\1/p' "$dir/out")
cli() { "$bin" cli --server "http://$grpc" "$@"; }
if [ "$kind" = blackhole ]; then
  cli plugin upload "$plugins/sink-blackhole.wasm" --id sink-blackhole@0.1.0 --kind sink > /dev/null
  cat > "$dir/cf.toml" <<TOML
[source]
type = "datagen"
seed = 7
total-rows = $rows
[sink]
plugin = "sink-blackhole@0.1.0"
TOML
else
  cli plugin upload "$plugins/sink-file.wasm" --id sink-file@0.1.0 --kind sink > /dev/null
  cli plugin upload "$plugins/filter-mask.wasm" --id filter-mask@0.1.0 --kind filter > /dev/null
  cat > "$dir/cf.toml" <<TOML
[source]
type = "datagen"
seed = 7
total-rows = $rows
[[filters]]
plugin = "filter-mask@0.1.0"
[filters.config]
columns = ["email", "shop.users.name"]
mode = "hash"
salt = "bench"
[sink]
plugin = "sink-file@0.1.0"
[sink.config]
format = "canal-json"
dir = "changes"
[sink.capabilities]
data-dir = true
TOML
fi
start=$(date +%s.%N)
cli changefeed create -c bench --config "$dir/cf.toml" > /dev/null
while :; do
  state=$(cli --output json changefeed query -c bench | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("status",{}).get("state") or d.get("state"))')
  case "$state" in finished) break;; failed|warning) echo "changefeed $state" >&2; cli changefeed query -c bench >&2; exit 1;; esac
  sleep 0.02
done
end=$(date +%s.%N)
python3 -c "print(f'{$rows/($end-$start):.0f} rows/s ({$end-$start:.2f} s create->finished)')" >&2
