#!/usr/bin/env bash
# Every target's sources compiled as ONE unity batch, front end only (-fsyntax-only): what a build on any number of
# cores can put together. CMakeLists.txt cuts a target's sources into as many batches as the machine has cores, so a
# machine with another core count puts other files side by side than CI's does; two files that each define a helper
# of the same name in an anonymous namespace then collide. In one batch, every pair of a target's files meets, so a
# pass here means that every cut compiles (as far as names go). About a minute on 2 cores.
#   scripts/unity_check.sh            against Debian's LibTorch, in build-unity-check/
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build-unity-check}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DATTNMT_BUILD_CORES=1 -DCMAKE_EXPORT_COMPILE_COMMANDS=ON "$@" \
  >"$B.configure.log" 2>&1 || { cat "$B.configure.log" >&2; exit 1; }
# The unity sources' compile commands, each made a front-end-only check; the precompiled header is not built, so the
# forced include parses pch.h itself.
python3 - "$B/compile_commands.json" >"$B/checks.sh" <<'EOF'
import json, shlex, sys
for c in json.load(open(sys.argv[1])):
    if "/Unity/" not in c["file"] or "attnmt-spm" in c["file"]:
        continue
    args = shlex.split(c["command"])
    i = args.index("-o")
    del args[i:i + 2]
    print("cd %s && %s -fsyntax-only" % (shlex.quote(c["directory"]), " ".join(shlex.quote(a) for a in args)))
EOF
n=$(wc -l <"$B/checks.sh")
[ "$n" -ge 3 ] || { echo "unity_check: expected the library, the CLI and the tests as one batch each, found $n" >&2; exit 1; }
rm -f "$B"/check.*.log
rc=0
i=0
while read -r cmd; do
  bash -c "$cmd" >"$B/check.$((++i)).log" 2>&1 &
done <"$B/checks.sh"
for p in $(jobs -p); do wait "$p" || rc=1; done
for f in "$B"/check.*.log; do
  if grep -q "error:" "$f"; then grep -B2 -A4 "error:" "$f" | head -40 >&2; rc=1; fi
done
[ "$rc" = 0 ] && echo "unity_check: $n targets, each as one unity batch, compile (front end)"
exit "$rc"
