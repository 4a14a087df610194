#!/usr/bin/env bash
# Downloads Multi30k task 1 raw text (en/de/fr) from the public multi30k/dataset repository into
# DIR (default ../shared/data/multi30k, the path the multi30k configs read) and checks line counts.
# Usage: scripts/fetch_multi30k.sh [DIR]
set -euo pipefail
DIR=${1:-../shared/data/multi30k}
BASE=${MULTI30K_BASE:-https://raw.githubusercontent.com/multi30k/dataset/a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw}
mkdir -p "$DIR"
fetch() {  # remote-name local-name expected-lines
  local tmp="$DIR/.$2.tmp"
  curl -fsSL "$BASE/$1.gz" | gunzip -c > "$tmp"
  local n
  n=$(wc -l < "$tmp")
  if [ "$n" -ne "$3" ]; then
    rm -f "$tmp"
    echo "fetch_multi30k: $1 has $n lines, expected $3" >&2
    exit 1
  fi
  mv "$tmp" "$DIR/$2"
  echo "fetch_multi30k: $DIR/$2 ($n lines)"
}
for l in en de fr; do
  fetch "train.$l" "train.$l" 29000
  fetch "val.$l" "val.$l" 1014
  fetch "test_2016_flickr.$l" "test2016.$l" 1000
done
