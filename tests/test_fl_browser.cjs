// Drives test_fl_browser.py's browser clients: headless Chromium (puppeteer-core) opens the client page of
// `otter fl serve --web` in N tabs, each joining with the token from $OTTER_FL_TOKEN (passed in the URL
// fragment, which no server sees), and waits until every tab is done or one failed. Prints each tab's console
// and, last, one JSON line with every tab's final state. Exit 0 only when every tab finished its rounds.
//   node test_fl_browser.cjs PUPPETEER_CORE_DIR CHROMIUM URL TABS TIMEOUT_S SETTINGS_FRAGMENT
'use strict';
const [pptrDir, chromium, url, tabs, timeoutS, settings] = process.argv.slice(2);
const puppeteer = require(pptrDir);

(async () => {
  const args = ['--headless=new'];
  if (process.getuid && process.getuid() === 0) args.push('--no-sandbox'); // Chromium refuses root otherwise
  const browser = await puppeteer.launch({ executablePath: chromium, headless: true, args });
  const pages = [];
  try {
    for (let i = 0; i < Number(tabs); i++) {
      const page = await browser.newPage();
      page.on('console', (m) => console.log(`tab ${i}: ${m.text()}`));
      page.on('pageerror', (e) => console.log(`tab ${i}: page error: ${e.message}`));
      await page.goto(`${url}#token=${encodeURIComponent(process.env.OTTER_FL_TOKEN)}&${settings}`);
      pages.push(page);
    }
    const end = Date.now() + 1000 * Number(timeoutS);
    let states = [];
    for (;;) {
      states = await Promise.all(pages.map((p) => p.evaluate(() => window.otterClient || { state: 'no client' })));
      const finished = states.every((s) => s.state === 'done' || s.state === 'failed');
      if (finished || Date.now() > end) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    const logs = await Promise.all(pages.map((p) => p.evaluate(() => document.getElementById('log').textContent)));
    logs.forEach((l, i) => console.log(`tab ${i} page log:\n${l}`));
    console.log(JSON.stringify(states));
    process.exitCode = states.every((s) => s.state === 'done') ? 0 : 1;
  } finally {
    await browser.close();
  }
})().catch((e) => {
  console.log(`driver error: ${e.stack || e}`);
  process.exitCode = 1;
});
