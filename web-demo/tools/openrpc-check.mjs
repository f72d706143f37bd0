// Fetches `rpc.discover` from a running server and validates the answer against the
// OpenRPC 1.3 meta-schema; also compiles every schema in it as JSON Schema draft-07.
//
//   node --experimental-websocket tools/openrpc-check.mjs ws://127.0.0.1:PORT/rpc [NAME...]
//
// Each NAME must be a method of the document. Exits non-zero on the first problem.
import { createRequire } from 'node:module';
import { connect } from 'jsonrpc-peer';

const require = createRequire(import.meta.url);
const Ajv = require('ajv').default;
const openrpcMeta = require('@open-rpc/meta-schema').default;
const jsonSchemaMeta = require('@json-schema-tools/meta-schema').default;

const [url, ...expected] = process.argv.slice(2);
if (!url) {
  console.error('usage: openrpc-check.mjs WS_URL [METHOD...]');
  process.exit(2);
}

const peer = await connect(url, { timeoutMs: 10000 });
const doc = await peer.call('rpc.discover');
peer.close();

// The meta-schema refers to the JSON Schema meta-schema by its id; both are local.
const meta = new Ajv({ strict: false, allErrors: true, validateSchema: false, validateFormats: false });
meta.addSchema(jsonSchemaMeta);
meta.addSchema(jsonSchemaMeta, 'https://meta.json-schema.tools'); // referred to without the slash too
const validate = meta.compile(openrpcMeta);
if (!validate(doc)) {
  console.error(JSON.stringify(validate.errors, null, 2));
  throw new Error(`${url}: the rpc.discover document is not valid OpenRPC`);
}

// Every schema in it is draft-07 that a validator accepts; $refs resolve.
const draft07 = new Ajv({ strict: false, validateFormats: false });
draft07.addSchema({ $id: 'urn:openrpc:doc', components: doc.components ?? {} });
const schemas = [];
for (const m of doc.methods) {
  for (const p of m.params) schemas.push([`${m.name} param ${p.name}`, p.schema]);
  if (m.result) schemas.push([`${m.name} result`, m.result.schema]);
}
for (const [where, schema] of schemas) {
  const rebased = JSON.parse(JSON.stringify(schema).replaceAll('"#/components/', '"urn:openrpc:doc#/components/'));
  try {
    draft07.compile(rebased);
  } catch (e) {
    throw new Error(`${url}: ${where}: ${e.message}`);
  }
}

const names = doc.methods.map((m) => m.name);
for (const name of expected) {
  if (!names.includes(name)) throw new Error(`${url}: ${name} is not in the document (${names.join(', ')})`);
}
console.log(`${doc.info.title} ${doc.info.version}: valid OpenRPC ${doc.openrpc}, ${names.length} methods: ${names.join(', ')}`);
