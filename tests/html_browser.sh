#!/usr/bin/env bash
# CTest html_browser: the HTML report (`kharness report --html` of the archive that
# ReportCli.RunsShowAndHtml builds: a run of three candidates, timed verdicts, a best candidate)
# opened in a real browser. Headless Chromium renders it to a PNG and dumps the DOM after a
# measuring script (added to a copy of the page; the report itself has no scripts) has recorded
# every <svg>'s laid-out size; tests/html_browser_check.py then checks that the charts were drawn:
# the three charts present, each sized and holding marks, and the PNG not blank. Skips (77) with a
# message where Chromium is absent (CI installs it: SETUP_BROWSER=1 scripts/setup.sh).
#   tests/html_browser.sh KHARNESS_TESTS_BINARY [OUT_DIR]   OUT_DIR keeps report.html/.png
set -euo pipefail
TESTS="$1"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BROWSER=""
for b in chromium chromium-browser google-chrome google-chrome-stable; do
  if command -v "$b" >/dev/null 2>&1; then BROWSER="$(command -v "$b")"; break; fi
done
if [[ -z "$BROWSER" ]]; then
  echo "SKIP: no Chromium (apt-get install chromium, or SETUP_BROWSER=1 scripts/setup.sh)"
  exit 77
fi
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
OUT="${2:-$WORK}"
mkdir -p "$OUT"
KHARNESS_TEST_KEEP_HTML="$OUT/report.html" "$TESTS" --gtest_filter=ReportCli.RunsShowAndHtml \
  >"$WORK/gtest.log" 2>&1 || { cat "$WORK/gtest.log"; echo "FAIL: the report was not written"; exit 1; }
[[ -s "$OUT/report.html" ]] || { echo "FAIL: no report.html"; exit 1; }
# A copy with a script that writes each <svg>'s box into the page, for --dump-dom to show.
python3 - "$OUT/report.html" "$WORK/measured.html" <<'PY'
import sys
page = open(sys.argv[1], encoding="utf-8").read()
probe = """<script>
window.addEventListener('load', function () {
  var out = [];
  document.querySelectorAll('svg').forEach(function (s) {
    var r = s.getBoundingClientRect();
    out.push({label: s.getAttribute('aria-label') || '', width: r.width, height: r.height,
              marks: s.querySelectorAll('path,polyline,line,rect,circle').length});
  });
  var pre = document.createElement('pre');
  pre.id = 'kharness-svg-boxes';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""
i = page.rfind("</body>")
assert i >= 0, "no </body> in the report"
open(sys.argv[2], "w", encoding="utf-8").write(page[:i] + probe + page[i:])
PY
FLAGS=(--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run
       --disable-dev-shm-usage --user-data-dir="$WORK/profile" --window-size=1280,1800)
timeout 120 "$BROWSER" "${FLAGS[@]}" --screenshot="$OUT/report.png" "file://$OUT/report.html" \
  >"$WORK/shot.log" 2>&1 || true
timeout 120 "$BROWSER" "${FLAGS[@]}" --virtual-time-budget=2000 --dump-dom \
  "file://$WORK/measured.html" >"$WORK/dom.html" 2>"$WORK/dom.log" || true
[[ -s "$OUT/report.png" ]] || { cat "$WORK/shot.log"; echo "FAIL: Chromium wrote no screenshot"; exit 1; }
python3 "$HERE/html_browser_check.py" "$OUT/report.png" "$WORK/dom.html"
