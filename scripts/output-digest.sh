#!/usr/bin/env bash
# Every output futextrace makes from a saved file, written into OUT and digested
# (OUT/SHA256SUMS), so a change that must not change any output (a module moved, an
# import renamed) can be checked byte for byte: run it before and after on the same
# inputs, then compare the two SHA256SUMS.
#
#   scripts/output-digest.sh OUT [FILE.json ...]     default: tests/data/recording-*.json
#   scripts/output-digest.sh --compare OLD_OUT NEW_OUT
#
# For each FILE (a recording, or a bench/explain file with one inside): `report -v` and
# `report` text, `report --plot` PNGs, `report --html`, explain's text (both verbosities)
# and its JSON as `explain --json` writes it, all from the file; for each pair of FILEs,
# `diff` text, `--json` and `--plot`. A fresh recording of the built-in workload, made
# once and given to both runs, is the live input:
#   futextrace bench --threads 2 --futexes 1024 --runtime 1 --json /tmp/r.json  (root)
#   scripts/output-digest.sh /tmp/before tests/data/recording-*.json /tmp/r.json
# /metrics (export/) imports nothing from output/ (scripts/import-cycles.py --graph shows
# it), so it is unchanged by anything done there; the script prints that edge count.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py="$here/.venv/bin/python"
[ -x "$py" ] || py=python3

if [ "${1:-}" = "--compare" ]; then
    [ $# = 3 ] || { echo "usage: $0 --compare OLD_OUT NEW_OUT" >&2; exit 2; }
    if diff -u "$2/SHA256SUMS" "$3/SHA256SUMS"; then
        echo "output-digest: identical ($(wc -l < "$2/SHA256SUMS") files)"
    else
        echo "output-digest: DIFFERENT" >&2
        exit 1
    fi
    exit 0
fi

[ $# -ge 1 ] || { echo "usage: $0 OUT [FILE.json ...]" >&2; exit 2; }
out=$(realpath -m "$1")
shift
files=("$@")
[ ${#files[@]} -gt 0 ] || files=("$here"/tests/data/recording-*.json)
rm -rf "$out"
mkdir -p "$out"
ft() { (cd "$here" && "$py" -c 'import sys; from futextrace.cli import main; sys.argv[0] = "futextrace"; sys.exit(main())' "$@"); }

# explain's text and JSON from a file: explain itself only records, so call what it calls.
explain_file() {
    (cd "$here" && "$py" - "$@" <<'EOF'
import sys
try:
    from futextrace.output.text.explain_text import explained, render
except ImportError:            # before output/ was split into plots/ and text/
    from futextrace.output.explain_text import explained, render
from futextrace.output.jsonio import open_output
from futextrace.output.report import load_carried

src, txt, txt_v, js = sys.argv[1:]
rec, _ = load_carried(src)
expl = explained(rec, js)
open(txt, "w").write(render(expl, False) + "\n")
open(txt_v, "w").write(render(expl, True) + "\n")
open_output(js).write_json({"explanation": expl, "recording": rec})
EOF
    )
}

names=()
for f in "${files[@]}"; do
    f=$(realpath "$f")
    n=$(basename "$f" .json)
    names+=("$n")
    if grep -q '"schema": *"futextrace-bench"' "$f"; then
        # report reads a bare recording: the bench file's own, written once beside it
        # (the same path in both runs, since a path can show in the outputs)
        bare="${f%.json}.recording.json"
        [ -e "$bare" ] || (cd "$here" && "$py" -c \
            'import json, sys; json.dump(json.load(open(sys.argv[1]))["recording"], open(sys.argv[2], "w"))' "$f" "$bare")
        f=$bare
    fi
    ft report "$f" -v --plot "$out/$n-plots" --html "$out/$n.html" > "$out/$n.report-v.txt"
    ft report "$f" > "$out/$n.report.txt"
    explain_file "$f" "$out/$n.explain.txt" "$out/$n.explain-v.txt" "$out/$n.explain.json"
done
for ((i = 0; i < ${#files[@]}; i++)); do
    for ((j = 0; j < ${#files[@]}; j++)); do
        [ $i != $j ] || continue
        a=$(realpath "${files[$i]}"); b=$(realpath "${files[$j]}")
        p="diff-${names[$i]}-${names[$j]}"
        ft diff "$a" "$b" --plot "$out/$p.png" --json "$out/$p.json" > "$out/$p.txt" || [ $? = 1 ]
    done
done
# bench --ramp's picture and lines, from the unit test's synthetic runs (no file holds a ramp)
(cd "$here" && "$py" - "$out" <<'PY'
import sys
from tests.helpers.ramp_samples import _doc
from futextrace.bench.ramp import summary
try:
    from futextrace.output.plots.ramp import plot_ramp
except ImportError:            # before: bench/ramp_plot.py
    from futextrace.bench.ramp_plot import plot_ramp
for n in (1, 8):
    doc = _doc(first_threads=n)
    plot_ramp(doc, f"{sys.argv[1]}/ramp-{n}.png")
    open(f"{sys.argv[1]}/ramp-{n}.txt", "w").write("\n".join(summary(doc["runs"])) + "\n")
PY
)
# The file names in the outputs are the inputs' (the same both runs); nothing else varies.
(cd "$out" && find . -type f ! -name SHA256SUMS | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)
edges=$(cd "$here" && "$py" scripts/import-cycles.py --graph 2>/dev/null \
        | grep -c '^futextrace\.export[.a-z_]* -> futextrace\.output' || true)
echo "output-digest: $(wc -l < "$out/SHA256SUMS") files in $out/SHA256SUMS; export/ -> output/ edges: $edges"
