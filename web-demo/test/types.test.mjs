// The page is type-checked against the API the server describes: a change on the Rust
// side that app.js no longer matches fails `tsc --checkJs`. The changes are made to
// copies in a temporary folder, never to the shipped files.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFile, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { toTypeScript } from '../tools/openrpc-to-ts.mjs';

const demo = fileURLToPath(new URL('..', import.meta.url));
const tsc = join(demo, 'node_modules', 'typescript', 'bin', 'tsc');

/** Type-checks app.js in a copy of the page whose API document is `doc`. */
async function check(t, doc) {
  const dir = await mkdtemp(join(tmpdir(), 'demo-types-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  for (const f of ['app.js', 'tsconfig.json']) await copyFile(join(demo, f), join(dir, f));
  // The page imports the jsonrpc-peer package by name, from the demo's node_modules.
  await symlink(join(demo, 'node_modules'), join(dir, 'node_modules'), 'dir');
  await writeFile(join(dir, 'demo-api.d.ts'), await toTypeScript(doc));
  return new Promise((resolve) => {
    execFile(process.execPath, [tsc, '-p', join(dir, 'tsconfig.json')], { timeout: 120000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (error.code ?? 1) : 0, out: stdout + stderr });
    });
  });
}

const served = async () => JSON.parse(await readFile(join(demo, 'demo-api.openrpc.json'), 'utf8'));
const method = (doc, name) => doc.methods.find((m) => m.name === name);

// Each check is a tsc run of several seconds (many more on a busy machine): they run at
// once, so that the file stays within the runner's timeout.
describe('app.js against the API document', { concurrency: true }, () => {
  test('the page matches the API the server describes', async (t) => {
    const { code, out } = await check(t, await served());
    assert.equal(code, 0, out);
  });

  test('a params field renamed on the server fails the check at the call', async (t) => {
    const doc = await served();
    const text = method(doc, 'chat.send').params.find((p) => p.name === 'text');
    text.name = 'body';
    const { code, out } = await check(t, doc);
    assert.notEqual(code, 0, 'tsc accepted a call the server would refuse');
    assert.match(out, /app\.js\(\d+,\d+\): error TS\d+/);
    assert.match(out, /'text'|body/, out);
  });

  test("a result field the page's handler does not give fails the check at the handler", async (t) => {
    const doc = await served();
    const ref = method(doc, 'ui.describe').result.schema.$ref;
    const schema = doc.components.schemas[ref.split('/').pop()];
    schema.properties.platform = { type: 'string' };
    schema.required.push('platform');
    const { code, out } = await check(t, doc);
    assert.notEqual(code, 0, 'tsc accepted a ui.describe answer without platform');
    assert.match(out, /platform/, out);
  });

  test("a chat line's field renamed on the server fails the check where the followed topic's data is shown", async (t) => {
    const doc = await served();
    const line = doc.components.schemas.ChatMessage;
    line.properties.body = line.properties.text;
    delete line.properties.text;
    line.required = line.required.map((f) => (f === 'text' ? 'body' : f));
    const { code, out } = await check(t, doc);
    assert.notEqual(code, 0, 'tsc accepted chat lines without text');
    assert.match(out, /app\.js\(\d+,\d+\): error TS\d+.*'text'/, out);
  });
});
