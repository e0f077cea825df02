// Drives rmq's dashboard in Debian's headless Chromium, as a user would:
// run by crates/rmq-serve/tests/dashboard.rs, which starts Redis and the
// server and fills the topics first. Exits non-zero with a message on the
// first expectation that fails; screenshots go to OUT (test artifacts).
//
// usage: node dashboard.mjs MODE BASE_URL OUT [TOKEN]
//   MODE actions   : find a depth, look a key up and cancel it, requeue a
//                    dead letter by clicking, pause, an XSS payload as text
//   MODE read-only : every page without a single action button
//   MODE load      : the overview of many topics; prints its load time
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";

const [mode, base, out, token] = process.argv.slice(2);
mkdirSync(out, { recursive: true });

function expect(cond, what) {
  if (!cond) throw new Error(`expected: ${what}`);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = await browser.newPage({ viewport: { width: 1360, height: 900 } });
const problems = [];
page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
page.on("console", (m) => { if (m.type() === "error") problems.push(`console: ${m.text()}`); });
page.on("dialog", (d) => d.accept());

const shot = (name) => page.screenshot({ path: `${out}/${name}.png`, fullPage: true });
const status = () => page.locator("#status").innerText();
const go = async (hash) => {
  await page.goto(`${base}${hash}`);
  await page.waitForLoadState("networkidle");
};
const cell = (topic, col) => page.locator(`tr[data-topic="${topic}"] td[data-col="${col}"]`);

try {
  if (mode === "actions") {
    await go("");
    await page.fill("#token", token);
    await page.click("#token-form button");
    // The overview shows the topic and its depth.
    await cell("orders", "due_now").waitFor();
    expect((await cell("orders", "due_now").innerText()) === "12", "orders shows 12 due now");
    await shot("overview");

    // Look a key up, then cancel it.
    await go("#/topic/orders/lookup/order-7");
    await page.locator("[data-testid=state]").waitFor();
    expect((await page.innerText("[data-testid=state]")) === "pending", "order-7 is pending");
    await shot("lookup");
    await page.click("button[data-action=Cancel]");
    await page.waitForFunction(() => document.querySelector("#status").innerText.includes("cancel order-7"));
    expect((await status()).includes("cancel order-7: cancelled"), `the cancel is confirmed (${await status()})`);
    await page.locator("[data-testid=state]").waitFor();
    await page.waitForFunction(() => document.querySelector("[data-testid=state]")?.innerText === "absent");

    // The keys "." and ".." are looked up and cancelled like any other.
    for (const key of [".", ".."]) {
      await go(`#/topic/dots/lookup/${encodeURIComponent(key)}`);
      // The previous lookup's state may still be on the page: wait for this key's.
      const shown = await page.waitForFunction(
        (k) => document.querySelector("[data-testid=lookup-key]")?.value === k && document.querySelector("[data-testid=state]")?.innerText,
        key, { timeout: 10000 }).then((h) => h.jsonValue(), () => null);
      expect(shown === "pending", `the key ${key} is pending (the page shows ${shown})`);
      await page.click("button[data-action=Cancel]");
      await page.waitForFunction((k) => document.querySelector("#status").innerText.includes(`cancel ${k}: cancelled`), key);
    }

    // A key that is not UTF-8 shows as base64, and its dead letter is
    // requeued and looked up by clicking.
    await go("#/topic/dots/dead");
    const binary = page.locator('tr[data-key="base64://5i"]');
    await binary.waitFor();
    expect((await binary.innerText()).includes("base64:/wA="), "its payload shows as base64");
    await binary.locator("button[data-action=Requeue]").click();
    await page.waitForFunction(() => document.querySelector("#status").innerText.includes("1 requeued"));
    await go("#/topic/dots/lookup64/%2F%2F5i");
    await page.waitForFunction(() => document.querySelector("[data-testid=state]")?.innerText === "pending", null, { timeout: 10000 });
    await shot("binary-key");

    // Requeue a dead letter by clicking: it is pending again.
    await go("#/topic/orders/dead");
    const row = page.locator('tr[data-key="broken-1"]');
    await row.waitFor();
    expect((await row.innerText()).includes("card declined"), "the dead letter shows its error");
    await shot("dead-letters");
    await row.locator("button[data-action=Requeue]").click();
    await page.waitForFunction(() => document.querySelector("#status").innerText.includes("1 requeued"));
    await go("#/topic/orders/lookup/broken-1");
    await page.locator("[data-testid=state]").waitFor();
    expect((await page.innerText("[data-testid=state]")) === "pending", "broken-1 is pending again");

    // Payloads and keys are text: the XSS message renders, inert.
    await go("#/topic/orders/pending");
    await page.locator("[data-testid=pending]").waitFor();
    const text = await page.innerText("[data-testid=pending]");
    expect(text.includes("<script>window.__xss=1</script>"), "the script payload shows as text");
    expect(text.includes("<img src=x onerror=window.__xss=2>"), "the img key shows as text");
    expect(await page.evaluate(() => window.__xss === undefined), "no injected script ran");
    expect((await page.locator("[data-testid=pending] img, [data-testid=pending] script").count()) === 0, "no element was injected");
    await shot("pending");

    // Pause from the page; the badge says so.
    await go("#/topic/orders/charts");
    await page.click("button[data-action=Pause]");
    await page.locator("[data-testid=paused]").waitFor();
    // The flow limits show beside the kind: the cap, and how full the bound is.
    expect((await page.innerText("[data-testid=cap]")) === "≤ 50 in flight", `the cap shows (${await page.innerText("[data-testid=cap]")})`);
    const bound = await page.innerText("[data-testid=bound]");
    expect(/^1\d of 1,000 held$/.test(bound), `the bound shows how full it is (${bound})`);
    await go("#/topic/orders/charts");
    await page.locator(".chart svg").first().waitFor();
    // A flat series is a path of zero height, which Playwright calls hidden:
    // wait for the lines to be drawn, not for them to have a height.
    await page.locator(".chart svg path").first().waitFor({ state: "attached" });
    await shot("charts");
    await go("#/topic/orders/slots");
    await page.locator("canvas.heat").waitFor();
    await shot("slots");
    await go("#/topic/payments/groups");
    await page.locator("text=Group workers").waitFor();
    await shot("groups");
  } else if (mode === "read-only") {
    for (const hash of ["", "#/topic/orders/charts", "#/topic/orders/lookup/order-7", "#/topic/orders/dead", "#/topic/orders/pending"]) {
      await go(hash);
      await page.locator("main h1").waitFor();
      if (hash.includes("lookup")) await page.locator("[data-testid=state]").waitFor();
      if (hash.includes("dead")) await page.locator('tr[data-key="broken-1"]').waitFor();
      const buttons = await page.locator("button[data-action]").count();
      expect(buttons === 0, `no action button on ${hash || "the overview"} (found ${buttons})`);
    }
    expect(await page.locator("#token-form").isHidden(), "no token field");
    expect((await page.innerText("#access")) === "read-only", "the badge says read-only");
    await go("#/topic/orders/dead");
    await page.locator('tr[data-key="broken-1"]').waitFor();
    await shot("read-only-dead-letters");
  } else if (mode === "load") {
    const started = Date.now();
    await page.goto(base);
    await page.locator('[data-card="topics"] .n').waitFor();
    await page.locator("[data-testid=topics] tbody tr").first().waitFor();
    const ms = Date.now() - started;
    const n = (await page.innerText('[data-card="topics"] .n')).replaceAll(",", "");
    console.log(`overview of ${n} topics loaded and drawn in ${ms} ms`);
    expect(n === token, `the overview counts ${token} topics (it says ${n})`);
    await page.fill("input[type=search]", "load-0999");
    expect((await page.locator("[data-testid=topics] tbody tr").count()) === 1, "the filter finds one topic");
    await shot("overview-1000-topics");
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
  expect(problems.length === 0, `no page errors: ${problems.join("; ")}`);
} catch (e) {
  await shot("failure").catch(() => {});
  console.error(`${mode}: ${e.message}`);
  console.error(problems.join("\n"));
  await browser.close();
  process.exit(1);
}
await browser.close();
