// Incoming traffic, to the letter of the JSON-RPC 2.0 specification: every example of
// shared/seed-examples.md (from tests/fixtures/spec-examples.json, shared with the Rust and
// Python suites), then the rules around them. Raw frames in, raw frames out.
import { readFileSync } from 'node:fs';
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { Peer, RpcError } from 'jsonrpc-peer';
import { FakeSocket, byId, within, signal } from './helpers.mjs';

/** A peer serving the specification's example methods, over a fake socket. */
function specServer() {
  const socket = new FakeSocket();
  const peer = new Peer(socket, { onHandlerError: () => {} });
  const seen = [];
  const subtract = (_cx, p) => {
    const [a, b] = Array.isArray(p) ? p : [p?.minuend, p?.subtrahend];
    if (typeof a !== 'number' || typeof b !== 'number') throw new RpcError(-32602, 'Invalid params');
    return a - b;
  };
  peer
    .method('subtract', subtract)
    .method('sum', (_cx, p) => p.reduce((a, b) => a + b, 0))
    .method('get_data', () => ['hello', 5])
    .notification('update', (_cx, p) => seen.push(['update', p]))
    .notification('notify_sum', (_cx, p) => seen.push(['notify_sum', p]))
    .notification('notify_hello', (_cx, p) => seen.push(['notify_hello', p]));
  return { socket, peer, seen };
}

const err = (code, message, id) => ({ jsonrpc: '2.0', error: { code, message }, id });
const INVALID = (id = null) => err(-32600, 'Invalid Request', id);

/** The specification's examples, shared with tests/spec_examples.rs and the Python client. */
const SPEC_EXAMPLES = JSON.parse(
  readFileSync(new URL('../../tests/fixtures/spec-examples.json', import.meta.url), 'utf8'),
);

/** What this suite checks beyond the answers, by fixture case: the handlers ran, once. */
const afterCase = {
  notifications_get_no_answer: ({ seen }) => {
    assert.deepEqual(seen, [['update', [1, 2, 3, 4, 5]]]);
  },
  batch_of_calls_valid_and_invalid: ({ socket, seen }) => {
    assert.equal(socket.sent.length, 1, 'one frame for the whole batch');
    assert.deepEqual(seen, [['notify_hello', [7]]]);
  },
  batch_of_notifications_gets_nothing: ({ seen }) => {
    assert.deepEqual(seen, [['notify_sum', [1, 2, 4]], ['notify_hello', [7]]]);
  },
};

describe('seed examples (shared/seed-examples.md, from tests/fixtures/spec-examples.json)', () => {
  // tests/spec_examples.rs checks what the fixture holds; this guards against running none
  // of it, and against an extra check whose case was renamed away.
  test('the fixture is read, and every extra check names one of its cases', () => {
    const names = SPEC_EXAMPLES.cases.map((c) => c.name);
    assert.equal(names.length, 12, "seed-examples.md's 12 code blocks");
    for (const name of Object.keys(afterCase)) assert.ok(names.includes(name), name);
  });

  for (const c of SPEC_EXAMPLES.cases) {
    test(`${c.name} (${c.section})`, async () => {
      const server = specServer();
      const { socket } = server;
      for (const [i, ex] of c.exchanges.entries()) {
        const what = `frame ${i + 1} of ${c.exchanges.length}: ${ex.send}`;
        if (ex.expect === 'exact') {
          assert.deepEqual(await socket.exchange(ex.send), ex.answer, what);
        } else if (ex.expect === 'set') {
          assert.deepEqual(byId(await socket.exchange(ex.send)), byId(ex.answer), what);
        } else if (ex.expect === 'none') {
          await socket.expectSilence(ex.send);
        } else {
          assert.fail(`unknown expect ${JSON.stringify(ex.expect)} (${what})`);
        }
      }
      afterCase[c.name]?.(server);
    });
  }
});

describe('request validity', () => {
  const cases = [
    ['jsonrpc missing', '{"method": "sum", "params": [1], "id": 7}', INVALID(7)],
    ['jsonrpc "1.0"', '{"jsonrpc": "1.0", "method": "sum", "params": [1], "id": 7}', INVALID(7)],
    ['jsonrpc 2.0 as a number', '{"jsonrpc": 2.0, "method": "sum", "params": [1], "id": "x"}', INVALID('x')],
    ['method missing', '{"jsonrpc": "2.0", "id": 7}', INVALID(7)],
    ['method null', '{"jsonrpc": "2.0", "method": null, "id": 7}', INVALID(7)],
    ['params a string', '{"jsonrpc": "2.0", "method": "sum", "params": "bar", "id": 7}', INVALID(7)],
    ['params a number', '{"jsonrpc": "2.0", "method": "sum", "params": 3, "id": 7}', INVALID(7)],
    ['params null', '{"jsonrpc": "2.0", "method": "sum", "params": null, "id": 7}', INVALID(7)],
    ['id an object: unreadable, so null', '{"jsonrpc": "2.0", "method": "sum", "params": [1], "id": {"a": 1}}', INVALID(null)],
    ['id an array', '{"jsonrpc": "2.0", "method": "sum", "params": [1], "id": [1]}', INVALID(null)],
    ['id true', '{"jsonrpc": "2.0", "method": "sum", "params": [1], "id": true}', INVALID(null)],
    ['invalid and no id', '{"jsonrpc": "2.0", "method": "sum", "params": "bar"}', INVALID(null)],
    ['a bare number', '42', INVALID()],
    ['a bare string', '"hello"', INVALID()],
    ['null', 'null', INVALID()],
    ['an object with neither method nor result', '{"jsonrpc": "2.0", "id": 1, "foo": 2}', INVALID(1)],
  ];
  for (const [name, text, expected] of cases) {
    test(name, async () => {
      const { socket } = specServer();
      assert.deepEqual(await socket.exchange(text), expected);
    });
  }

  test('"id": null is a request, answered with id null', async () => {
    const { socket } = specServer();
    assert.deepEqual(
      await socket.exchange('{"jsonrpc": "2.0", "method": "subtract", "params": [5, 2], "id": null}'),
      { jsonrpc: '2.0', result: 3, id: null },
    );
    assert.deepEqual(
      await socket.exchange('{"jsonrpc": "2.0", "method": "nope", "id": null}'),
      err(-32601, 'Method not found', null),
    );
  });

  test('ids are echoed exactly: strings, negative, fractional, zero, empty string', async () => {
    const { socket } = specServer();
    for (const id of ['abc', '', 0, -5, 1.5, 'ünïcødé ✓', '1']) {
      const answer = await socket.exchange(
        JSON.stringify({ jsonrpc: '2.0', method: 'get_data', id }),
      );
      assert.deepEqual(answer, { jsonrpc: '2.0', result: ['hello', 5], id });
    }
  });

  test('extra members do not make a request invalid', async () => {
    const { socket } = specServer();
    assert.deepEqual(
      await socket.exchange('{"jsonrpc": "2.0", "method": "sum", "params": [1, 2], "id": 1, "x": true}'),
      { jsonrpc: '2.0', result: 3, id: 1 },
    );
  });

  test('method names are not looked up on Object.prototype', async () => {
    const { socket } = specServer();
    for (const method of ['constructor', '__proto__', 'toString', 'hasOwnProperty']) {
      assert.deepEqual(
        await socket.exchange(JSON.stringify({ jsonrpc: '2.0', method, id: 1 })),
        err(-32601, 'Method not found', 1),
      );
    }
  });
});

describe('notifications are never answered', () => {
  const silent = [
    ['unknown method', '{"jsonrpc": "2.0", "method": "no_such_thing", "params": [1]}'],
    ['a request-only method called as a notification', '{"jsonrpc": "2.0", "method": "sum", "params": [1]}'],
    ['handler throws RpcError', '{"jsonrpc": "2.0", "method": "boom_rpc"}'],
    ['handler throws Error', '{"jsonrpc": "2.0", "method": "boom"}'],
    ['method registered only as a method, failing', '{"jsonrpc": "2.0", "method": "subtract", "params": {}}'],
    ['a batch of unknown notifications', '[{"jsonrpc": "2.0", "method": "a"}, {"jsonrpc": "2.0", "method": "b"}]'],
  ];
  for (const [name, text] of silent) {
    test(name, async () => {
      const { socket, peer } = specServer();
      peer
        .notification('boom_rpc', () => { throw new RpcError(1, 'x'); })
        .notification('boom', () => { throw new Error('x'); });
      await socket.expectSilence(text);
    });
  }

  test('a batch mixing notifications and one request answers only the request', async () => {
    const { socket } = specServer();
    const answer = await socket.exchange(
      '[{"jsonrpc": "2.0", "method": "nope"}, {"jsonrpc": "2.0", "method": "sum", "params": [2, 3], "id": 8}]',
    );
    assert.deepEqual(answer, [{ jsonrpc: '2.0', result: 5, id: 8 }]);
  });

  test('notification handlers run one at a time, in arrival order', async () => {
    const { socket, peer } = specServer();
    const log = [];
    const gate = signal();
    const done = signal();
    peer.notification('step', async (_cx, p) => {
      log.push(`start ${p[0]}`);
      if (p[0] === 1) await gate.promise;
      log.push(`end ${p[0]}`);
      if (p[0] === 2) done.resolve();
    });
    socket.receive('{"jsonrpc": "2.0", "method": "step", "params": [1]}');
    socket.receive('{"jsonrpc": "2.0", "method": "step", "params": [2]}');
    // A call answered after both: the notifications have been read, and 2 still waits.
    await socket.exchange('{"jsonrpc": "2.0", "method": "sum", "params": [1], "id": "after"}');
    assert.deepEqual(log, ['start 1']);
    gate.resolve();
    await within(done.promise, 1000, 'notification 2');
    assert.deepEqual(log, ['start 1', 'end 1', 'start 2', 'end 2']);
  });
});

describe('responses are routed, never answered', () => {
  test('a response to an unknown id is dropped silently', async () => {
    const { socket } = specServer();
    await socket.expectSilence('{"jsonrpc": "2.0", "result": 1, "id": 999}');
    await socket.expectSilence('{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}');
    await socket.expectSilence('[{"jsonrpc": "2.0", "result": 1, "id": 5}, {"jsonrpc": "2.0", "result": 2, "id": "x"}]');
  });

  test('an array mixing responses and requests: responses routed, requests answered', async () => {
    const { socket, peer } = specServer();
    const p = peer.call('remote', []);
    const id = (await socket.frame(0)).id;
    const answer = await socket.exchange(JSON.stringify([
      { jsonrpc: '2.0', result: 'routed', id },
      { jsonrpc: '2.0', method: 'sum', params: [1, 1], id: 'r' },
    ]));
    assert.deepEqual(answer, [{ jsonrpc: '2.0', result: 2, id: 'r' }]);
    assert.equal(await within(p), 'routed');
  });
});

test('binary frames are ignored: no answer, no effect', async () => {
  const { socket } = specServer();
  await socket.expectSilence(new Uint8Array([123, 125]).buffer);
  await socket.expectSilence(new Uint8Array([1, 2, 3]));
});
