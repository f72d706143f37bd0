// A page's worth of the package for push-ticker.test.mjs, run in a process of its own
// under `node --experimental-websocket` (Node 20 has no global WebSocket without it): a
// reconnecting link to URL follows TOPIC and prints every callback and link state as one
// JSON line. Ends when its stdin does.
//
//   node --experimental-websocket follow-client.mjs URL TOPIC
import { reconnecting } from 'jsonrpc-peer';

const [url, topic] = process.argv.slice(2);
const out = (line) => process.stdout.write(JSON.stringify(line) + '\n');

const link = reconnecting(url, {
  backoff: { initialMs: 20, maxMs: 100 },
  timeoutMs: 5000,
  onHandlerError: (e, where) => out({ ev: 'error', where, message: String(e) }),
});
link.addEventListener('statechange', (/** @type {any} */ ev) => out({ ev: 'state', state: ev.detail.state }));
link.topic(topic, {
  onData: (data, info) => out({ ev: 'data', data, ...info }),
  onMissed: (info) => out({ ev: 'missed', ...info }),
  onSubscribed: (sub) => out({ ev: 'subscribed', ...sub }),
  onFailed: (e) => out({ ev: 'failed', message: e.message }),
});

process.stdin.on('end', () => {
  link.close();
  process.exit(0);
});
process.stdin.resume();
