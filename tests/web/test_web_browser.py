"""otter-onnx's ES module entry (web/dist/otter.mjs) in headless Chromium: tests/web/esm_page.html, served with
the repository's root over HTTP, imports it, fetches FLAT's MNIST artifacts by URL and trains three steps; the
losses must equal native otter's (libotter.so through ctypes) to 1e-6, and a missing input must reject.
Registered by tests/CMakeLists.txt when web/dist/otter.cjs and chromium exist."""
import functools
import http.server
import json
import os
import re
import subprocess
import sys
import threading

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testlib as tl  # noqa: E402
from test_web_training import load_training_lib, native_losses  # noqa: E402

BATCH = 16


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def main():
    chromium = os.environ.get("OTTER_CHROMIUM", "chromium")
    handler = functools.partial(QuietHandler, directory=tl.SRC)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/tests/web/esm_page.html"
    try:
        # --virtual-time-budget: the page's fetches and wasm compilation finish before the DOM is dumped (60 s of
        # virtual time left it "pending" on a loaded machine; the real time stays about a second).
        r = subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                            "--virtual-time-budget=600000", "--dump-dom", url],
                           capture_output=True, text=True, timeout=180)
    finally:
        server.shutdown()
    m = re.search(r'<pre id="result">([^<]*)</pre>', r.stdout)
    tl.check(m is not None, f"chromium rendered the page (exit {r.returncode})")
    if not m:
        print(r.stdout[-2000:], r.stderr[-2000:])
        return tl.finish("test_web_browser")
    page = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    tl.check("error" not in page, f"the page trained without error ({page.get('error')})")
    if "error" in page:
        return tl.finish("test_web_browser")

    x = np.stack([((np.arange(BATCH * 784) + 7 * s) * 7919 % 255 / 255).astype(np.float32).reshape(BATCH, 784)
                  for s in range(3)]).reshape(3 * BATCH, 784)
    y = np.concatenate([(np.arange(BATCH) + s) % 10 for s in range(3)]).astype(np.int64)
    native = native_losses(load_training_lib(), tl.ORT_FIXTURE, x, y, BATCH, 3)
    worst = max(abs(a - b) for a, b in zip(page["losses"], native))
    tl.check(len(page["losses"]) == 3 and worst <= 1e-6,
             f"browser losses {page['losses']} vs native {native}: worst |difference| {worst:.3g} <= 1e-6")
    tl.check(page["bad"] is not None and "labels" in page["bad"], f"a missing input rejects: {page['bad']!r}")
    return tl.finish("test_web_browser")


if __name__ == "__main__":
    sys.exit(main())
