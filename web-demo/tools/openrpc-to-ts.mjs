// TypeScript types for an API from its OpenRPC document (as `rpc.discover` serves it):
// params and result types by json-schema-to-typescript, maps of the methods and
// notifications of each side, and a typed view of the peer (types only, no code).
//
//   node --experimental-websocket tools/openrpc-to-ts.mjs WS_URL OUT.json OUT.d.ts
//       fetches the document, writes it and its types
//   node tools/openrpc-to-ts.mjs --from OUT.json OUT.d.ts
//       types from a document already written
import { readFile, writeFile } from 'node:fs/promises';
import { pathToFileURL } from 'node:url';
import { compile } from 'json-schema-to-typescript';

const pascal = (name) => name.split(/[^A-Za-z0-9]+/).filter(Boolean).map((w) => w[0].toUpperCase() + w.slice(1)).join('');

/** @param {any} doc an OpenRPC document @returns {Promise<string>} a .d.ts module */
export async function toTypeScript(doc) {
  const properties = {};
  const entries = [];
  for (const m of doc.methods) {
    const base = pascal(m.name);
    const p = m.params ?? [];
    let params = '[] | undefined';
    if (m['x-params'] === 'whole') {
      properties[`${base}Params`] = { ...p[0].schema, title: `${base}Params` };
      params = `${base}Params`;
    } else if (p.length > 0) {
      const named = {
        title: `${base}Params`, type: 'object', additionalProperties: false,
        properties: Object.fromEntries(p.map((d) => [d.name, d.schema])),
        required: p.filter((d) => d.required).map((d) => d.name),
      };
      const positional = {
        title: `${base}Positional`, type: 'array', items: p.map((d) => d.schema),
        minItems: p.filter((d) => d.required).length, maxItems: p.length, additionalItems: false,
      };
      const structure = m.paramStructure ?? 'either';
      const kinds = [];
      if (structure !== 'by-position') { properties[named.title] = named; kinds.push(named.title); }
      if (structure !== 'by-name') { properties[positional.title] = positional; kinds.push(positional.title); }
      params = kinds.join(' | ');
    }
    let result = null;
    if (m.result) {
      properties[`${base}Result`] = { ...m.result.schema, title: `${base}Result` };
      result = `${base}Result`;
    }
    const clients = (m['x-implemented-by'] ?? []).includes('client');
    entries.push({ name: m.name, params, result, clients });
  }
  const root = {
    title: 'ApiTypes', type: 'object', additionalProperties: false, properties,
    components: doc.components ?? {},
  };
  const types = await compile(root, 'ApiTypes', {
    bannerComment: '', additionalProperties: false, unreachableDefinitions: false, format: true,
  });
  const map = (filter, shape) => entries.filter(filter).map((e) => `  ${JSON.stringify(e.name)}: ${shape(e)};`).join('\n');
  return `// Generated from the OpenRPC document of ${doc.info.title} ${doc.info.version} by
// tools/openrpc-to-ts.mjs: do not edit. CI regenerates it and fails when it differs.
import type { HandlerContext, ReconnectingPeer, TopicFollower, TopicOptions } from 'jsonrpc-peer';

${types.replace(/^export interface ApiTypes \{[\s\S]*?\n\}\n/m, '')}
/** Methods the server serves: the page calls them. */
export interface ServerMethods {
${map((e) => e.result && !e.clients, (e) => `{ params: ${e.params}; result: ${e.result} }`)}
}
/** Methods the page serves (\`x-implemented-by: client\`): the server calls them. */
export interface ClientMethods {
${map((e) => e.result && e.clients, (e) => `{ params: ${e.params}; result: ${e.result} }`)}
}
/** Notifications the server sends: the page handles them. */
export interface ServerNotifications {
${map((e) => !e.result && e.clients, (e) => e.params)}
}
/** Notifications the page sends: the server handles them. */
export interface ClientNotifications {
${map((e) => !e.result && !e.clients, (e) => e.params)}
}

type CallOptions = Parameters<ReconnectingPeer['call']>[2];
type Args<P> = [] extends P ? [params?: P, options?: CallOptions] : undefined extends P ? [params?: P, options?: CallOptions] : [params: P, options?: CallOptions];
type Answer<R> = R | Promise<R>;
/** What a followed topic hands over: the \`data\` of a notification on a topic with history, else its params. */
type DataOf<P> = P extends { offset: number; data: infer D } ? D : P;

/** The page's peer seen through this API: only described names, with their types. */
export interface TypedPeer {
  call<M extends keyof ServerMethods>(method: M, ...args: Args<ServerMethods[M]['params']>): Promise<ServerMethods[M]['result']>;
  notify<N extends keyof ClientNotifications>(method: N, ...args: Args<ClientNotifications[N]>): Promise<void>;
  method<M extends keyof ClientMethods>(name: M, handler: (cx: HandlerContext, params: ClientMethods[M]['params']) => Answer<ClientMethods[M]['result']>): this;
  notification<N extends keyof ServerNotifications>(name: N, handler: (cx: HandlerContext, params: ServerNotifications[N]) => unknown): this;
  topic<N extends keyof ServerNotifications>(name: N, options?: TopicOptions<DataOf<ServerNotifications[N]>>): TopicFollower;
}

/** A ReconnectingPeer typed by this API: cast what reconnecting() returns to it. */
export type DemoPeer = TypedPeer & Omit<ReconnectingPeer, 'call' | 'notify' | 'method' | 'notification' | 'topic'>;
`;
}

// Run as a script (not when a test imports `toTypeScript`).
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const args = process.argv.slice(2);
  if (args[0] === '--from') {
    const doc = JSON.parse(await readFile(args[1], 'utf8'));
    await writeFile(args[2], await toTypeScript(doc));
  } else if (args.length === 3) {
    const { connect } = await import('jsonrpc-peer');
    const peer = await connect(args[0], { timeoutMs: 10000 });
    const doc = await peer.call('rpc.discover');
    peer.close();
    await writeFile(args[1], JSON.stringify(doc, null, 2) + '\n');
    await writeFile(args[2], await toTypeScript(doc));
  } else if (args.length > 0) {
    console.error('usage: openrpc-to-ts.mjs WS_URL OUT.json OUT.d.ts | --from DOC.json OUT.d.ts');
    process.exit(2);
  }
}
