// What a user installs: `npm pack` holds the modules, their types, README, LICENSE and
// package.json, and nothing else (no tests, no tsconfig, no node_modules). Unpacked where
// a user's project would have it, the package imports by name and its types check.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const pkg = fileURLToPath(new URL('..', import.meta.url));
const tsc = join(pkg, 'node_modules', 'typescript', 'bin', 'tsc');

/** Runs a command; resolves with its output, rejects with it on failure. */
function run(file, args, options = {}) {
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: 120000, ...options }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${file} ${args.join(' ')} failed: ${error.message}\n${stdout}${stderr}`));
      else resolve(stdout);
    });
  });
}

/** Packs the package into a fresh folder; resolves with the folder and npm's report. */
async function pack(t) {
  const dir = await mkdtemp(join(tmpdir(), 'jsonrpc-peer-pack-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const [report] = JSON.parse(await run('npm', ['pack', '--json', '--pack-destination', dir], { cwd: pkg }));
  return { dir, report };
}

test('npm pack holds the modules, their .d.ts, README, LICENSE, package.json and nothing else', async (t) => {
  const { report } = await pack(t);
  const modules = (await readdir(join(pkg, 'src'))).filter((f) => f.endsWith('.js'));
  assert.ok(modules.includes('index.js') && modules.length >= 5, `modules: ${modules}`);
  const expected = [
    'LICENSE', 'README.md', 'package.json',
    ...modules.map((m) => `src/${m}`),
    ...modules.map((m) => `types/${m.replace(/\.js$/, '.d.ts')}`),
  ].sort();
  assert.deepEqual(report.files.map((f) => f.path).sort(), expected);
  assert.equal(report.name, 'jsonrpc-peer');
  const manifest = JSON.parse(await readFile(join(pkg, 'package.json'), 'utf8'));
  assert.equal(manifest.dependencies, undefined, 'no dependencies');
  assert.equal(manifest.engines.node, '>=20');
  assert.equal(
    await readFile(join(pkg, 'LICENSE'), 'utf8'),
    await readFile(join(pkg, '..', 'LICENSE'), 'utf8'),
    "the package's LICENSE is the repository's",
  );
});

test('unpacked into a project, it imports by name and its types check a user program', async (t) => {
  assert.ok(existsSync(tsc), `no TypeScript at ${tsc}: run (cd js && npm ci)`);
  const { dir, report } = await pack(t);
  const project = join(dir, 'project');
  await mkdir(join(project, 'node_modules'), { recursive: true });
  await run('tar', ['-xzf', join(dir, report.filename), '-C', dir]);
  await rename(join(dir, 'package'), join(project, 'node_modules', 'jsonrpc-peer'));
  await writeFile(join(project, 'package.json'), '{ "type": "module" }\n');

  await writeFile(join(project, 'names.mjs'), "import * as m from 'jsonrpc-peer';\nconsole.log(JSON.stringify(Object.keys(m).sort()));\n");
  const names = JSON.parse(await run(process.execPath, [join(project, 'names.mjs')], { cwd: project }));
  assert.deepEqual(names, [
    'Batch', 'ClosedError', 'ErrorCode', 'InvalidResponseError', 'LIMITS', 'LimitError',
    'PRESENCE_JOIN', 'PRESENCE_LEAVE', 'Peer', 'ReconnectingPeer', 'RpcError', 'TimeoutError', 'TopicFollower', 'backoffDelay', 'connect', 'reconnecting',
  ]);

  // A user's TypeScript program: handlers are (cx, params), the limits are options.
  await writeFile(join(project, 'user.ts'), `
import { connect, reconnecting, LimitError, PRESENCE_JOIN, PRESENCE_LEAVE, type HandlerContext, type Member, type PresenceChange } from 'jsonrpc-peer';
const peer = await connect('ws://127.0.0.1:9/rpc', { maxPendingCalls: 10, maxBufferedAmount: 1 << 16 });
peer.method('add', (cx: HandlerContext, [a, b]: [number, number]) => (cx.progress(a), a + b));
peer.notification('tick', ({ peer: from }, n: number) => from.notify('tock', [n]));
// @ts-expect-error: the handler shape is (cx, params), not (params, peer)
peer.method('old', (params: number[], from: string) => params.length + from.length);
const link = reconnecting('ws://127.0.0.1:9/rpc', { maxQueued: 8, maxQueuedBytes: 4096, onConnect: (p) => p.notify('hi') });
// A followed topic: its data typed by the caller, the miss reported with its position.
const prices = link.topic<{ BTC: number }>('prices', {
  onData: (price, { offset }) => console.log(price.BTC.toFixed(2), offset),
  onMissed: ({ topic, epoch, offset }) => console.log(topic, epoch, offset),
  onSubscribed: ({ recovered }) => console.log(recovered ?? 'first'),
  maxHeld: 100,
});
const kept: { epoch: string; offset: number } | null = prices.position;
// @ts-expect-error: the data is what the caller said it is
link.topic<{ BTC: number }>('more', { onData: (price) => price.ETH });
console.log(kept);
// Presence: typed joins and leaves {topic, addr, info}, the members, the calls.
const room = link.topic('room', {
  info: { user: 'ana' },
  presence: true,
  onJoin: ({ topic, addr, info }) => console.log(topic.length + addr.length, info),
  onLeave: (change: PresenceChange) => console.log(change.addr),
  onPresence: (members: Member[]) => console.log(members.map((m) => m.addr)),
});
const shown: Member[] | null = room.members;
const count: number = await room.presenceCount();
const everyone: Member[] = await room.presence();
console.log(shown, count, everyone, PRESENCE_JOIN, PRESENCE_LEAVE);
// @ts-expect-error: a change's addr is a string
link.topic('room2', { onJoin: ({ addr }) => addr.toFixed() });
try {
  const n: unknown = await link.call('add', [1, 2], { timeoutMs: 100 });
  console.log(n);
} catch (e) {
  if (e instanceof LimitError) console.log(e.limit, e.value);
}
`);
  await writeFile(join(project, 'tsconfig.json'), JSON.stringify({
    compilerOptions: {
      strict: true, noEmit: true, target: 'es2022', module: 'nodenext', moduleResolution: 'nodenext',
      lib: ['es2022', 'dom'], types: [],
    },
    files: ['user.ts'],
  }));
  await run(process.execPath, [tsc, '-p', join(project, 'tsconfig.json')], { cwd: project });
});
