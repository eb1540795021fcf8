"""The HTML report in a real headless Chromium (Debian package `chromium`,
installed by scripts/bootstrap.sh --vm): no console errors, every image loads,
the header states the recording's facts, no text hides behind a scrollbar."""
import json

import pytest

from tests.helpers import browser, synthetic

pytestmark = pytest.mark.skipif(browser.chromium() is None, reason="chromium not installed "
                                "(scripts/bootstrap.sh --vm installs it)")

PROBE = """JSON.stringify({
  images: Array.from(document.images).map(i => ({w: i.naturalWidth, done: i.complete})),
  header: document.querySelector('table.facts').innerText,
  scrolled: Array.from(document.querySelectorAll('pre, p, td, li, .caveat'))
    .filter(e => e.scrollWidth > e.clientWidth + 1).length,
  pageWidth: document.documentElement.scrollWidth, viewWidth: window.innerWidth,
  captions: Array.from(document.querySelectorAll('figcaption')).map(c => c.innerText),
  tables: document.querySelectorAll('table').length,
})"""


@pytest.mark.parametrize("procs, cpus, resizes", [(1, 2, 0), (40, 128, 3)])
def test_html_report_in_chromium(tmp_path, procs, cpus, resizes):
    from tests.helpers.host import cli as _cli
    rec = synthetic.recording(procs, cpus, resizes)
    rec["host"] = "build-host-7"
    rec["method"]["blind_spots"] = ["a caveat long enough to need wrapping " * 12]
    src, page = tmp_path / "rec.json", tmp_path / "r.html"
    src.write_text(json.dumps(rec))
    r = _cli("report", src, "--html", page, "-q")
    assert r.returncode == 0, r.stderr
    value, errors = browser.render(page.as_uri(), PROBE)
    assert errors == []
    got = json.loads(value)
    assert len(got["images"]) == 6 and all(i["done"] and i["w"] > 0 for i in got["images"])
    head = got["header"]
    for fact in ("build-host-7", rec["kernel"]["release"], "tracepoint", "./service --threads 8",
                 rec["started_at"], "5.00 s", f"{rec['totals']['lookups']:,}"):
        assert fact in head, fact
    assert got["scrolled"] == 0 and got["pageWidth"] <= got["viewWidth"]
    assert all(len(c) > 40 for c in got["captions"])   # sentences, not file names
    assert got["tables"] == 3 + bool(resizes)   # facts, processes, nodes, resizes
