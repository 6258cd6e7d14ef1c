"""otter-onnx's ES module entry (web/dist/otter.mjs) in headless Chromium: tests/web/esm_page.html, served with
the repository's root over HTTP, imports it, fetches FLAT's MNIST artifacts by URL and trains three steps, and POSTs
its outcome to /result; the losses must equal native otter's (libotter.so through ctypes) to 1e-6, and a missing
input must reject.
Registered by tests/CMakeLists.txt when web/dist/otter.cjs and chromium exist."""
import functools
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testlib as tl  # noqa: E402
from test_web_training import load_training_lib, native_losses  # noqa: E402

BATCH = 16
PAGE_TIMEOUT_S = 150


class PageHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the repository's files; a POST to /result hands the page's outcome to the test."""
    outcome = None
    posted = threading.Event()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/result" and not PageHandler.posted.is_set():
            PageHandler.outcome = body.decode()
            PageHandler.posted.set()
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    chromium = os.environ.get("OTTER_CHROMIUM", "chromium")
    handler = functools.partial(PageHandler, directory=tl.SRC)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/tests/web/esm_page.html"
    # Wait for the page's own report rather than dumping the DOM after a (virtual) time budget: on a loaded
    # machine the wasm compilation outlasted any budget and the dump still said "pending".
    with tempfile.TemporaryDirectory() as profile:
        browser = subprocess.Popen([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                    f"--user-data-dir={profile}", url],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            posted = PageHandler.posted.wait(PAGE_TIMEOUT_S)
        finally:
            browser.kill()
            log = browser.communicate()[0]
            server.shutdown()
    tl.check(posted, f"the page reported its outcome within {PAGE_TIMEOUT_S} s")
    if not posted:
        print(log[-2000:])
        return tl.finish("test_web_browser")
    page = json.loads(PageHandler.outcome)
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
