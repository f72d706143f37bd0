// A TCP proxy on 127.0.0.1 for tests that cut a WebSocket link the way a network does:
// push-ticker.test.mjs (the package against push_ticker) and web-demo/browser-test.mjs (a
// page whose link drops).
import net from 'node:net';

/**
 * Listens on 127.0.0.1 (a free port) and forwards each connection to 127.0.0.1:`upstream`
 * (changeable: `proxy.upstream = port`). `cut()` ends every connection through it at the
 * TCP level, so both ends see the link drop without a WebSocket close handshake; while
 * `down`, new connections are closed at once. `close()` stops it. (Not
 * `resetAndDestroy()`: with it, Node 20 left the test process spinning after the tests.)
 * @param {number} upstream
 */
export async function tcpProxy(upstream) {
  const pairs = new Set();
  const server = net.createServer((client) => {
    if (proxy.down) return void client.destroy();
    proxy.accepted += 1;
    const up = net.connect(proxy.upstream, '127.0.0.1');
    const pair = [client, up];
    pairs.add(pair);
    const end = () => (pairs.delete(pair), client.destroy(), up.destroy());
    for (const s of pair) s.on('error', end).on('close', end);
    client.pipe(up);
    up.pipe(client);
  });
  const proxy = {
    upstream,
    down: false,
    /** Connections forwarded so far. */
    accepted: 0,
    port: 0,
    cut() {
      for (const pair of pairs) for (const s of pair) s.destroy();
      pairs.clear();
    },
    close() {
      proxy.down = true;
      proxy.cut();
      return new Promise((r) => server.close(r));
    },
  };
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  proxy.port = /** @type {net.AddressInfo} */ (server.address()).port;
  return proxy;
}
