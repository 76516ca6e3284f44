// Screenshots of the layout lab as a learner sees it in JupyterLab: the panel as it opens,
// after TP is changed to 3 (grid and named violations update), and after "Run this layout" (the curve).
// Needs Debian's chromium and playwright-core (npm); JupyterLab from the kit's .venv. Usage:
//   .venv/bin/jupyter lab --no-browser --port 8899 --ServerApp.token= --ServerApp.password= \
//       --ServerApp.root_dir=notebooks &
//   node docs/layout_lab/shoot.mjs http://127.0.0.1:8899 docs/layout_lab
// It runs only the first three cells of notebooks/09_layout_lab.ipynb (parameters, imports, the panel),
// then drives the widgets with the mouse and keyboard like a person.
import { chromium } from "playwright-core";

const [base, out] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"],
});
const page = await browser.newPage({ viewport: { width: 1500, height: 2600 } });  // the whole panel on screen
await page.goto(`${base}/lab/tree/09_layout_lab.ipynb`);
await page.waitForSelector(".jp-Notebook .jp-Cell", { timeout: 180_000 });
await page.waitForSelector(".jp-Notebook-ExecutionIndicator[data-status='idle'], .jp-mod-idle, text=Idle",
                           { timeout: 180_000 }).catch(() => {});
await page.waitForTimeout(4000);  // kernel start
await page.getByRole("button", { name: "No" }).click({ timeout: 5000 }).catch(() => {});  // JupyterLab's news toast

// run the first three cells: parameters, imports, the panel
await page.locator(".jp-Notebook .jp-Cell").first().click();
for (let i = 0; i < 3; i++) {
  await page.keyboard.press("Shift+Enter");
  await page.waitForTimeout(1500);
}
const panel = page.locator(".widget-vbox").first();
await panel.waitFor({ timeout: 180_000 });
await page.waitForTimeout(8000);  // first grids and memory bars
const shot = async (name) => {
  const cell = page.locator(".jp-Notebook .jp-Cell").nth(2);
  await cell.scrollIntoViewIfNeeded();
  await cell.screenshot({ path: `${out}/${name}.png` });
  console.log(`wrote ${out}/${name}.png`);
};
await shot("1_opened");

// change TP to 3: heads and query groups no longer divide, the world does not either
const tp = page.locator(".widget-inline-hbox", { has: page.locator("label", { hasText: /^TP$/ }) }).locator("input");
await tp.fill("3");
await tp.press("Enter");
await page.waitForTimeout(6000);
await shot("2_tp3_violations");

// back to TP=2 and run the layout for real
await tp.fill("2");
await tp.press("Enter");
await page.waitForTimeout(6000);
await page.getByRole("button", { name: /Run this layout/ }).click();
await page.waitForFunction(() => document.body.innerText.includes("final loss"), null, { timeout: 300_000 });
await page.waitForTimeout(5000);
await shot("3_ran");
await browser.close();
