// The lesson site in a real browser: serve it on localhost, open every page in headless Chromium, and fail
// unless each page loads with every picture it must show (site.json, written by site/build.py) decoded,
// every link and resource answering, no request failing and no script error. Takes two screenshots.
//
//   node site/check.mjs SITE_DIR SHOTS_DIR          (make site-check)
//
// Needs Debian's chromium (/usr/bin/chromium, or CHROMIUM=path) and playwright-core, found from the
// current folder (`npm install playwright-core` there) or PLAYWRIGHT_CORE=path/to/playwright-core.
import { createReadStream, existsSync, mkdirSync, readFileSync, statSync } from "node:fs";
import { createServer } from "node:http";
import { createRequire } from "node:module";
import { extname, join, normalize, resolve } from "node:path";

const [siteArg, shotsArg] = process.argv.slice(2);
if (!siteArg || !shotsArg) {
  console.error("usage: node site/check.mjs SITE_DIR SHOTS_DIR");
  process.exit(2);
}
const site = resolve(siteArg);
const shots = resolve(shotsArg);
const expected = JSON.parse(readFileSync(join(site, "site.json"), "utf8"));

let chromium;
try {
  const require = createRequire(join(process.cwd(), "noop.js"));
  ({ chromium } = require(process.env.PLAYWRIGHT_CORE || "playwright-core"));
} catch (e) {
  console.error("playwright-core not found: `npm install playwright-core` in the folder you run this from, "
                + "or set PLAYWRIGHT_CORE to its folder");
  process.exit(2);
}

// A static server for the site folder: what `python -m http.server` would do, inside this process.
const TYPES = { ".html": "text/html; charset=utf-8", ".png": "image/png", ".json": "application/json",
                ".css": "text/css", ".svg": "image/svg+xml" };
const server = createServer((req, res) => {
  const path = normalize(join(site, decodeURIComponent(new URL(req.url, "http://x").pathname)));
  const file = path.endsWith("/") ? join(path, "index.html") : path;
  if (!file.startsWith(site) || !existsSync(file) || !statSync(file).isFile()) {
    res.writeHead(404).end("not found");
    return;
  }
  res.writeHead(200, { "content-type": TYPES[extname(file)] || "application/octet-stream" });
  createReadStream(file).pipe(res);
});
await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
const base = `http://127.0.0.1:${server.address().port}/`;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const problems = [];
const linkStatus = new Map();  // absolute URL without fragment -> HTTP status

async function status(url) {
  if (!linkStatus.has(url)) {
    const r = await context.request.get(url);
    linkStatus.set(url, r.status());
  }
  return linkStatus.get(url);
}

for (const [name, want] of Object.entries(expected)) {
  const page = await context.newPage();
  const failed = [];
  page.on("pageerror", (e) => failed.push(`script error: ${e.message}`));
  page.on("requestfailed", (r) => failed.push(`request failed: ${r.url()} (${r.failure()?.errorText})`));
  page.on("response", (r) => { if (r.status() >= 400) failed.push(`${r.status()} for ${r.url()}`); });
  const response = await page.goto(base + name, { waitUntil: "load" });
  if (!response || response.status() !== 200) failed.push(`page answered ${response?.status()}`);
  const facts = await page.evaluate(() => ({
    title: document.title,
    images: [...document.images].map((i) => ({ src: i.src.slice(0, 80), ok: i.complete && i.naturalWidth > 0 })),
    links: [...document.querySelectorAll("a[href]")].map((a) => a.href),
    ids: [...document.querySelectorAll("[id]")].map((e) => e.id),
  }));
  const broken = facts.images.filter((i) => !i.ok);
  if (broken.length) failed.push(`broken images: ${broken.map((i) => i.src).join(", ")}`);
  if (facts.images.length !== want.pictures) failed.push(`${facts.images.length} pictures, ${want.pictures} expected`);
  const pages = new Set();
  for (const href of facts.links) {
    const url = new URL(href);
    if (url.origin !== new URL(base).origin) {
      failed.push(`link leaves the site: ${href}`);
      continue;
    }
    const target = url.href.split("#")[0];
    if (target === page.url().split("#")[0]) {  // an anchor on this page
      const raw = url.hash.slice(1);  // as the browser looks it up: the fragment as written, then decoded
      if (raw && !facts.ids.includes(raw) && !facts.ids.includes(decodeURIComponent(raw))) {
        failed.push(`no anchor ${url.hash}`);
      }
      continue;
    }
    pages.add(target);
    const code = await status(target);
    if (code !== 200) failed.push(`link ${href} answers ${code}`);
  }
  if (want.links !== undefined && pages.size < want.links) failed.push(`${pages.size} pages linked, ${want.links} expected`);
  console.log(`${failed.length ? "FAIL" : "ok  "} ${name}: "${facts.title}", ${facts.images.length} pictures, `
              + `${facts.links.length} links`);
  for (const f of failed) problems.push(`${name}: ${f}`);
  await page.close();
}

// Two screenshots: the table of contents, and a lesson page at one of its pictures.
mkdirSync(shots, { recursive: true });
const shot = await context.newPage();
await shot.goto(base + "index.html");
await shot.screenshot({ path: join(shots, "index.png"), fullPage: true });
const lesson = process.env.SHOT_PAGE || "06_pipeline_parallel.html";  // its measured 1F1B schedule
await shot.goto(base + lesson);
await shot.locator("img").nth(Number(process.env.SHOT_IMAGE || 2)).scrollIntoViewIfNeeded();
await shot.evaluate(() => window.scrollBy(0, -250));
await shot.screenshot({ path: join(shots, lesson.replace(".html", ".png")) });
console.log(`screenshots: ${join(shots, "index.png")}, ${join(shots, lesson.replace(".html", ".png"))}`);

await browser.close();
server.close();
if (problems.length) {
  console.error(`\n${problems.length} problem(s):\n  ` + problems.join("\n  "));
  process.exit(1);
}
console.log(`every page of ${Object.keys(expected).length} loads, every picture shows, every link answers`);
