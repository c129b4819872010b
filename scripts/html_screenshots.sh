#!/usr/bin/env bash
# The screenshots of the HTML pages in README.md and docs/cli.md (docs/figures/report-html.png,
# docs/figures/diff-html.png), rendered by headless chromium from the shipped traces and a committed
# validation run. Needs Debian's chromium (.ci/run installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
HEADROOM=${HEADROOM:-.venv/bin/headroom}
CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$HEADROOM" report traces/ --html "$tmp/report.html" --speedups examples/speedups.toml > /dev/null
"$HEADROOM" diff docs/gpu/validation/llama7b-prefill-rmsnorm/base.json.gz \
    docs/gpu/validation/llama7b-prefill-rmsnorm/variant.json.gz --by module --html "$tmp/diff.html" > /dev/null
for page in report diff; do
    "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
        --disable-sync --no-first-run --user-data-dir="$tmp/profile-$page" --hide-scrollbars \
        --window-size=1200,1500 --screenshot="docs/figures/$page-html.png" "file://$tmp/$page.html" 2> /dev/null
done
ls -la docs/figures/report-html.png docs/figures/diff-html.png
